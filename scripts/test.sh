#!/usr/bin/env bash
# make test's tests: the packages' tests and the end-to-end suite side by
# side, then the config parser's fuzz run. Both mostly wait (on HAProxy,
# sshd, keepalived, etcd, pebble, moto, child processes), so together they
# take about the time of the longer one. The suite's steps that saturate the
# CPU or measure the machine wait until the packages' tests have ended
# (SHOAL_E2E_ALONE_AFTER names the file that says so), so they still have the
# machine to themselves.
set -uo pipefail
GO=${GO:-go}
PKG_P=${PKG_P:-4}
E2E=${E2E:-./test/e2e/}

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

done_file=$(mktemp -u "${TMPDIR:-/tmp}/shoal-packages-done.XXXXXX")
trap 'rm -f "$done_file"' EXIT

mapfile -t pkgs < <($GO list ./... | grep -v /test/e2e)
(
	$GO test "${json[@]}" -count=1 -timeout 8m -p "$PKG_P" "${pkgs[@]}" >"$out_pkgs"
	rc=$?
	touch "$done_file"
	exit $rc
) &
pkg_pid=$!

SHOAL_E2E_ALONE_AFTER=$done_file $GO test "${json[@]}" -count=1 -timeout 25m -parallel 16 "$E2E" >"$out_e2e"
e2e_rc=$?
wait $pkg_pid
pkg_rc=$?

$GO test -count=1 -run '^$' -fuzz FuzzParse -fuzztime 10s ./internal/config/
fuzz_rc=$?

if ((pkg_rc || e2e_rc || fuzz_rc)); then
	echo "make test: failed (packages rc $pkg_rc, e2e rc $e2e_rc, fuzz rc $fuzz_rc)" >&2
	exit 1
fi
