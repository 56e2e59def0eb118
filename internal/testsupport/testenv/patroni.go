package testenv

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testport"
)

const patroniInstall = "apt-get install -y patroni etcd-server postgresql"

// Patroni is a PostgreSQL cluster under Patroni with one etcd on loopback,
// for failover tests through the high-availability setup teams run: its
// own etcd and members per test (a kill is destructive), stopped when the
// test ends. Clients follow the leader with every member's host and
// target_session_attrs=read-write ([Patroni.URL]).
//
// Failure detection is set small so that a failover takes seconds, not
// half a minute: ttl 10 s (the leader key's lease in etcd), loop_wait 2 s
// (Patroni's cycle), retry_timeout 4 s (etcd and PostgreSQL operations).
// Patroni requires loop_wait + 2·retry_timeout ≤ ttl, so retry_timeout 5
// with ttl 10 is refused. A killed leader is replaced once its key
// expires: ttl plus up to loop_wait, plus the promotion.
type Patroni struct {
	t       testing.TB
	cred    *syscall.Credential
	bin     string // PostgreSQL's server binaries
	patroni string
	dir     string
	scope   string
	etcd    *server
	etcdAPI int
	sync    bool
	mu      sync.Mutex
	members []*patroniMember
}

type patroniMember struct {
	name     string
	dir      string
	pg, api  int
	srv      *server // patroni itself; it starts postgres in a session of its own
	dead     bool
	conffile string
}

// PatroniTTL, PatroniLoopWait and PatroniRetryTimeout are the cluster's
// failure-detection settings (see [Patroni]).
const (
	PatroniTTL          = 10 * time.Second
	PatroniLoopWait     = 2 * time.Second
	PatroniRetryTimeout = 4 * time.Second
)

// StartPatroni starts etcd and members Patroni members (2 or 3) of
// PostgreSQL, in synchronous_mode when sync is true, and waits until a
// leader runs and every other member streams from it. It skips (or fails
// under CI) when Patroni, etcd or PostgreSQL is not installed.
func StartPatroni(t testing.TB, members int, sync bool) *Patroni {
	t.Helper()
	if members < 2 || members > 3 {
		t.Fatalf("testenv: StartPatroni: %d members, want 2 or 3", members)
	}
	patroni, err := exec.LookPath("patroni")
	if err != nil {
		Missing(t, "Patroni", patroniInstall, err)
	}
	etcd, err := findBinary("etcd", "/usr/bin")
	if err != nil {
		Missing(t, "etcd", patroniInstall, err)
	}
	bin, cred := pgServer(t, patroniInstall)
	dir, err := os.MkdirTemp("", "idem-patroni-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the members' directories inside are the postgres user's
		t.Fatal(err)
	}
	p := &Patroni{t: t, cred: cred, bin: bin, patroni: patroni, dir: dir, sync: sync,
		scope: fmt.Sprintf("idem-%d", time.Now().UnixNano())}
	t.Cleanup(p.stop)
	if err := p.start(etcd, members); err != nil {
		t.Fatalf("testenv: Patroni cluster: %v", err)
	}
	return p
}

func (p *Patroni) start(etcd string, members int) error {
	edir := filepath.Join(p.dir, "etcd")
	if err := os.Mkdir(edir, 0o700); err != nil {
		return err
	}
	var err error
	if p.etcdAPI, err = testport.Free(); err != nil {
		return err
	}
	peer, err := testport.Free()
	if err != nil {
		return err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", p.etcdAPI)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	p.etcd, err = start(edir, nil, etcd, "--name", "e0", "--data-dir", filepath.Join(edir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "e0="+peerURL, "--log-level", "warn")
	if err != nil {
		return err
	}
	if err := Poll(30*time.Second, 50*time.Millisecond, func() error {
		return httpGet(client+"/health", nil)
	}); err != nil {
		return fmt.Errorf("etcd: %w: %s", err, p.etcd.logTail())
	}
	for i := range members {
		m, err := p.newMember(i)
		if err != nil {
			return err
		}
		p.members = append(p.members, m)
		if err := p.run(m); err != nil {
			return err
		}
		if i == 0 { // the first bootstraps; the others clone it
			if _, err := p.waitLeader(60 * time.Second); err != nil {
				return fmt.Errorf("%w%s", err, p.logTails())
			}
		}
	}
	if err := p.waitStreaming(90*time.Second, members-1); err != nil {
		return fmt.Errorf("%w%s", err, p.logTails())
	}
	return nil
}

// logTails is the end of each member's log, for an error that ends the
// test (its directory goes with it).
func (p *Patroni) logTails() string {
	var b strings.Builder
	for _, m := range p.members {
		if m.srv != nil {
			fmt.Fprintf(&b, "\n--- member %s's log (end):\n%s", m.name, m.srv.logTail())
		}
	}
	return b.String()
}

func (p *Patroni) newMember(i int) (*patroniMember, error) {
	m := &patroniMember{name: fmt.Sprintf("m%d", i), dir: filepath.Join(p.dir, fmt.Sprintf("m%d", i))}
	if err := os.Mkdir(m.dir, 0o700); err != nil {
		return nil, err
	}
	var err error
	if m.pg, err = testport.Free(); err != nil {
		return nil, err
	}
	if m.api, err = testport.Free(); err != nil {
		return nil, err
	}
	m.conffile = filepath.Join(m.dir, "patroni.yml")
	if err := os.WriteFile(m.conffile, []byte(p.config(m)), 0o600); err != nil {
		return nil, err
	}
	if p.cred != nil {
		for _, f := range []string{m.dir, m.conffile} {
			if err := os.Chown(f, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// config is member m's patroni.yml: JSON, which is YAML.
func (p *Patroni) config(m *patroniMember) string {
	trust := []string{"local all all trust", "host all all 127.0.0.1/32 trust", "host replication all 127.0.0.1/32 trust"}
	params := map[string]any{
		"fsync": "on", "synchronous_commit": "on", "max_connections": 200, "shared_buffers": "64MB",
		"wal_sender_timeout": "5s", "wal_receiver_timeout": "5s", "wal_retrieve_retry_interval": "200ms",
		"unix_socket_directories": m.dir,
	}
	c := map[string]any{
		"scope": p.scope, "namespace": "/idem/", "name": m.name,
		"log":     map[string]any{"level": "INFO"}, // its decisions, for Diagnose
		"restapi": map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", m.api), "connect_address": fmt.Sprintf("127.0.0.1:%d", m.api)},
		"etcd3":   map[string]any{"hosts": []string{fmt.Sprintf("127.0.0.1:%d", p.etcdAPI)}},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl": int(PatroniTTL.Seconds()), "loop_wait": int(PatroniLoopWait.Seconds()),
				"retry_timeout": int(PatroniRetryTimeout.Seconds()), "synchronous_mode": p.sync,
				"maximum_lag_on_failover": 1 << 30, // promote even a lagging replica: the probe counts what that loses
				"postgresql":              map[string]any{"use_pg_rewind": false, "parameters": params},
			},
			"initdb": []any{map[string]any{"encoding": "UTF8"}, map[string]any{"locale": "C"}, map[string]any{"auth": "trust"}},
		},
		"postgresql": map[string]any{
			"listen": fmt.Sprintf("127.0.0.1:%d", m.pg), "connect_address": fmt.Sprintf("127.0.0.1:%d", m.pg),
			"data_dir": filepath.Join(m.dir, "data"), "bin_dir": p.bin, "pgpass": filepath.Join(m.dir, "pgpass"),
			"authentication": map[string]any{
				"superuser":   map[string]any{"username": "postgres", "password": "postgres"},
				"replication": map[string]any{"username": "replicator", "password": "replicator"},
			},
			"parameters": map[string]any{"unix_socket_directories": m.dir},
			"pg_hba":     trust,
		},
	}
	b, _ := json.MarshalIndent(c, "", "  ")
	return string(b)
}

func (p *Patroni) run(m *patroniMember) error {
	s, err := start(m.dir, p.cred, p.patroni, m.conffile)
	if err != nil {
		return err
	}
	m.srv, m.dead = s, false
	return nil
}

// patroniCluster is what GET /cluster answers.
type patroniCluster struct {
	Members []struct {
		Name  string `json:"name"`
		Role  string `json:"role"`
		State string `json:"state"`
		Port  int    `json:"port"`
	} `json:"members"`
}

// cluster asks the live members' REST APIs for the cluster's state.
func (p *Patroni) cluster() (patroniCluster, error) {
	var c patroniCluster
	err := errors.New("no live member")
	for _, m := range p.live() {
		if err = httpGet(fmt.Sprintf("http://127.0.0.1:%d/cluster", m.api), &c); err == nil {
			return c, nil
		}
	}
	return c, err
}

func (p *Patroni) live() []*patroniMember {
	p.mu.Lock()
	defer p.mu.Unlock()
	var l []*patroniMember
	for _, m := range p.members {
		if !m.dead {
			l = append(l, m)
		}
	}
	return l
}

// Diagnose describes the cluster for a failure message: its members as
// the REST API lists them, then the end of each member's Patroni log
// (where it says why it did or did not take the lead).
func (p *Patroni) Diagnose() string {
	var b strings.Builder
	c, err := p.cluster()
	fmt.Fprintf(&b, "members: %+v (%v)\n", c.Members, err)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.members {
		fmt.Fprintf(&b, "--- %s (killed: %v), end of its log:\n%s\n", m.name, m.dead, m.srv.logTail())
	}
	return b.String()
}

// WaitLeader waits until a member is the running leader and returns its
// name.
func (p *Patroni) WaitLeader(d time.Duration) (string, error) { return p.waitLeader(d) }

func (p *Patroni) waitLeader(d time.Duration) (string, error) {
	var leader string
	err := Poll(d, 50*time.Millisecond, func() error {
		c, err := p.cluster()
		if err != nil {
			return err
		}
		for _, m := range c.Members {
			if m.Role == "leader" && m.State == "running" && !p.isDead(m.Name) {
				leader = m.Name
				return nil
			}
		}
		return fmt.Errorf("no running leader: %+v", c.Members)
	})
	return leader, err
}

// waitStreaming waits until n live members stream from the leader (and
// one of them is the synchronous standby in synchronous_mode).
func (p *Patroni) waitStreaming(d time.Duration, n int) error {
	return Poll(d, 100*time.Millisecond, func() error {
		c, err := p.cluster()
		if err != nil {
			return err
		}
		streaming, sync := 0, false
		for _, m := range c.Members {
			if m.Role != "leader" && (m.State == "streaming" || m.State == "running") && !p.isDead(m.Name) {
				streaming++
				sync = sync || m.Role == "sync_standby"
			}
		}
		if streaming < n || (p.sync && !sync) {
			return fmt.Errorf("%d of %d replicas streaming (a synchronous one: %v): %+v", streaming, n, sync, c.Members)
		}
		return nil
	})
}

func (p *Patroni) isDead(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.members {
		if m.name == name {
			return m.dead
		}
	}
	return false
}

// URL is what a client configures to follow the leader: every member, and
// target_session_attrs=read-write.
func (p *Patroni) URL() string {
	var hosts []string
	for _, m := range p.members {
		hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", m.pg))
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/postgres?sslmode=disable&connect_timeout=2&target_session_attrs=read-write"
}

// MemberURL reaches the named member alone.
func (p *Patroni) MemberURL(name string) string {
	for _, m := range p.members {
		if m.name == name {
			return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", m.pg)
		}
	}
	return ""
}

// KillLeader kills the leader's Patroni and its PostgreSQL (postmaster
// and backends) with SIGKILL, as a machine's sudden death would, and
// returns the leader's name. The survivors promote one of them once the
// leader key expires in etcd (ttl).
func (p *Patroni) KillLeader() (string, error) {
	leader, err := p.waitLeader(10 * time.Second)
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.members {
		if m.name != leader {
			continue
		}
		pid := postmasterPID(filepath.Join(m.dir, "data"))
		_ = syscall.Kill(-m.srv.cmd.Process.Pid, syscall.SIGKILL)
		if pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGKILL) // postgres runs in a session of its own
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = m.srv.cmd.Wait()
		m.dead = true
	}
	return leader, nil
}

// Switchover asks the leader's REST API to hand over to another member
// (POST /switchover, as patronictl switchover does) and waits until a new
// leader runs. Patroni stops the old leader cleanly once a candidate has
// caught up, so nothing committed is lost. It returns the new leader.
func (p *Patroni) Switchover() (string, error) {
	leader, err := p.waitLeader(10 * time.Second)
	if err != nil {
		return "", err
	}
	// A candidate must stream (in synchronous_mode, be the synchronous
	// standby), or Patroni refuses (412).
	if err := p.waitStreaming(60*time.Second, len(p.live())-1); err != nil {
		return "", err
	}
	var api int
	for _, m := range p.members {
		if m.name == leader {
			api = m.api
		}
	}
	body, _ := json.Marshal(map[string]string{"leader": leader})
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/switchover", api), "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("switchover: %s: %s", resp.Status, msg)
	}
	var next string
	err = Poll(60*time.Second, 50*time.Millisecond, func() error {
		var err error
		if next, err = p.waitLeader(time.Second); err == nil && next == leader {
			err = errors.New("the old leader still leads")
		}
		return err
	})
	return next, err
}

// WaitReplicated waits until every replica streaming from the leader has
// replayed everything the leader has written so far.
func (p *Patroni) WaitReplicated(ctx context.Context) error {
	leader, err := p.waitLeader(30 * time.Second)
	if err != nil {
		return err
	}
	db := p.Admin(leader)
	var lsn string
	if err := db.QueryRowContext(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		return err
	}
	return Poll(30*time.Second, 20*time.Millisecond, func() error {
		var behind int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_replication WHERE replay_lsn IS NULL OR replay_lsn < $1::pg_lsn`, lsn).Scan(&behind)
		if err == nil && behind > 0 {
			err = fmt.Errorf("%d replicas behind", behind)
		}
		return err
	})
}

// postmasterPID reads the postmaster's pid from data's postmaster.pid.
func postmasterPID(data string) int {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

func (p *Patroni) stop() {
	for _, m := range p.members {
		if m.srv != nil && !m.dead {
			_ = m.srv.cmd.Process.Signal(syscall.SIGKILL)
			_ = m.srv.cmd.Wait()
		}
		if m.srv != nil {
			m.srv.logf.Close()
		}
		// The data goes with the directory: no shutdown needed. (Once
		// Patroni is dead the postmaster's parent is init, which may not
		// reap it in a container: waiting for it to vanish would not end.)
		if pid := postmasterPID(filepath.Join(m.dir, "data")); pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if p.etcd != nil {
		p.etcd.stop(syscall.SIGTERM)
	}
	_ = os.RemoveAll(p.dir)
}

// Admin opens a pool on the named member, closed when the test ends.
func (p *Patroni) Admin(name string) *sql.DB { return Open(p.t, "pgx", p.MemberURL(name)) }

// httpGet GETs url and decodes a 2xx JSON answer into v (nil: ignored).
func httpGet(url string, v any) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(b, v)
}
