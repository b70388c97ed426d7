#!/usr/bin/env bash
# Installs moto (PyPI moto[server], an emulator of AWS APIs), which the ec2
# driver's tests run on 127.0.0.1, in a virtualenv: ~/.cache/shoal-venv, or
# $SHOAL_VENV. Python 3 and its venv module come from Debian (python3,
# python3-venv) when missing. The tests find moto_server there (see
# internal/testmoto).
set -euo pipefail
MOTO_VERSION=5.2.5
venv=${SHOAL_VENV:-$HOME/.cache/shoal-venv}
if [ -x "$venv/bin/moto_server" ] && [ "$("$venv/bin/python3" -c 'import importlib.metadata as m; print(m.version("moto"))' 2>/dev/null)" = "$MOTO_VERSION" ]; then
  exit 0
fi
bash "$(dirname "$0")/install-deps.sh" python3
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing: python3-venv; install with: sudo apt-get install -y python3-venv" >&2
    exit 1
  fi
  echo "installing python3-venv with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq python3-venv >/dev/null
fi
echo "installing moto[server]==$MOTO_VERSION in $venv" >&2
python3 -m venv "$venv"
"$venv/bin/pip" install -q "moto[server]==$MOTO_VERSION"
