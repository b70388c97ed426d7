#!/usr/bin/env bash
# Installs the Debian packages that are missing. Each argument is PACKAGE, whose
# command has the package's name, or PACKAGE:COMMAND when the command that
# shows it is installed is named differently (prometheus:promtool). Needs root
# for apt-get; otherwise says what to run.
set -euo pipefail
missing=()
for arg in "$@"; do
  pkg=${arg%%:*}
  cmd=${arg#*:}
  if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$cmd" ]; then
    case " ${missing[*]-} " in *" $pkg "*) ;; *) missing+=("$pkg") ;; esac
  fi
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
