#!/bin/bash
# flakerun.sh: run test packages again and again on a loaded machine and
# count the runs that fail (issue 30: a test's verdict must not depend on the
# machine's load). Prints one row a package: runs, failures, the tests that
# failed, and the load average seen while it ran.
#
#   FLAKE_RUNS=20 FLAKE_JOBS=4 FLAKE_BURN=2 scripts/flakerun.sh [-run REGEX] PACKAGE...
#
# FLAKE_RUNS (default 20): runs a package. FLAKE_JOBS (default 1): packages
# run at once, each in a lane of its own (its runs one after the other, so
# that two runs of one package never share its servers' ports or files):
# the other lanes' tests are part of the load, as in CI, instead of CPU
# burnt for nothing. FLAKE_BURN (default 4): busy processes started beside
# the runs, to lift the load to the level wanted (0 for none). -run limits
# each run to the tests REGEX matches. A package's test binary is built
# once (go test -race -c) and run in the package's folder, as go test runs
# it, so the runs measure the tests, not the go command. Logs of failed
# runs are kept in FLAKE_LOGS (default a temporary directory, printed at the
# end), and each package's row so far in FLAKE_LOGS/rows/N, rewritten after
# every run: a run stopped early still shows what it ran. To stop a flake
# run, signal its first process (TERM or INT): it takes its lanes, their
# test binaries and the busy processes down with it.
set -u
runs=${FLAKE_RUNS:-20}
jobs=${FLAKE_JOBS:-1}
burn=${FLAKE_BURN:-4}
logs=${FLAKE_LOGS:-$(mktemp -d /tmp/idem-flakes.XXXXXX)}
export FLAKE_RUNREGEX=""
if [ "${1:-}" = "-run" ]; then FLAKE_RUNREGEX=$2; shift 2; fi
if [ $# -eq 0 ]; then echo "usage: scripts/flakerun.sh [-run REGEX] PACKAGE..." >&2; exit 2; fi
go=${GO:-go}
mkdir -p "$logs/bin" "$logs/rows"
pids=()
cleanup() { [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; }
trap cleanup EXIT
# tree prints pid and every process below it, parents first.
tree() {
	local c
	echo "$1"
	for c in $(pgrep -P "$1"); do tree "$c"; done
}
# killtree ends pid and the processes below it, found before any is
# ended, parents first: a lane ended first starts no next run.
killtree() {
	# shellcheck disable=SC2046 # one pid a word
	kill $(tree "$1") 2>/dev/null
}
lanes=""
# Stopped, it stops the lanes xargs started and the tests they run, which
# would otherwise go on, orphaned, into a FLAKE_LOGS a new run may use.
trap '[ -n "$lanes" ] && killtree "$lanes"; exit 143' TERM INT
for ((b = 0; b < burn; b++)); do (while :; do :; done) & pids+=($!); done

# lane runs one package FLAKE_RUNS times and writes its row to rows/N.
lane() {
	local n=$1 pkg=$2 name dir bin fails=0 lo=999 hi=0 names="" l out i run=()
	[ -n "$FLAKE_RUNREGEX" ] && run=(-test.run "$FLAKE_RUNREGEX")
	name=$(echo "${pkg#github.com/idem-go/idem/}" | tr '/.' '__')
	bin="$logs/bin/$name.test"
	row() {
		printf '| %s | %s | %s | %s | %s |\n' "${pkg#github.com/idem-go/idem/}" "$1" "$2" "${3:-–}" "$4" >"$logs/rows/$n"
		echo "$2" >"$logs/rows/$n.failures"
	}
	if ! dir=$($go list -f '{{.Dir}}' "$pkg" 2>"$logs/$name.build.log") ||
		! $go test -race -c -o "$bin" "$pkg" >>"$logs/$name.build.log" 2>&1; then
		row 0 1 "build failed ($logs/$name.build.log)" –
		return
	fi
	if [ ! -x "$bin" ]; then
		row 0 0 "no test files" –
		return
	fi
	for ((i = 1; i <= runs; i++)); do
		l=$(cut -d' ' -f1 /proc/loadavg)
		lo=$(awk -v a="$lo" -v b="$l" 'BEGIN{print (b<a)?b:a}')
		hi=$(awk -v a="$hi" -v b="$l" 'BEGIN{print (b>a)?b:a}')
		out="$logs/$name.$i.log"
		if ! (cd "$dir" && "$bin" -test.count=1 -test.timeout=20m -test.paniconexit0 "${run[@]}") >"$out" 2>&1; then
			fails=$((fails + 1))
			names="$names $(grep -oE -- '--- FAIL: [^ ]+' "$out" | awk '{print $3}' | sort -u | tr '\n' ' ')"
			grep -q -- '--- FAIL' "$out" || names="$names no-FAIL-line(panic,timeout)"
		else
			rm -f "$out"
		fi
		# The row so far: a run stopped early still reports what it ran.
		row "$i" "$fails" "$(echo "$names" | tr ' ' '\n' | grep -v '^$' | sort | uniq -c | awk '{printf "%s×%s ", $2, $1}')" "$lo–$hi"
	done
}
export -f lane
export go logs runs

n=$#
# In the background, so that the trap above runs as soon as a signal
# comes (bash runs a trap only between commands).
for ((i = 1; i <= n; i++)); do printf '%d\t%s\n' "$i" "${!i}"; done | xargs -P "$jobs" -L 1 bash -c 'lane "$0" "$1"' &
lanes=$!
wait "$lanes"

printf '| package | runs | failures | failed tests | load (1-min, min–max) |\n|---|---|---|---|---|\n'
status=0
for ((i = 1; i <= n; i++)); do
	[ -f "$logs/rows/$i" ] || continue
	cat "$logs/rows/$i"
	[ "$(cat "$logs/rows/$i.failures")" = 0 ] || status=1
done
rm -rf "$logs/bin"
echo "logs of failed runs: $logs" >&2
exit $status
