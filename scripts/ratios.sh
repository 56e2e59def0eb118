#!/usr/bin/env bash
# ratios.sh: the speed goals that compare idem with the bare client of the
# same server, each in one benchmark run (both sides alternating), printed
# as one table (docs/benchmarks.md, "Broker adapters" and "redisstore").
#
#   consume loops: NATS JetStream, RabbitMQ (BenchmarkConsumeVsStore: the
#     consumer against the same records straight into the same inbox, and
#     the broker with its plain client), twice: "shared" (broker and test on
#     both cores) and "pinned" (the test on CPU 0 under taskset, the broker
#     a process on CPU 1: IDEM_TEST_SERVER_CPUS); Kafka (kfake in process,
#     shared only);
#   redisstore Reserve against SET NX PX at 1, 4, 16 and 64 callers, on one
#   Redis server and on the test Redis Cluster.
#
# RATIO_BENCHTIME sets the consume iterations (default 5x), RATIO_ROUNDS the
# Redis rounds (default 4). Servers are started as `make test` does.
set -euo pipefail
GO=${GO:-go}
benchtime=${RATIO_BENCHTIME:-5x}
rounds=${RATIO_ROUNDS:-4}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# metric FILE UNIT: the value printed before UNIT on the benchmark's line.
metric() {
	awk -v u="$2" '/^Benchmark/ { for (i = 2; i <= NF; i++) if ($i == u) print $(i-1) }' "$1" | tail -1
}

consume() { # name dir mode
	local name=$1 dir=$2 mode=$3 f="$out/$1-$3"
	( cd "$dir" && $GO test -c -o "$out/$name.test" . )
	if [ "$mode" = pinned ]; then
		( cd "$dir" && IDEM_TEST_SERVER_CPUS=1 taskset -c 0 "$out/$name.test" -test.run '^$' -test.bench 'ConsumeVsStore$' -test.benchtime "$benchtime" ) >"$f" 2>&1 || { cat "$f"; exit 1; }
	else
		( cd "$dir" && "$out/$name.test" -test.run '^$' -test.bench 'ConsumeVsStore$' -test.benchtime "$benchtime" ) >"$f" 2>&1 || { cat "$f"; exit 1; }
	fi
	printf '%-6s %-7s %9s %9s %9s %7s %9s %9s %8s\n' "$name" "$mode" \
		"$(metric "$f" consumer-records/s)" "$(metric "$f" store-only-records/s)" \
		"$(metric "$f" broker-only-records/s)" "$(metric "$f" consumer/store)" \
		"$(metric "$f" bound/store)" "$(metric "$f" consumer/bound)" "$(metric "$f" consumer-cpu-µs/record)"
}

echo "consume loops, ratio = consumer ÷ the same records straight into the inbox (goal ≥ 0.85)"
echo "bound = the best an adapter costing nothing beyond the broker's client could do (docs/benchmarks.md)"
printf '%-6s %-7s %9s %9s %9s %7s %9s %9s %8s\n' broker mode consumer store broker ratio bound/st cons/bnd cpu-µs
ncpu=$(nproc)
for mode in pinned shared; do
	if [ "$mode" = pinned ] && { [ "$ncpu" -lt 2 ] || ! command -v taskset >/dev/null; }; then
		echo "(pinned runs skipped: they need two CPUs and taskset)"
		continue
	fi
	consume nats adapters/idemnats "$mode"
	consume amqp adapters/idemamqp "$mode"
done
( cd adapters/idemkafka && $GO test -run '^$' -bench 'Consume$' -benchtime "$benchtime" . ) >"$out/kafka" 2>&1 || { cat "$out/kafka"; exit 1; }
printf '%-6s %-7s %9s %9s %9s %7s\n' kafka shared "$(metric "$out/kafka" consumer-records/s)" \
	"$(metric "$out/kafka" store-only-records/s)" - "$(metric "$out/kafka" consumer/store)"

echo
echo "redisstore Reserve ÷ SET NX PX, median of $rounds rounds (goal ≥ 0.8 at every concurrency; Cluster: the test Redis Cluster)"
IDEM_RATIO_ROUNDS=$rounds $GO test -run '^$' -bench 'ReserveVsSetNX' -benchtime 5000x ./keystore/redisstore/ >"$out/redis" 2>&1 || { cat "$out/redis"; exit 1; }
grep -E '^Benchmark(Cluster)?ReserveVsSetNX' "$out/redis"
