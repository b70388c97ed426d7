#!/usr/bin/env bash
# make test's tests: the packages' tests beside the end-to-end suite's
# shared part, then the suite's steps that run alone; beside them all, the
# config parser's fuzz run, niced: it takes what they leave of the machine.
# The packages' tests bound times of their own (VIP handovers, holds, log
# following) that the suite's steps alone (a saturated CPU, load at full
# speed) pushed past when both ran at once: the suite holds those steps
# until the packages are done (SHOAL_E2E_LINE_AFTER,
# test/e2e/machine_sched_test.go). Each part prints its end time;
# PARTS="packages e2e" runs only the parts named.
set -uo pipefail
GO=${GO:-go}
PKG_P=${PKG_P:-4}
# Test binaries and the binaries tests build are linked without DWARF
# (-w): a test binary links in 55 % of the CPU time, and make test links
# over a hundred (about 35 CPU-seconds saved). Stack traces do not need it.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-ldflags=-w"
E2E=${E2E:-./test/e2e/}
PARTS=${PARTS:-packages e2e fuzz}

# TEST_JSON_DIR=DIR keeps go test's -json events of each part there (per-test
# times: the slowest tests, how long each waited for the machine).
json=()
out_pkgs=/dev/stdout
out_e2e=/dev/stdout
if [[ -n ${TEST_JSON_DIR:-} ]]; then
	mkdir -p "$TEST_JSON_DIR"
	json=(-json)
	out_pkgs=$TEST_JSON_DIR/packages.json
	out_e2e=$TEST_JSON_DIR/e2e.json
fi

# Each part's output is kept too, so that the end can repeat what failed
# (a package whose binary panicked or died prints no "--- FAIL" line, and
# CI shows the output's tail).
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
wants() { [[ " $PARTS " == *" $1 "* ]]; }
part() {
	local name=$1
	shift
	wants "$name" || return 0
	"$@" 2>&1 | tee "$logs/$name"
	local rc=${PIPESTATUS[0]}
	echo "$rc" >"$logs/$name.rc"
	echo "make test: $name rc $rc at ${SECONDS} s" >&2
}

# digest prints a failed part's failures: tests, packages, panics, fatal
# errors and timeouts, with the lines that say where.
digest() {
	local f=$logs/$1
	if [[ -n ${TEST_JSON_DIR:-} ]]; then
		f=$TEST_JSON_DIR/$1.json
	fi
	echo "make test: what failed in $1:" >&2
	grep -E -A4 -e '(--- FAIL|^FAIL|panic:|fatal error:|test timed out|signal: )' "$f" | grep -v -e '^\s*time=' | head -60 >&2
}

# test/package first: its Debian root's apt and dpkg take 80-110 s, mostly
# waiting (240-290 s beside the suite), so they do not start last and run on
# alone. (All the slowest first failed their timing tests beside each other;
# the emulated clouds' and hosts' right after it, beside the suite's first
# and heaviest tests, took twice as long and ended the part later.)
packages() {
	local pkgs
	mapfile -t pkgs < <(
		$GO list ./test/package
		$GO list ./... | grep -v -e /test/e2e -e /test/package
	)
	$GO test "${json[@]}" -count=1 -timeout 12m -p "$PKG_P" "${pkgs[@]}" >"$out_pkgs"
}

# -parallel 512, more than the suite has tests: the suite bounds how many
# run side by side itself and starts the longest first
# (test/e2e/machine_sched_test.go); go test's slots only hold them there.
e2e() {
	$GO test "${json[@]}" -count=1 -timeout 25m -parallel 512 "$E2E" >"$out_e2e"
}

# A count, not a duration: a -fuzztime duration fails with "context deadline
# exceeded" when a starved worker misses the deadline (go.dev/issue/75804,
# fixed in Go 1.27). At the lowest priority: it runs beside the other parts
# and takes only what they leave of the machine.
fuzz() {
	nice -n 19 $GO test -count=1 -run '^$' -fuzz FuzzParse -fuzztime 10000x ./internal/config/
}

# The fuzz run (about 25 CPU-seconds, compiling included) starts first:
# the packages' part leaves 5-10 % of the machine idle (tests waiting on
# processes), enough for it, so it no longer runs by itself for 16 s at
# the end.
part fuzz fuzz &
fuzz_pid=$!

if wants packages && wants e2e; then
	export SHOAL_E2E_LINE_AFTER=$logs/packages.running
	: >"$SHOAL_E2E_LINE_AFTER"
	(
		part packages packages
		rm -f "$SHOAL_E2E_LINE_AFTER"
	) &
	packages_pid=$!
	part e2e e2e
	wait "$packages_pid"
else
	part packages packages
	part e2e e2e
fi
wait "$fuzz_pid"

failed=()
for name in packages e2e fuzz; do
	if [[ -f $logs/$name.rc && $(<"$logs/$name.rc") != 0 ]]; then
		failed+=("$name")
	fi
done
if ((${#failed[@]})); then
	for name in "${failed[@]}"; do
		digest "$name"
	done
	echo "make test: failed: ${failed[*]}" >&2
	exit 1
fi
