package dynamostore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore/dynamostore"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// counter counts the HTTP requests a client sends, by operation: the round
// trips of the store's calls.
type counter struct {
	next http.RoundTripper
	mu   sync.Mutex
	ops  map[string]int
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
	c.mu.Lock()
	c.ops[op]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

// take returns the counts since the last take and resets them.
func (c *counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.ops
	c.ops = map[string]int{}
	return m
}

// client returns a DynamoDB client of endpoint (the test's dynalite unless
// given) and the counter of its requests. Its retryer is the SDK's standard
// one with a short backoff, so that tests of throttling take milliseconds.
func client(t testing.TB, endpoint string) (*dynamodb.Client, *counter) {
	if endpoint == "" {
		endpoint = testenv.DynamoDBEndpoint(t)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 128
	t.Cleanup(tr.CloseIdleConnections)
	cnt := &counter{next: tr, ops: map[string]int{}}
	c := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   &http.Client{Transport: cnt},
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.Backoff = retry.NewExponentialJitterBackoff(20 * time.Millisecond)
		}),
	})
	return c, cnt
}

// newTable returns the name of a fresh table, deleted when t ends.
func newTable(t testing.TB, api *dynamodb.Client) string {
	name := testenv.Name("t_")
	t.Cleanup(func() {
		_, _ = api.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
	})
	return name
}

// newStore returns a store on a fresh migrated table.
func newStore(t testing.TB, api *dynamodb.Client, opts ...dynamostore.Option) *dynamostore.Store {
	t.Helper()
	s, err := dynamostore.New(api, newTable(t, api), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// proxy stands between a client and dynalite and injects what dynalite does
// not do: throttling, lost answers, and DynamoDB's
// ReturnValuesOnConditionCheckFailure (the item returned with a failed
// condition), which dynalite ignores.
type proxy struct {
	srv      *httptest.Server
	target   string
	throttle atomic.Int64 // answer this many more requests with throttling
	drop     atomic.Int64 // forward this many more UpdateItems, then answer 500
	oldItem  atomic.Bool  // add the item to ConditionalCheckFailedException
	hits     atomic.Int64 // requests received
	hc       *http.Client
}

func newProxy(t testing.TB) *proxy {
	p := &proxy{target: testenv.DynamoDBEndpoint(t), hc: &http.Client{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *proxy) serve(w http.ResponseWriter, r *http.Request) {
	p.hits.Add(1)
	body, _ := io.ReadAll(r.Body)
	if p.throttle.Add(-1) >= 0 {
		reply(w, 400, []byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded."}`))
		return
	}
	p.throttle.Store(0)
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
	status, out, err := p.forward(r.Header, body)
	if err != nil {
		reply(w, 502, []byte(`{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"proxy: `+err.Error()+`"}`))
		return
	}
	if op == "UpdateItem" && p.drop.Add(-1) >= 0 {
		// The write happened; its answer is lost.
		reply(w, 500, []byte(`{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"answer lost"}`))
		return
	}
	p.drop.Store(0)
	if status == 400 && p.oldItem.Load() && bytes.Contains(out, []byte("ConditionalCheckFailedException")) {
		out = p.addItem(r.Header, body, out)
	}
	reply(w, status, out)
}

func (p *proxy) forward(h http.Header, body []byte) (int, []byte, error) {
	req, err := http.NewRequest("POST", p.target, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header = h.Clone()
	req.Header.Del("Accept-Encoding")
	resp, err := p.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// addItem reads the item the failed write was about and puts it in the
// error, as DynamoDB does for ReturnValuesOnConditionCheckFailure ALL_OLD.
func (p *proxy) addItem(h http.Header, reqBody, errBody []byte) []byte {
	var req struct {
		TableName                           string
		Key                                 json.RawMessage
		ReturnValuesOnConditionCheckFailure string
	}
	if json.Unmarshal(reqBody, &req) != nil || req.ReturnValuesOnConditionCheckFailure != "ALL_OLD" {
		return errBody
	}
	get, _ := json.Marshal(map[string]any{"TableName": req.TableName, "Key": req.Key, "ConsistentRead": true})
	gh := h.Clone()
	gh.Set("X-Amz-Target", "DynamoDB_20120810.GetItem")
	status, out, err := p.forward(gh, get)
	var got struct{ Item json.RawMessage }
	if err != nil || status != 200 || json.Unmarshal(out, &got) != nil {
		return errBody
	}
	var e map[string]json.RawMessage
	if json.Unmarshal(errBody, &e) != nil {
		return errBody
	}
	if len(got.Item) > 0 {
		e["Item"] = got.Item
	}
	b, _ := json.Marshal(e)
	return b
}

func reply(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
