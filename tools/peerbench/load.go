package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/uuidtext"
)

const reqBody = `{"customer":"c-1042","amount":1299,"currency":"EUR","items":[{"sku":"pen","qty":2}]}`

// startChild runs this program again as the server process.
func startChild() (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	addr, err := readAddrs(out)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	return &child{pid: cmd.Process.Pid, addr: addr, stdin: in, wait: cmd.Wait}, nil
}

// procCPU is the CPU time (user and system, all threads) of process pid,
// from /proc (in clock ticks of 10 ms).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	// The command name (field 2) is in parentheses and may hold spaces.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("peerbench: /proc/%d/stat: %q", pid, s)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// keys makes UUIDv4 keys from a per-worker random source.
type keys struct{ r *rand.ChaCha8 }

func newKeys() *keys {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], rand.Uint64())
	binary.LittleEndian.PutUint64(seed[8:], rand.Uint64())
	return &keys{r: rand.NewChaCha8(seed)}
}

func (k *keys) next() string {
	var u [16]byte
	_, _ = k.r.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return uuidtext.Format(u)
}

// result is one load run against one server.
type result struct {
	n       int64         // requests answered as expected
	bad     int64         // requests answered otherwise
	elapsed time.Duration // wall clock
	cpu     time.Duration // the server process's CPU
}

func (r result) rps() float64 { return float64(r.n) / r.elapsed.Seconds() }

func (r result) cpuPerReq() float64 {
	return float64(r.cpu.Microseconds()) / float64(max(r.n+r.bad, 1))
}

// post sends one POST with the idempotency key (all four servers get the
// same request) and returns the status.
func post(c *fasthttp.HostClient, path, key, body string) (int, []byte, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + c.Addr + path)
	req.Header.SetMethod("POST")
	req.Header.Set("Authorization", "Bearer peerbench")
	req.Header.SetContentType("application/json")
	if key != "" {
		req.Header.Set(idemhttp.HeaderKey, key)
	}
	req.SetBodyString(body)
	err := c.Do(req, resp)
	return resp.StatusCode(), append([]byte(nil), resp.Body()...), err
}

func client(addr string, conns int) *fasthttp.HostClient {
	return &fasthttp.HostClient{Addr: addr, MaxConns: conns, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
}

// load runs conc workers against addr for d: each request a new key
// (replayKeys nil) or one of replayKeys, already completed.
func load(pid int, addr string, conc int, d time.Duration, replayKeys []string) (result, error) {
	c := client(addr, conc)
	var n, bad atomic.Int64
	var wg sync.WaitGroup
	cpu0, err := procCPU(pid)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	stop := start.Add(d)
	for w := range conc {
		wg.Go(func() {
			k := newKeys()
			i := w
			for time.Now().Before(stop) {
				var key string
				if replayKeys == nil {
					key = k.next()
				} else {
					key = replayKeys[i%len(replayKeys)]
					i += conc
				}
				status, _, err := post(c, "/orders", key, reqBody)
				if err != nil || status != 201 {
					bad.Add(1)
					continue
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, err := procCPU(pid)
	if err != nil {
		return result{}, err
	}
	return result{n: n.Load(), bad: bad.Load(), elapsed: elapsed, cpu: cpu1 - cpu0}, nil
}
