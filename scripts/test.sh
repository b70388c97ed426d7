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

done_file=$(mktemp -u "${TMPDIR:-/tmp}/shoal-packages-done.XXXXXX")
trap 'rm -f "$done_file"' EXIT

mapfile -t pkgs < <($GO list ./... | grep -v /test/e2e)
(
	$GO test -count=1 -timeout 8m -p "$PKG_P" "${pkgs[@]}"
	rc=$?
	touch "$done_file"
	exit $rc
) &
pkg_pid=$!

SHOAL_E2E_ALONE_AFTER=$done_file $GO test -count=1 -timeout 25m -parallel 8 "$E2E"
e2e_rc=$?
wait $pkg_pid
pkg_rc=$?

$GO test -count=1 -run '^$' -fuzz FuzzParse -fuzztime 10s ./internal/config/
fuzz_rc=$?

if ((pkg_rc || e2e_rc || fuzz_rc)); then
	echo "make test: failed (packages rc $pkg_rc, e2e rc $e2e_rc, fuzz rc $fuzz_rc)" >&2
	exit 1
fi
