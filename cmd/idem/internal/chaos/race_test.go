//go:build race

package chaos

// raceEnabled: the workers are this race-instrumented test binary, several
// times slower, so the runs are shorter.
const raceEnabled = true
