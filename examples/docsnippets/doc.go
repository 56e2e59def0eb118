// Package docsnippets holds no code of its own: its test checks that every
// Go code block in README.md and docs/**/*.md compiles, and runs the ones
// that need no server, so that code pasted from the documentation works.
//
// A block is one of two kinds:
//
//   - a complete program: it starts with "package main". The test writes it
//     into a directory of the workspace, builds it against the local tree,
//     and runs it (in a temporary working directory, so a SQLite file it
//     creates goes away). Put <!-- snippet: build-only (why) --> on the line
//     before the block when it needs a server (a Kafka broker, PostgreSQL):
//     it is then built, not run.
//   - a fragment mirrored by a function: the line before the block is
//     <!-- snippet: examples/docsnippets/testdata/NAME/main.go:FUNC -->, and
//     the block is, after gofmt, exactly the body of FUNC in that file, a
//     complete program whose main calls FUNC with what the fragment takes
//     for granted (a *sql.DB, an inbox, a handler). The test builds every
//     program under testdata/ and runs those whose file has the line
//     //docsnippets:run; the others say why they are only built with
//     //docsnippets:build-only REASON.
//
// A block that is neither fails the test with a message saying how to fix
// it. The mirrors live under testdata/ so that the examples module does not
// have to require every adapter's client (Kafka, gRPC, Redis, AWS): they
// build in the go.work workspace, which resolves them all, and the test
// skips itself outside the workspace (GOWORK=off).
package docsnippets
