# idem: `make test` installs what the tests need and runs the whole suite.
GO      ?= go
TIMEOUT ?= 20m
FUZZTIME ?= 15s

.PHONY: failover failover-long test deps lint unit modules install-test bench bench-compact bench-compact-curve bench-dedup-disk bench-scale bench-keystore-scale bench-peers bench-ratios soak fuzz demo chaos caddy flakes

# Every package of every module in go.work. In workspace mode `./...` at the
# root covers only the root module, so the targets name each module's tree.
PKGS = $(shell $(GO) list -m -f '{{.Path}}/...')

## test: install missing servers, lint, then run every test with -race.
test: deps modules lint caddy unit

deps:
	./scripts/install-deps.sh

## modules: fail if a go.mod in the tree is not in go.work (it would be skipped).
modules:
	GO=$(GO) ./scripts/check-modules.sh

unit:
	$(GO) test -race -timeout $(TIMEOUT) $(PKGS)

## caddy: bin/caddy, Caddy with the idempotency handler (adapters/idemcaddy,
## docs/caddy.md), built by xcaddy: Caddy and its modules from the module
## proxy, idem's modules from this tree (--replace: they are not on the proxy
## before the tag). A user builds the same with
## `xcaddy build --with github.com/idem-go/idem/adapters/idemcaddy@VERSION`.
CADDY_VERSION ?= v2.11.9
XCADDY ?= $(GO) run github.com/caddyserver/xcaddy/cmd/xcaddy@v0.4.5
IDEM_VERSION = $(shell awk '$$1 == "version" {print $$2}' versions.txt)
caddy:
	@mkdir -p bin
	$(XCADDY) build $(CADDY_VERSION) --output bin/caddy \
		--with github.com/idem-go/idem/adapters/idemcaddy@$(IDEM_VERSION)=$(CURDIR)/adapters/idemcaddy \
		$(foreach m,$(filter-out github.com/idem-go/idem/adapters/idemcaddy@%,$(shell $(GO) list -m -f '{{.Path}}@$(IDEM_VERSION)={{.Dir}}')),--replace $(m))
	./bin/caddy list-modules | grep -qx http.handlers.idempotency

## install-test: the released modules, zipped into a file-system module
## proxy at a throwaway version, installed the way a user does: a program
## importing every public package built outside the workspace, and
## `go install github.com/idem-go/idem/cmd/idem/...@VERSION` (docs/releasing.md).
## `make unit` runs it too.
install-test:
	$(GO) test -count=1 -run '^TestInstallFromProxy$$' -v -timeout $(TIMEOUT) ./tools/release

## lint: gofmt, go vet and staticcheck (pinned in go.mod as a go tool), the
## API check against the last release (tools/release apicheck), and
## the root module built for 386 and arm64 too (and the test helpers vetted
## for macOS).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)
	@# The public API against the last release's snapshot (docs/releasing.md).
	$(GO) run ./tools/release apicheck
	@# The root module on a 32-bit target and on arm64: internal/compact
	@# has assembly for amd64 and arm64 (vet checks it against its Go
	@# declarations) and a fallback elsewhere. testenv has a Linux-only
	@# part (the parent-death signal).
	GOARCH=386 $(GO) vet ./internal/compact ./window ./keystore/memstore ./sequence
	GOARCH=386 $(GO) build ./...
	GOARCH=arm64 $(GO) vet ./internal/compact
	GOOS=darwin GOARCH=arm64 $(GO) vet ./internal/compact ./internal/testsupport/testenv

## bench: the benchmarks, each beside its baseline in the same run.
bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 2s -timeout 60m $(PKGS)

## bench-compact: compact in-memory dedup (window, memstore, the index alone)
## beside a Go map at 1M and 10M random ids, three interleaved rounds
## (docs/benchmarks.md).
bench-compact:
	@for i in 1 2 3; do \
		IDEM_BENCH_10M=1 $(GO) test -p 1 -run '^$$' -bench '^BenchmarkCompact$$' -benchtime 1x -timeout 60m ./window ./keystore/memstore || exit 1; \
		IDEM_BENCH_10M=1 $(GO) test -run '^$$' -bench '^BenchmarkSetFill$$' -benchtime 1x -timeout 60m ./internal/compact || exit 1; \
		IDEM_BENCH_10M=1 $(GO) test -run '^$$' -bench '^BenchmarkCompactSteady$$' -benchtime 1000000x -timeout 60m ./window || exit 1; \
	done
	IDEM_BENCH_10M=1 $(GO) test -run '^$$' -bench '^BenchmarkCompactGC$$' -benchtime 1x -timeout 60m ./window

## bench-compact-curve: the compact sets' bytes a key every 2% from 100k to
## 10M keys (window's one set, memstore's 64 staggered sets and two
## unstaggered contrasts; Set.Bytes), drawn to docs/img/compact-memory.svg.
## About 15 s. `make test` runs it to 300k.
COMPACT_CURVE_CSV ?= /tmp/idem-compact-curve.csv
bench-compact-curve:
	rm -f $(COMPACT_CURVE_CSV)
	IDEM_COMPACT_CURVE_CSV=$(COMPACT_CURVE_CSV) $(GO) test -run '^TestMemoryCurve$$' -count=1 -v ./internal/compact
	cp $(COMPACT_CURVE_CSV) docs/img/compact-memory.csv
	cd tools/benchchart && $(GO) run . -kind compact -in ../../docs/img/compact-memory.csv -out ../../docs/img/compact-memory.svg

## bench-dedup-disk: window/diskwindow's curve (docs/dedup-disk.md): DEDUP_IDS
## random UUIDs through AddBatch, a line every DEDUP_STEP, sealed files'
## page cache dropped before each step, the in-memory window on the same ids
## beside it; redraws docs/img/dedup-disk.svg; ends with one line of totals. 2x10^8 ids take about 1.6 GB of
## disk under DEDUP_DIR and 6 GB of memory. `make test` runs it at 200k ids
## (TestDedupDiskCurve) without asserting speed.
DEDUP_IDS  ?= 200000000
DEDUP_STEP ?= 10000000
DEDUP_DIR  ?= /tmp
DEDUP_CSV  ?= /tmp/idem-dedup-disk.csv
DEDUP_LOG  ?= /tmp/idem-dedup-disk.log
bench-dedup-disk:
	IDEM_DEDUP_IDS=$(DEDUP_IDS) IDEM_DEDUP_STEP=$(DEDUP_STEP) IDEM_DEDUP_DIR=$(DEDUP_DIR) IDEM_DEDUP_CSV=$(DEDUP_CSV) \
		$(GO) test -run '^TestDedupDiskCurve$$' -v -count=1 -timeout 0 ./window/diskwindow 2>&1 | tee $(DEDUP_LOG)
	@grep -q '^--- PASS' $(DEDUP_LOG)
	cp $(DEDUP_CSV) docs/img/dedup-disk.csv
	cd tools/benchchart && $(GO) run . -kind dedupdisk -in ../../docs/img/dedup-disk.csv -out ../../docs/img/dedup-disk.svg \
		-before ../../docs/img/dedup-disk-nomerge.csv -before-name 'unmerged, per CPU-second'
	@grep '^ids=' $(DEDUP_LOG)

## bench-scale: the inbox scale curve (msg/s per million keys, UUIDv4 against
## UUIDv7, bytes/key) on SQLite and PostgreSQL (fsync on) and, to
## SCALE_KEYS_MARIADB, MariaDB (against a bare BINARY(16) table), retiring
## 1M keys on each, MariaDB row shape; redraws docs/img/inbox-scale.svg.
## `make test` runs the same code at 20k keys (TestScaleCurve) without
## asserting speed. The 20M run needs about 8 GB of disk; SCALE_ENGINES=sqlite
## runs SQLite's 20M curve alone (12 minutes at load average 2-5; PostgreSQL's
## takes 25).
SCALE_ENGINES ?= sqlite,postgres
SCALE_KEYS ?= 20000000
SCALE_KEYS_MARIADB ?= 10000000
SCALE_CSV  ?= /tmp/idem-scale.csv
bench-scale: deps
	rm -f $(SCALE_CSV)
	IDEM_SCALE_ENGINES=$(SCALE_ENGINES) IDEM_SCALE_KEYS=$(SCALE_KEYS) IDEM_SCALE_STEP=1000000 IDEM_SCALE_BUCKET_SECONDS=60 IDEM_SCALE_CSV=$(SCALE_CSV) \
		$(GO) test -run '^TestScaleCurve$$' -v -count=1 -timeout 0 ./inbox
	IDEM_SCALE_ENGINES=mariadb IDEM_SCALE_SIDES=v7,v4 IDEM_SCALE_MARIADB_POOL_MB=1024 IDEM_SCALE_KEYS=$(SCALE_KEYS_MARIADB) IDEM_SCALE_STEP=1000000 IDEM_SCALE_BUCKET_SECONDS=60 IDEM_SCALE_CSV=$(SCALE_CSV) \
		$(GO) test -run '^TestScaleCurve$$' -v -count=1 -timeout 0 ./inbox
	IDEM_SCALE_RETIRE=1000000 IDEM_SCALE_MARIADB=1000000 IDEM_SCALE_CSV=$(SCALE_CSV) \
		$(GO) test -run '^TestScale(Retire|MariaDBRowShape)$$' -v -count=1 -timeout 0 ./inbox
	cp $(SCALE_CSV) docs/img/inbox-scale.csv
	cd tools/benchchart && $(GO) run . -in ../../docs/img/inbox-scale.csv -out ../../docs/img/inbox-scale.svg

## bench-keystore-scale: the SQL key store's layouts at KEYSTORE_SCALE random
## UUIDv4 keys on PostgreSQL and SQLite: bytes/key (rows, digest, bare),
## Reserve+Complete digest/rows, MigrateLayout's time, retiring the keys by
## Sweep and by dropping a partition (docs/keystore.md). `make test` runs it
## at 5k keys. 1M took about 30 minutes at load average 15-22.
KEYSTORE_SCALE ?= 1000000
bench-keystore-scale: deps
	IDEM_SQLSTORE_SCALE=$(KEYSTORE_SCALE) $(GO) test -run '^TestScale(Keys|Retire)$$' -v -count=1 -timeout 0 ./keystore/sqlstore

## bench-peers: idem beside the libraries users would pick instead, in one
## invocation, alternating order (tools/peerbench): idemhttp vs Fiber v3.1.0's
## idempotency middleware (new keys, replays, waiting duplicates, each beside
## its bare server), idemwatermill vs Watermill's Deduplicator, and the
## correctness scenarios, which fail the run if idem's side loses, doubles or
## leaves stuck anything. Prints the tables of docs/benchmarks.md (Peers).
PEERS_FLAGS ?=
bench-peers:
	cd tools/peerbench && $(GO) run . $(PEERS_FLAGS)
	GO=$(GO) ./scripts/ratios.sh

## bench-ratios: the goals against the same server's bare client
## (scripts/ratios.sh; `make bench-peers` ends with it): the NATS, RabbitMQ
## and Kafka consume loops against their store alone and their broker
## alone, with the broker pinned to its own core and shared, and redisstore
## Reserve against SET NX PX at 1-64 callers, on one server and on the test
## Redis Cluster.
bench-ratios: deps
	GO=$(GO) ./scripts/ratios.sh

## soak: the failover tests of the distributed key stores (kill -9 of a Redis
## Cluster master, with and without replication lag; of the JetStream stream
## leader) with SOAK of load around each kill; `make test` runs them short.
SOAK ?= 30s
soak: deps
	IDEM_SOAK=$(SOAK) $(GO) test -race -run 'Failover|LeaderKilled' -v -count=1 -timeout 0 ./keystore/redisstore/ ./adapters/idemnats/ github.com/idem-go/idem/keystore/natsstore/

## flakes: every package (or FLAKE_PKGS) run FLAKE_RUNS times with -race,
## FLAKE_JOBS packages at once, beside FLAKE_BURN busy processes; prints
## package x runs x failures and the load it ran under (scripts/flakerun.sh,
## docs/testing.md). FLAKE_RUN limits each run to the tests it matches. All
## packages 20 times take hours.
FLAKE_RUNS ?= 20
FLAKE_JOBS ?= 1
FLAKE_BURN ?= 4
FLAKE_PKGS ?= $(shell $(GO) list $(PKGS))
FLAKE_RUN ?=
flakes:
	FLAKE_RUNS=$(FLAKE_RUNS) FLAKE_JOBS=$(FLAKE_JOBS) FLAKE_BURN=$(FLAKE_BURN) GO=$(GO) ./scripts/flakerun.sh $(if $(FLAKE_RUN),-run '$(FLAKE_RUN)') $(FLAKE_PKGS)

## fuzz: run every fuzz target for FUZZTIME each.
fuzz:
	@for pkg in $$($(GO) list $(PKGS)); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

## demo: the inbox's worked examples on embedded SQLite.
demo:
	$(GO) run ./cmd/idem demo

## chaos: the long fault-injection run: every strategy, CHAOS_MESSAGES each,
## on SQLite and a throwaway PostgreSQL with 4 consumers (docs/chaos.md).
CHAOS_MESSAGES ?= 50000
chaos: deps
	IDEM_CHAOS_LONG=$(CHAOS_MESSAGES) $(GO) test -run '^TestLongRun$$' -v -count=1 -timeout 0 ./cmd/idem/internal/chaos/

## failover: the database failover tests (docs/ha.md): a PostgreSQL primary
## and streaming standby per test, replication held back, kill -9 of the
## primary and promotion of the standby; a 3-member Patroni cluster (kill -9
## of the leader, switchover); WithWaitReplicas; also run by `make test`.
failover: deps
	$(GO) test -race -count=1 -run 'PGHA|Patroni|Failover|WaitReplicas|CheckReplication|TokensAfterLostTail|OffsetsDatabaseLostTail|CommitRolledBack' ./internal/testsupport/testenv ./internal/testsupport/failoverprobe ./inbox ./keystore/sqlstore ./sqldialect ./adapters/idemkafka

## failover-long: the failover probe of docs/ha.md at full size: every
## scenario (asynchronous, synchronous, asynchronous + WithWaitReplicas; rows
## and bucketed inbox, Process and ProcessBatch; kill -9 after 1 s of lag, a
## standby cut off 6 s, a clean switchover; StartPGHA and Patroni) with
## 20,000 messages and 2,000 keys, one at a time, printing a table row per
## scenario. IDEM_FAILOVER_ONLY=regexp runs the scenarios it names.
failover-long: deps
	IDEM_FAILOVER_LONG=1 $(GO) test -race -count=1 -run 'FailoverProbe' -v -timeout 0 ./internal/testsupport/failoverprobe
