package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idem-go/idem/internal/testenv"
)

// idem serve on the distributed stores: the first keyed request runs the
// upstream, its retry is replayed, on a 6-node Redis Cluster and on a
// DynamoDB-API server (dynalite), each reached through its --store URL.
func TestServeDistributedStores(t *testing.T) {
	// Not parallel: t.Setenv gives the child process the AWS credentials
	// that dynalite accepts (any) without touching the real ones.
	t.Setenv("AWS_ACCESS_KEY_ID", "idem-test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "idem-test")
	t.Setenv("AWS_SESSION_TOKEN", "")
	stores := map[string]func(t *testing.T) string{
		"redis-cluster": func(t *testing.T) string {
			return "redis-cluster://" + strings.Join(testenv.RedisClusterAddrs(t), ",") + "?prefix=" + testenv.Name("serve")
		},
		"dynamodb": func(t *testing.T) string {
			return "dynamodb://" + testenv.Name("serve") + "?region=us-east-1&endpoint=" + testenv.DynamoDBEndpoint(t)
		},
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			var runs atomic.Int32
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := runs.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"charge":%d}`, n)
			}))
			defer up.Close()
			p := startServe(t, up.URL, url(t))
			first := post(t, p.url, "/charges", "order-1", `{"amount":5}`)
			again := post(t, p.url, "/charges", "order-1", `{"amount":5}`)
			other := post(t, p.url, "/charges", "order-1", `{"amount":6}`)
			switch {
			case first.status != 201 || first.body != `{"charge":1}`:
				t.Fatalf("first: %d %s", first.status, first.body)
			case again.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true":
				t.Fatalf("retry: %d %s %v, want the replay of %s", again.status, again.body, again.header, first.body)
			case other.status != 422:
				t.Fatalf("same key, other body: %d %s, want 422", other.status, other.body)
			case runs.Load() != 1:
				t.Fatalf("upstream ran %d times", runs.Load())
			}
			res, err := http.Get(p.admin + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("/readyz: %d", res.StatusCode)
			}
		})
	}
}
