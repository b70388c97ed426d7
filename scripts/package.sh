#!/usr/bin/env bash
# make package and make dist: from the static binaries in BINDIR (shoal and
# demo-backend, built with CGO_ENABLED=0), builds
#   deb:  OUT/shoal_VERSION_amd64.deb (dpkg-deb: on every Debian, no download)
#   dist: OUT/shoal_VERSION_linux_amd64.tar.gz
# Usage: scripts/package.sh deb|dist BINDIR VERSION OUT
set -euo pipefail
kind=$1 bindir=$2 version=$3 out=$4
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# static refuses a binary that links anything: the package runs on any amd64 Linux.
for b in shoal demo-backend; do
  file -b "$bindir/$b" | grep -q 'statically linked' || { echo "$bindir/$b is not statically linked" >&2; exit 1; }
done

# docs writes the man pages and the completions into $1 (man1/, completions/).
docs() {
  "$bindir/shoal" man "$1/man1"
  mkdir -p "$1/completions"
  "$bindir/shoal" completion bash >"$1/completions/shoal.bash"
  "$bindir/shoal" completion zsh >"$1/completions/_shoal"
  "$bindir/shoal" completion fish >"$1/completions/shoal.fish"
}

case $kind in
deb)
  r=$work/root
  install -D -m 755 "$bindir/shoal" "$r/usr/bin/shoal"
  install -D -m 755 "$bindir/demo-backend" "$r/usr/lib/shoal/demo-backend"
  install -D -m 644 "$here/examples/systemd/shoal.service" "$r/usr/lib/systemd/system/shoal.service"
  install -D -m 644 "$here/packaging/shoal.yaml" "$r/etc/shoal/shoal.yaml"
  docs "$work/docs"
  install -d "$r/usr/share/man/man1"
  for p in "$work"/docs/man1/*.1; do gzip -9n <"$p" >"$r/usr/share/man/man1/$(basename "$p").gz"; done
  install -D -m 644 "$work/docs/completions/shoal.bash" "$r/usr/share/bash-completion/completions/shoal"
  install -D -m 644 "$work/docs/completions/_shoal" "$r/usr/share/zsh/vendor-completions/_shoal"
  install -D -m 644 "$work/docs/completions/shoal.fish" "$r/usr/share/fish/vendor_completions.d/shoal.fish"
  install -d "$r/usr/share/doc/shoal/examples"
  cp -r "$here/examples/." "$r/usr/share/doc/shoal/examples/"
  cat >"$r/usr/share/doc/shoal/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: shoal
Source: https://github.com/shoal-lb/shoal

Files: *
Copyright: the shoal authors
License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
COPYRIGHT
  rm -f "$out"/shoal_*_amd64.deb # only the latest stays in OUT
  install -d "$r/DEBIAN"
  install -m 755 "$here"/packaging/deb/{postinst,prerm,postrm} "$r/DEBIAN/"
  echo /etc/shoal/shoal.yaml >"$r/DEBIAN/conffiles"
  cat >"$r/DEBIAN/control" <<CONTROL
Package: shoal
Version: $version
Architecture: amd64
Maintainer: shoal developers <shoal@localhost>
Installed-Size: $(du -sk --exclude=DEBIAN "$r" | cut -f1)
Depends: haproxy (>= 2.6), passwd
Recommends: keepalived, nftables
Suggests: etcd-server
Section: net
Priority: optional
Homepage: https://github.com/shoal-lb/shoal
Description: self-hosted autoscaling load balancer with HAProxy as its data plane
 shoal runs HAProxy (Runtime API, hitless reloads) in front of groups of
 instances (local processes, SSH hosts, clouds) and scales them by policy.
 keepalived and nftables are for the HA pair's virtual IP; etcd for its state.
CONTROL
  # xz's fastest preset: 8 CPU-seconds instead of 50 for a package 13 %
  # larger (19 MB, not 16.8); zstd, faster still, is not read by every
  # repository tool.
  dpkg-deb --root-owner-group -Zxz -z1 --build "$r" "$out/shoal_${version}_amd64.deb" >/dev/null
  echo "$out/shoal_${version}_amd64.deb"
  ;;
dist)
  name=shoal_${version}_linux_amd64
  d=$work/$name
  install -D -m 755 "$bindir/shoal" "$d/shoal"
  docs "$d"
  cp -r "$here/examples" "$d/examples"
  cp -r "$here/docs" "$d/docs"
  cp "$here/README.md" "$here/LICENSE" "$d/"
  rm -f "$out"/shoal_*_linux_amd64.tar.gz # only the latest stays in OUT
  tar -C "$work" --owner=0 --group=0 --sort=name -czf "$out/$name.tar.gz" "$name"
  echo "$out/$name.tar.gz"
  ;;
*) echo "usage: $0 deb|dist BINDIR VERSION OUT" >&2; exit 2 ;;
esac
