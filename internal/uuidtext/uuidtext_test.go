package uuidtext

import (
	"testing"

	"github.com/google/uuid"
)

func TestFormatMatchesRFC9562(t *testing.T) {
	for _, u := range []uuid.UUID{uuid.Nil, uuid.Max, uuid.MustParse("8e03978e-40d5-43e8-bc93-6894a57f9324"), uuid.New()} {
		if got := Format(u); got != u.String() {
			t.Errorf("Format(%x) = %s, want %s", u[:], got, u)
		}
	}
}
