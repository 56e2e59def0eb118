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
