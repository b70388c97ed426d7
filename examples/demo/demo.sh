#!/usr/bin/env bash
# make demo: starts shoal on examples/demo/shoal.yaml, sends steady keep-alive
# load through 127.0.0.1:8080, scales the group up the plan ladder and back down
# with the CLI, and reports requests and failures. Everything stops on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
cfg=examples/demo/shoal.yaml
state=examples/demo/.shoal
shoal="bin/shoal"
mkdir -p "$state"
log="$state/shoal.log"
load_out="$state/load.txt"
shoal_pid="" load_pid=""

cleanup() {
  trap - EXIT INT TERM
  [ -n "$load_pid" ] && kill -INT "$load_pid" 2>/dev/null && wait "$load_pid" 2>/dev/null || true
  if [ -n "$shoal_pid" ] && kill -0 "$shoal_pid" 2>/dev/null; then
    echo "== stopping shoal (SIGINT: HAProxy and every instance stop; SIGTERM would leave them serving)"
    kill -INT "$shoal_pid"; wait "$shoal_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '\n== %s\n' "$*"; }
status() { "$shoal" status -c "$cfg"; }

step "starting shoal (logs: $log)"
"$shoal" serve -c "$cfg" >"$log" 2>&1 &
shoal_pid=$!
for _ in $(seq 100); do
  "$shoal" status -c "$cfg" -o json 2>/dev/null | grep -q '"in_service": 2' && break
  kill -0 "$shoal_pid" 2>/dev/null || { echo "shoal exited:"; tail -20 "$log"; exit 1; }
  sleep 0.2
done
status

step "steady load: 8 keep-alive connections to http://127.0.0.1:8080/"
bin/loadgen -url http://127.0.0.1:8080/ -c 8 -d 0 -H 'Accept-Encoding: gzip' >"$load_out" 2>&1 &
load_pid=$!
sleep 2

for dir in up up; do
  step "shoal scale web $dir --sync"
  "$shoal" scale web "$dir" --sync -c "$cfg"
  status
  sleep 4   # the demo's cooldown is 3s
done
for dir in down down; do
  step "shoal scale web $dir --sync"
  "$shoal" scale web "$dir" --sync -c "$cfg"
  status
  sleep 4
done

step "a scale-down below min_size is ignored, with the reason"
"$shoal" scale web down -c "$cfg" || echo "(exit status $?: ignored)"

step "jobs"
"$shoal" jobs -c "$cfg" --limit 6

step "load result"
kill -INT "$load_pid"; wait "$load_pid" && rc=0 || rc=$?
load_pid=""
cat "$load_out"
[ "$rc" -eq 0 ] && echo "== 0 failed requests while scaling 2 → 3 → 5 → 3 → 2" || echo "== some requests failed (see above)"
exit "$rc"
