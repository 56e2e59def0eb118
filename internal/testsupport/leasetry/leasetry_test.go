package leasetry

import (
	"errors"
	"testing"
	"time"
)

// fakeT records a Fatalf instead of ending the test.
type fakeT struct {
	testing.TB
	fatal string
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Logf(string, ...any)   {}
func (f *fakeT) Fatalf(string, ...any) { f.fatal = "fatal" }
func (f *fakeT) String() string        { return f.fatal }

func TestRun(t *testing.T) {
	lost := errors.New("lease lost")
	for _, tc := range []struct {
		name      string
		lostUntil time.Duration // try loses leases shorter than this
		want      []time.Duration
		fatal     bool
	}{
		{"first passes", 0, []time.Duration{time.Second}, false},
		{"second passes", 2 * time.Second, []time.Duration{time.Second, 4 * time.Second}, false},
		{"capped at max", 10 * time.Second, []time.Duration{time.Second, 4 * time.Second, 10 * time.Second}, false},
		{"lost every time", time.Hour, []time.Duration{time.Second, 4 * time.Second, 10 * time.Second}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := &fakeT{TB: t}
			var got []time.Duration
			Run(ft, time.Second, 10*time.Second, 3, func(lease time.Duration) error {
				got = append(got, lease)
				if lease < tc.lostUntil || (tc.fatal && lease <= tc.lostUntil) {
					return lost
				}
				return nil
			})
			if len(got) != len(tc.want) || (ft.fatal != "") != tc.fatal {
				t.Fatalf("leases %v fatal %q; want %v fatal %v", got, ft.fatal, tc.want, tc.fatal)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("leases %v; want %v", got, tc.want)
				}
			}
		})
	}
}
