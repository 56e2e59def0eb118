#!/bin/bash
# flakerun.sh: run test packages again and again beside a CPU burner and
# count the runs that fail (issue 30: a test's verdict must not depend on the
# machine's load). Prints one row a package: runs, failures, the tests that
# failed, and the load average seen while it ran.
#
#   FLAKE_RUNS=20 FLAKE_BURN=6 scripts/flakerun.sh [-run REGEX] PACKAGE...
#
# FLAKE_RUNS (default 20): runs a package. FLAKE_BURN (default 4): busy
# processes started beside the runs (0 for none). -run limits each run to
# the tests REGEX matches. Logs of failed runs are kept in FLAKE_LOGS
# (default a temporary directory, printed at the end).
set -u
runs=${FLAKE_RUNS:-20}
burn=${FLAKE_BURN:-4}
logs=${FLAKE_LOGS:-$(mktemp -d /tmp/idem-flakes.XXXXXX)}
run=()
if [ "${1:-}" = "-run" ]; then run=(-run "$2"); shift 2; fi
if [ $# -eq 0 ]; then echo "usage: scripts/flakerun.sh [-run REGEX] PACKAGE..." >&2; exit 2; fi
go=${GO:-go}
mkdir -p "$logs"
pids=()
cleanup() { [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; }
trap cleanup EXIT
for ((b = 0; b < burn; b++)); do (while :; do :; done) & pids+=($!); done
load() { cut -d' ' -f1 /proc/loadavg; }
printf '| package | runs | failures | failed tests | load (1-min, min–max) |\n|---|---|---|---|---|\n'
status=0
for pkg in "$@"; do
	fails=0 lo=999 hi=0 names=""
	for ((i = 1; i <= runs; i++)); do
		l=$(load)
		lo=$(awk -v a="$lo" -v b="$l" 'BEGIN{print (b<a)?b:a}')
		hi=$(awk -v a="$hi" -v b="$l" 'BEGIN{print (b>a)?b:a}')
		out="$logs/$(echo "$pkg" | tr '/.' '__').$i.log"
		if ! $go test -race -count=1 "${run[@]}" "$pkg" >"$out" 2>&1; then
			fails=$((fails + 1))
			names="$names $(grep -oE -- '--- FAIL: [^ ]+' "$out" | awk '{print $3}' | sort -u | tr '\n' ' ')"
			grep -q -- '--- FAIL' "$out" || names="$names no-FAIL-line(panic,timeout,build)"
		else
			rm -f "$out"
		fi
	done
	[ "$fails" -gt 0 ] && status=1
	names=$(echo "$names" | tr ' ' '\n' | grep -v '^$' | sort | uniq -c | awk '{printf "%s×%s ", $2, $1}')
	printf '| %s | %d | %d | %s | %s–%s |\n' "${pkg#github.com/idem-go/idem/}" "$runs" "$fails" "${names:-–}" "$lo" "$hi"
done
echo "logs of failed runs: $logs" >&2
exit $status
