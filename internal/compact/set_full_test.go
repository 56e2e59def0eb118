// MaxRecords records do not fit a 32-bit int: the test is built where int
// has 64 bits only.

//go:build amd64 || arm64 || ppc64 || ppc64le || s390x || riscv64 || loong64 || mips64 || mips64le || wasm

package compact

import (
	"errors"
	"testing"
)

func TestAppendFull(t *testing.T) {
	t.Parallel()
	s := NewSet()
	var full int64 = MaxRecords // a variable: the constant would not compile where int is 32 bits
	s.count = int(full)
	if err := s.Append(FP{Lo: 1}, Rec{Seq: 1}); !errors.Is(err, ErrFull) {
		t.Fatalf("Append at MaxRecords = %v, want ErrFull", err)
	}
}
