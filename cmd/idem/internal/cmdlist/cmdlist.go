// Package cmdlist names idem's commands, for the idem launcher's help, which
// must list them without idemd (where they run). idemd's tests check that
// its command tree has exactly these.
package cmdlist

// Command is one command of idem.
type Command struct {
	Name, Short string
}

// Commands are idem's commands in the order help lists them.
var Commands = []Command{
	{"demo", "Run the inbox's worked examples on an embedded SQLite database (no server needed)"},
	{"serve", "An Idempotency-Key reverse proxy in front of any HTTP API"},
	{"keys", "List, inspect, release (fenced) and forget keys in a key store"},
	{"inbox", "Show or forget one key of an inbox table, migrate its layout, sweep it"},
	{"plan", "Size the dedup store from a message rate and a duplicate horizon"},
	{"chaos", "Kill consumers, drop acks, duplicate and reorder messages; count what each strategy loses or doubles"},
	{"version", "Print the version"},
}
