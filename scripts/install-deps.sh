#!/usr/bin/env bash
# Installs the named Debian packages that are missing (their commands are the
# package names). Needs root for apt-get; otherwise says what to run.
set -euo pipefail
missing=()
for pkg in "$@"; do
  command -v "$pkg" >/dev/null 2>&1 || [ -x "/usr/sbin/$pkg" ] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing: ${missing[*]}; install with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
