#!/usr/bin/env bash
# Measures what clients see when an instance hangs under load: the demo config
# (examples/demo/shoal.yaml) on its own port and state dir, wrk -t1 -c16
# --timeout 10s for SECONDS, and 5 s in the first instance gets SIG: STOP
# (SIGSTOP) or USR1 (demo-backend deadlocks for good). Prints wrk's report:
# "timeout N" counts requests that waited more than 10 s.
#
#   make build && scripts/hung-wrk.sh STOP|USR1 [PORT (18481)] [SECONDS (20)]
#
# A held request only counts once it completes, so give a deadlock SECONDS
# long enough for replace_after and stop_timeout to end it (30).
set -euo pipefail
sig=${1:?usage: hung-wrk.sh STOP|USR1 [PORT] [SECONDS]}
port=${2:-18481}
secs=${3:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
shoal=$root/bin/shoal
dir=$(mktemp -d)
sed -e "s|^listen: 127.0.0.1:8080|listen: 127.0.0.1:$port|" -e "s|^state_dir: .shoal.*|state_dir: $dir/state|" \
  -e "s|\"../../bin/demo-backend\"|\"$root/bin/demo-backend\"|" "$root/examples/demo/shoal.yaml" >"$dir/shoal.yaml"
"$shoal" serve -c "$dir/shoal.yaml" >"$dir/serve.log" 2>&1 &
serve=$!
victim=
cleanup() {
  [ -n "$victim" ] && kill -CONT "$victim" 2>/dev/null || true
  "$shoal" stop -c "$dir/shoal.yaml" >/dev/null 2>&1 || kill "$serve" 2>/dev/null || true
  [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null || true
  wait "$serve" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 100); do
  [ "$("$shoal" instances web --state in-service -c "$dir/shoal.yaml" 2>/dev/null | wc -l)" -ge 2 ] && break
  sleep 0.3
done
wrk -t1 -c16 -d"${secs}s" --timeout 10s "http://127.0.0.1:$port/" &
load=$!
sleep 5
victim=$("$shoal" status -o json -c "$dir/shoal.yaml" |
  python3 -c 'import json,sys; print(sorted(json.load(sys.stdin)["groups"][0]["instances"], key=lambda i: i["name"])[0]["pid"])')
kill -"$sig" "$victim"
echo "SIG$sig to pid $victim" >&2
wait "$load"
