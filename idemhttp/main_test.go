package idemhttp_test

import (
	"os"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
