package option

import (
	"errors"
	"testing"

	"github.com/idem-go/idem"
)

type config struct{ n int }

type opt func(*config) error

func TestApply(t *testing.T) {
	set := func(n int) opt { return func(c *config) error { c.n = n; return nil } }
	bad := errors.New("bad")
	var c config
	if err := Apply("pkg", &c, []opt{set(1), set(2)}); err != nil || c.n != 2 {
		t.Fatalf("Apply: %v, n = %d; want nil and the last option's 2", err, c.n)
	}
	if err := Apply("pkg", &c, []opt{set(3), nil, set(4)}); !errors.Is(err, idem.ErrInvalidOption) || err.Error() != "pkg: nil option: idem: invalid option" || c.n != 3 {
		t.Fatalf("nil option: %v, n = %d", err, c.n)
	}
	if err := Apply("pkg", &c, []opt{func(*config) error { return bad }, set(5)}); err != bad || c.n != 3 {
		t.Fatalf("failing option: %v, n = %d; want its error and nothing after it applied", err, c.n)
	}
}

func TestCheck(t *testing.T) {
	with := func(n int) opt {
		return Check("pkg", n > 0, func(c *config) { c.n = n }, "n %d is not positive", n)
	}
	var c config
	if err := Apply("pkg", &c, []opt{with(7)}); err != nil || c.n != 7 {
		t.Fatalf("valid option: %v, n = %d", err, c.n)
	}
	err := Apply("pkg", &c, []opt{with(-1)})
	if !errors.Is(err, idem.ErrInvalidOption) || err.Error() != "pkg: n -1 is not positive: idem: invalid option" || c.n != 7 {
		t.Fatalf("invalid option: %v, n = %d", err, c.n)
	}
}

func TestValid(t *testing.T) {
	bad := errors.New("bad")
	with := func(n int, err error) opt { return Valid("pkg", err, func(c *config) { c.n = n }) }
	var c config
	if err := Apply("pkg", &c, []opt{with(7, nil)}); err != nil || c.n != 7 {
		t.Fatalf("valid option: %v, n = %d", err, c.n)
	}
	err := Apply("pkg", &c, []opt{with(8, bad)})
	if !errors.Is(err, idem.ErrInvalidOption) || !errors.Is(err, bad) || err.Error() != "pkg: bad: idem: invalid option" || c.n != 7 {
		t.Fatalf("invalid option: %v, n = %d", err, c.n)
	}
}
