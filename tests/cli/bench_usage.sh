#!/usr/bin/env bash
# bench_usage.sh BENCH: bench_plan's command line: --help prints the usage and
# exits 0 without running anything; an unknown flag exits 2 with the usage.
set -u
BENCH=$1
. "$(dirname "$0")/lib.sh"
out=$("$BENCH" --help 2>&1)
rc=$?
if [ "$rc" -ne 0 ] || ! printf '%s\n' "$out" | grep -q '^usage: bench_plan' ||
  printf '%s\n' "$out" | grep -q '^bench=plan'; then
  echo "FAIL: --help exit $rc, output:" >&2
  printf '%s\n' "$out" >&2
  fails=$((fails + 1))
fi
"$BENCH" --frobnicate >/dev/null 2>"${TMPDIR:-/tmp}/bench_usage.$$"
rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "unknown option '--frobnicate'" "${TMPDIR:-/tmp}/bench_usage.$$" ||
  ! grep -q '^usage: bench_plan' "${TMPDIR:-/tmp}/bench_usage.$$"; then
  echo "FAIL: unknown flag exit $rc" >&2
  fails=$((fails + 1))
fi
rm -f "${TMPDIR:-/tmp}/bench_usage.$$"
summary bench_usage 2
