package testenv

import (
	"fmt"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testport"
)

// DynaliteDir is where scripts/install-deps.sh installs dynalite (an
// implementation of the DynamoDB API, from npm) when it is missing.
const DynaliteDir = "/usr/local/lib/idem-dynalite"

// DynaliteVersion is the dynalite release scripts/install-deps.sh installs.
const DynaliteVersion = "4.0.0"

const dynaliteInstall = "apt-get install -y nodejs npm && npm install --prefix " + DynaliteDir + " dynalite@" + DynaliteVersion

var dyn = envServer{what: "dynalite (a DynamoDB-API server)", install: dynaliteInstall, env: "IDEM_TEST_DYNAMODB", start: startDynalite}

// DynamoDBEndpoint returns the http:// URL of a DynamoDB-API server:
// dynalite, started on first use in memory on a free loopback port, with
// tables that become ACTIVE at once. Tests share it: give each test its own
// table, for example [Name]("t_"). IDEM_TEST_DYNAMODB (an http://host:port
// URL) selects an existing endpoint instead, such as DynamoDB Local or a
// real region's endpoint with credentials in the environment.
//
// dynalite speaks the DynamoDB wire protocol with DynamoDB's limits and
// error messages, but not its consistency modes, TTL deletion, streams,
// global tables, throttling, latencies, or newer request fields such as
// ReturnValuesOnConditionCheckFailure (it ignores them).
func DynamoDBEndpoint(t testing.TB) string {
	t.Helper()
	return dyn.get(t)
}

func startDynalite() (string, error) {
	bin, err := findBinary("dynalite", DynaliteDir+"/node_modules/.bin", "/usr/local/bin", "/usr/bin")
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "idem-dynalite-")
	if err != nil {
		return "", err
	}
	port, err := testport.Free()
	if err != nil {
		return "", err
	}
	// In memory (no --path): the tests need no durability, and LevelDB on
	// disk only adds fsyncs to a shared host.
	s, err := start(dir, nil, bin, "--host", "127.0.0.1", "--port", fmt.Sprint(port),
		"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0")
	if err != nil {
		return "", err
	}
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	hc := &http.Client{Timeout: time.Second}
	// Any HTTP answer (dynalite answers a bare GET with an error document)
	// means it is serving.
	err = Poll(30*time.Second, 20*time.Millisecond, func() error {
		resp, err := hc.Get(endpoint)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	if err != nil {
		s.stop(syscall.SIGTERM)
		return "", fmt.Errorf("dynalite did not answer: %v; log:\n%s", err, s.logTail())
	}
	onStop(func() { s.stop(syscall.SIGTERM) })
	return endpoint, nil
}
