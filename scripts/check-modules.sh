#!/usr/bin/env bash
# Fails if a module in the tree is missing from go.work: in workspace mode
# `go test ./...` at the root silently skips nested modules, so every module
# must be listed for `make test` and `make lint` to cover it.
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
want=$(git ls-files --cached --others --exclude-standard -- '*go.mod' | grep -v '/testdata/' | xargs -n1 dirname | sort -u)
have=$($go list -m -f '{{.Dir}}' | sed "s|^$(pwd)/\{0,1\}||; s|^$|.|" | sort -u)
missing=$(comm -23 <(echo "$want") <(echo "$have"))
if [ -n "$missing" ]; then
	echo "check-modules: these modules are not in go.work, so no test or lint would run on them:" >&2
	echo "$missing" | sed 's/^/  /' >&2
	echo "add them with: go work use <dir>" >&2
	exit 1
fi
echo "check-modules: $(echo "$have" | wc -l) module(s), all in go.work"

# Every go.mod requires its siblings at the version in versions.txt and has no
# replace directive: a user gets each module with go get, and
# `go install github.com/idem-go/idem/cmd/idem/...@version` works
# (docs/releasing.md).
$go run ./tools/release check

# A program that imports only the core (the inbox and the memory key store)
# must not get a broker client, Watermill, the CLI's libraries, a Redis client
# or Prometheus in its module graph: those live in modules of their own.
light=$(mktemp -d)
trap 'rm -rf "$light"' EXIT
cat >"$light/go.mod" <<MOD
module example.com/light

go 1.26.0

require github.com/idem-go/idem v0.0.0

replace github.com/idem-go/idem => $(pwd)
MOD
cat >"$light/main.go" <<'SRC'
package main

import (
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/keystore/memstore"
)

var _ = inbox.New
var _ = memstore.New

func main() {}
SRC
cp go.sum "$light/go.sum"
(cd "$light" && GOWORK=off GOFLAGS=-mod=mod $go mod tidy >/dev/null 2>&1 && GOWORK=off $go build ./...) || {
	echo "check-modules: a module importing only inbox and memstore does not build" >&2
	exit 1
}
graph=$(cd "$light" && GOWORK=off $go list -m all)
heavy=$(echo "$graph" | grep -E 'nats-io|twmb/franz-go|ThreeDotsLabs|rabbitmq|redis/go-redis|spf13/cobra|prometheus|aws-sdk|google.golang.org/grpc|go.opentelemetry.io|chromedp' || true)
if [ -n "$heavy" ]; then
	echo "check-modules: importing only inbox and memstore pulls in:" >&2
	echo "$heavy" | sed 's/^/  /' >&2
	exit 1
fi
echo "check-modules: inbox + memstore alone: $(echo "$graph" | wc -l) modules in the graph, none of them a broker, Redis, CLI, Prometheus, OpenTelemetry or browser module"
