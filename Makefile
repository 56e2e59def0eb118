# idem: `make test` installs what the tests need and runs the whole suite.
GO      ?= go
TIMEOUT ?= 20m
FUZZTIME ?= 15s

.PHONY: test deps lint unit bench fuzz demo chaos

## test: install missing servers, lint, then run every test with -race.
test: deps lint unit

deps:
	./scripts/install-deps.sh

unit:
	$(GO) test -race -timeout $(TIMEOUT) ./...

## lint: gofmt, go vet and staticcheck (pinned in go.mod as a go tool).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

## bench: the benchmarks, each beside its baseline in the same run.
bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 2s -timeout 60m ./...

## fuzz: run every fuzz target for FUZZTIME each.
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

## demo: the seed scenarios on embedded SQLite.
demo:
	$(GO) run ./cmd/idem demo

## chaos: the long fault-injection run: every strategy, CHAOS_MESSAGES each,
## on SQLite and a throwaway PostgreSQL with 4 consumers (docs/chaos.md).
CHAOS_MESSAGES ?= 50000
chaos: deps
	IDEM_CHAOS_LONG=$(CHAOS_MESSAGES) $(GO) test -run '^TestLongRun$$' -v -count=1 -timeout 0 ./chaos/
