package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/outbox"
	"github.com/idem-go/idem/sqldialect"
	"github.com/idem-go/idem/versiongate"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	_ "modernc.org/sqlite"
)

// report is what the run observed.
type report struct {
	ordersExpected, ordersActual int
	stockExpected, stockActual   map[string]int
	priceExpected, priceActual   int
	requests, replayed           atomic.Int32
	publications, jsDuplicates   atomic.Int32
	deliveries, inboxDuplicates  atomic.Int32
	consumerCrashes              atomic.Int32
}

func (r *report) ok() bool {
	if r.ordersActual != r.ordersExpected || r.priceActual != r.priceExpected {
		return false
	}
	for sku, want := range r.stockExpected {
		if r.stockActual[sku] != want {
			return false
		}
	}
	return true
}

type order struct {
	ID  string `json:"id"`
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

type priceUpdate struct {
	SKU     string `json:"sku"`
	Price   int    `json:"price"`
	Version int64  `json:"version"`
}

var skus = []string{"pen", "ink", "pad"}

func open(path string) (*sql.DB, error) {
	return sql.Open("sqlite", sqldialect.SQLiteDSN(path))
}

func exec(db *sql.DB, stmts ...string) error {
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			return err
		}
	}
	return nil
}

// run executes the scenario in dir and writes the report to w.
func run(ctx context.Context, dir string, n int, w io.Writer) (*report, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rep := &report{stockExpected: map[string]int{}, stockActual: map[string]int{}}

	// The broker: an embedded NATS server with JetStream.
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "nats"), NoLog: true, NoSigs: true})
	if err != nil {
		return nil, err
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("nats did not start")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SHOP", Subjects: []string{"shop.>"}, Duplicates: 2 * time.Minute}); err != nil {
		return nil, err
	}

	// The orders service's database: orders, the outbox, the key store.
	odb, err := open(filepath.Join(dir, "orders.db"))
	if err != nil {
		return nil, err
	}
	defer odb.Close()
	ob, _ := outbox.New(sqldialect.SQLite)
	keys, err := sqlstore.New(odb, sqldialect.SQLite)
	if err != nil {
		return nil, err
	}
	defer keys.Close()
	if err := ob.Migrate(ctx, odb); err != nil {
		return nil, err
	}
	if err := keys.Migrate(ctx); err != nil {
		return nil, err
	}
	if err := exec(odb, "CREATE TABLE orders (id TEXT PRIMARY KEY, sku TEXT NOT NULL, qty INTEGER NOT NULL)"); err != nil {
		return nil, err
	}

	// The inventory service's database: stock, prices, its inbox.
	idb, err := open(filepath.Join(dir, "inventory.db"))
	if err != nil {
		return nil, err
	}
	defer idb.Close()
	in, _ := inbox.New(idb, sqldialect.SQLite, "inventory")
	if err := in.Migrate(ctx); err != nil {
		return nil, err
	}
	gate, _ := versiongate.New(sqldialect.SQLite, versiongate.Table{Name: "prices", ID: "sku", Version: "version", Columns: []string{"price"}})
	if err := exec(idb, "CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INTEGER NOT NULL)",
		"CREATE TABLE prices (sku TEXT PRIMARY KEY, version INTEGER NOT NULL, price INTEGER NOT NULL)"); err != nil {
		return nil, err
	}
	for _, s := range skus {
		if _, err := idb.Exec("INSERT INTO stock VALUES (?, 1000)", s); err != nil {
			return nil, err
		}
		rep.stockExpected[s] = 1000
	}

	// 1. Orders through the Idempotency-Key middleware, with client retries.
	api, err := ordersAPI(odb, ob, keys)
	if err != nil {
		return nil, err
	}
	srv := httptest.NewServer(api)
	defer srv.Close()
	if err := placeOrders(ctx, srv.URL, n, rep); err != nil {
		return nil, err
	}

	// 2. The relay, which dies after publishing in its first two rounds.
	var rounds atomic.Int32
	relay, _ := outbox.NewRelay(odb, ob, outbox.PublisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		for _, m := range msgs {
			ack, err := js.Publish(ctx, m.Topic, m.Payload, jetstream.WithMsgID(m.ID))
			if err != nil {
				return err
			}
			rep.publications.Add(1)
			if ack.Duplicate {
				rep.jsDuplicates.Add(1)
			}
		}
		if rounds.Add(1) <= 2 {
			return errors.New("relay died after publishing, before marking")
		}
		return nil
	}), outbox.WithBatch(16))
	for {
		k, err := relay.RunOnce(ctx)
		if err != nil && rounds.Load() > 2 {
			return nil, err
		}
		if err == nil && k == 0 {
			break
		}
	}

	// 3. Price updates, out of order and twice: only the newest applies.
	versions := []int64{3, 1, 5, 2, 5, 4, 3}
	for i, v := range versions {
		b, _ := json.Marshal(priceUpdate{SKU: "pen", Price: int(v) * 100, Version: v})
		if _, err := js.Publish(ctx, "shop.price", b, jetstream.WithMsgID(fmt.Sprintf("price-%d-%d", v, i))); err != nil {
			return nil, err
		}
	}
	rep.priceExpected = 500

	// 4. The inventory consumer, which dies after its commit and before its
	// ack for the first three messages.
	cons, err := js.CreateOrUpdateConsumer(ctx, "SHOP", jetstream.ConsumerConfig{Durable: "inventory", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 300 * time.Millisecond, MaxDeliver: 20})
	if err != nil {
		return nil, err
	}
	if err := consume(ctx, cons, in, gate, rep); err != nil {
		return nil, err
	}

	// What happened, against what the client asked for.
	if err := odb.QueryRow("SELECT COUNT(*) FROM orders").Scan(&rep.ordersActual); err != nil {
		return nil, err
	}
	for _, s := range skus {
		var q int
		_ = idb.QueryRow("SELECT qty FROM stock WHERE sku = ?", s).Scan(&q)
		rep.stockActual[s] = q
	}
	_ = idb.QueryRow("SELECT price FROM prices WHERE sku = 'pen'").Scan(&rep.priceActual)
	printReport(w, rep)
	return rep, nil
}

func ordersAPI(db *sql.DB, ob *outbox.Outbox, keys *sqlstore.Store) (http.Handler, error) {
	mw, err := idemhttp.New(keys, idemhttp.WithRequired(true), idemhttp.WithWait(5*time.Second))
	if err != nil {
		return nil, err
	}
	return mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var o order
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil || o.ID == "" || o.Qty <= 0 {
			http.Error(w, "bad order", http.StatusBadRequest)
			return
		}
		tx, err := db.BeginTx(r.Context(), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer tx.Rollback()
		if _, err := tx.Exec("INSERT INTO orders VALUES (?, ?, ?)", o.ID, o.SKU, o.Qty); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		payload, _ := json.Marshal(o)
		if _, err := ob.Add(r.Context(), tx, outbox.Message{ID: "order-placed:" + o.ID, Topic: "shop.orders", OrderingKey: o.SKU, Payload: payload}); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if err := tx.Commit(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%q}`, o.ID)
	})), nil
}

// placeOrders sends n orders; every third is retried twice in a row, every
// fifth is sent twice at once, as a client with an aggressive timeout would.
func placeOrders(ctx context.Context, url string, n int, rep *report) error {
	rng := rand.New(rand.NewPCG(7, 7))
	send := func(o order) error {
		b, _ := json.Marshal(o)
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/orders", strings.NewReader(string(b)))
		req.Header.Set("Idempotency-Key", `"`+o.ID+`"`)
		// The principal scopes the key: idemhttp refuses keyed requests
		// that carry none, so that no client is replayed another's order.
		req.Header.Set("Authorization", "Bearer shop-client")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		rep.requests.Add(1)
		if res.Header.Get("Idempotent-Replayed") == "true" {
			rep.replayed.Add(1)
		}
		if res.StatusCode != http.StatusCreated {
			return fmt.Errorf("order %s: status %d", o.ID, res.StatusCode)
		}
		return nil
	}
	for i := 0; i < n; i++ {
		o := order{ID: fmt.Sprintf("order-%03d", i), SKU: skus[rng.IntN(len(skus))], Qty: 1 + rng.IntN(5)}
		rep.ordersExpected++
		rep.stockExpected[o.SKU] -= o.Qty
		copies := 1
		if i%3 == 0 {
			copies = 3
		}
		if i%5 == 0 {
			var wg sync.WaitGroup
			errs := make(chan error, 2)
			for range 2 {
				wg.Add(1)
				go func() { defer wg.Done(); errs <- send(o) }()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					return err
				}
			}
		}
		for range copies {
			if err := send(o); err != nil {
				return err
			}
		}
	}
	return nil
}

func consume(ctx context.Context, cons jetstream.Consumer, in *inbox.Inbox, gate *versiongate.Gate, rep *report) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		batch, err := cons.Fetch(16, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return err
		}
		for msg := range batch.Messages() {
			rep.deliveries.Add(1)
			id := msg.Headers().Get(jetstream.MsgIDHeader)
			applied, err := in.Process(ctx, id, func(ctx context.Context, tx *sql.Tx) error {
				if msg.Subject() == "shop.price" {
					var p priceUpdate
					if err := json.Unmarshal(msg.Data(), &p); err != nil {
						return err
					}
					_, err := gate.Upsert(ctx, tx, p.SKU, p.Version, p.Price)
					return err
				}
				var o order
				if err := json.Unmarshal(msg.Data(), &o); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, "UPDATE stock SET qty = qty - ? WHERE sku = ?", o.Qty, o.SKU)
				return err
			})
			if err != nil {
				_ = msg.Nak()
				continue
			}
			if !applied {
				rep.inboxDuplicates.Add(1)
			}
			if applied && rep.consumerCrashes.Load() < 3 {
				rep.consumerCrashes.Add(1) // committed, then "dies" before the ack
				continue
			}
			if err := msg.DoubleAck(ctx); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return nil
		}
	}
	return errors.New("consumer did not drain in 60s")
}

func printReport(w io.Writer, r *report) {
	check := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "MISMATCH"
	}
	fmt.Fprintf(w, "client requests:   %d sent, %d answered from the idempotency store (replays)\n", r.requests.Load(), r.replayed.Load())
	fmt.Fprintf(w, "relay:             %d publications, %d dropped by JetStream as duplicates (relay died twice before marking)\n", r.publications.Load(), r.jsDuplicates.Load())
	fmt.Fprintf(w, "consumer:          %d deliveries, %d crashes after commit before ack, %d duplicates absorbed by the inbox\n", r.deliveries.Load(), r.consumerCrashes.Load(), r.inboxDuplicates.Load())
	fmt.Fprintf(w, "orders:            expected %d, actual %d  %s\n", r.ordersExpected, r.ordersActual, check(r.ordersActual == r.ordersExpected))
	for _, s := range skus {
		fmt.Fprintf(w, "stock %-4s         expected %d, actual %d  %s\n", s+":", r.stockExpected[s], r.stockActual[s], check(r.stockActual[s] == r.stockExpected[s]))
	}
	fmt.Fprintf(w, "price pen:         expected %d (version 5), actual %d  %s\n", r.priceExpected, r.priceActual, check(r.priceActual == r.priceExpected))
}
