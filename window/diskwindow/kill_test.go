package diskwindow

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// The kill -9 test re-executes the test binary as a child that adds
// batches of fresh ids (and one duplicate each) and prints "ack N" after
// batch N's AddBatch returns; the parent SIGKILLs it at a random moment,
// opens the set and counts the acknowledged ids it forgot and the never
// sent ids it claims to have seen.
const (
	childEnv      = "IDEM_DISKWINDOW_CHILD"
	childStartEnv = "IDEM_DISKWINDOW_START"
	killBatch     = 500
	killMaxOpen   = 20000 // a seal every 40 batches: crashes land in seals too
)

func killIDs(b int) []string {
	ids := make([]string, killBatch)
	for j := range ids {
		ids[j] = "id-" + strconv.Itoa(b) + "-" + strconv.Itoa(j)
	}
	return ids
}

func killNow(b int) time.Time { return t0.Add(time.Duration(b) * time.Millisecond) }

// killChild runs in the child process until it is killed.
func killChild() {
	dir := os.Getenv(childEnv)
	start, _ := strconv.Atoi(os.Getenv(childStartEnv))
	s, err := Open(dir, time.Hour, WithMaxOpen(killMaxOpen))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	var dups []bool
	for b := start; b < start+1_000_000; b++ {
		ids := append(killIDs(b), killIDs(start)[0])
		dups, err = s.AddBatch(context.Background(), "k", ids, killNow(b), dups[:0])
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		for j, d := range dups[:killBatch] {
			if d {
				fmt.Printf("error fresh id %d of batch %d answered duplicate\n", j, b)
				os.Exit(1)
			}
		}
		if b > start && !dups[killBatch] {
			fmt.Printf("error batch %d: duplicate answered new\n", b)
			os.Exit(1)
		}
		os.Stdout.WriteString("ack " + strconv.Itoa(b) + "\n")
	}
	os.Exit(0)
}

func TestKill9(t *testing.T) { killRounds(t, "") }

// TestKill9InMerge aims each kill inside a merge: the parent watches the
// directory and kills the child while a merged file is being written (its
// temporary file stands beside the newer input it will replace).
func TestKill9InMerge(t *testing.T) { killRounds(t, aimMerge) }

// TestKill9InSeal aims each kill inside a background seal: while a sealed
// file is being written (a temporary file with no finished namesake), its
// generation's journal not yet deleted.
func TestKill9InSeal(t *testing.T) { killRounds(t, aimSeal) }

const (
	aimMerge = "a merge"
	aimSeal  = "a seal"
)

// killRounds runs the kill -9 rounds, each kill at a random moment or,
// with aim, inside a merge or a seal.
func killRounds(t *testing.T, aim string) {
	if testing.Short() {
		testenv.Cannot(t, "the kill -9 rounds start child processes and kill them: run without -short")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rounds := 6
	if os.Getenv("IDEM_KILL_ROUNDS") != "" {
		rounds, _ = strconv.Atoi(os.Getenv("IDEM_KILL_ROUNDS"))
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var acked [][2]int // [first, last] acknowledged batch of each round
	start, forgotten, falselySeen, total, inside := 0, 0, 0, 0, 0
	for round := range rounds {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+dir, childStartEnv+"="+strconv.Itoa(start))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill after a random number of acknowledged batches (up to about
		// two seals' worth), at a random point of the next one; or, aimed
		// at a merge, at the first merge after that.
		killAfter := 1 + r.IntN(100)
		var armed atomic.Bool
		watched, force := make(chan bool, 1), make(chan struct{})
		if aim != "" {
			go func() { watched <- killInWrite(dir, aim, cmd.Process, &armed, force) }()
		}
		sc := bufio.NewScanner(out)
		last := -1
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "error") {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("round %d: child: %s", round, line)
			}
			last, _ = strconv.Atoi(strings.TrimPrefix(line, "ack "))
			if last-start+1 < killAfter {
				continue
			}
			if aim == "" {
				time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
				cmd.Process.Signal(syscall.SIGKILL)
				break
			}
			armed.Store(true)
			if last-start+1 >= killAfter+2000 { // no merge seen: kill anyway
				break
			}
		}
		if aim != "" {
			close(force) // the watcher kills the child now if it has not
			if <-watched {
				inside++
			}
		}
		cmd.Wait()
		if last < start {
			t.Fatalf("round %d: child acknowledged nothing", round)
		}
		acked = append(acked, [2]int{start, last})

		// Every acknowledged id is a duplicate; ids never sent are new.
		s, err := Open(dir, time.Hour)
		if err != nil {
			t.Fatalf("round %d: reopen after kill -9: %v", round, err)
		}
		now := killNow(last + 2)
		for _, span := range acked {
			for b := span[0]; b <= span[1]; b++ {
				dups, err := s.AddBatch(context.Background(), "k", killIDs(b), now, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range dups {
					total++
					if !d {
						forgotten++
					}
				}
			}
		}
		dups, err := s.AddBatch(context.Background(), "never", killIDs(round), now, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dups {
			if d {
				falselySeen++
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if left := tmpFilesIn(dir); len(left) > 0 {
			t.Fatalf("round %d: temporary files left after a reopen: %v", round, left)
		}
		start = last + 10 // past the batch in flight at the kill
	}
	t.Logf("%d rounds: %d acknowledged ids checked, %d forgotten, %d never-sent ids falsely seen", rounds, total, forgotten, falselySeen)
	if forgotten > 0 || falselySeen > 0 {
		t.Fatalf("%d acknowledged ids forgotten, %d falsely seen", forgotten, falselySeen)
	}
	if aim != "" {
		t.Logf("%d of %d kills landed inside %s", inside, rounds, aim)
		if inside == 0 {
			t.Fatalf("no kill landed inside %s", aim)
		}
	}
}

// killInWrite polls dir, once armed, for a merge being written
// (gen-X.edf.tmp beside gen-X.edf) or a seal (a temporary file with no
// finished namesake), as aim says, kills p when it sees one, and reports
// whether it did. When force is closed first it kills p and reports false.
func killInWrite(dir, aim string, p *os.Process, armed *atomic.Bool, force <-chan struct{}) bool {
	for {
		select {
		case <-force:
			p.Signal(syscall.SIGKILL)
			return false
		default:
		}
		if armed.Load() {
			for _, name := range tmpFilesIn(dir) {
				_, err := os.Stat(filepath.Join(dir, strings.TrimSuffix(name, ".tmp")))
				if (err == nil) == (aim == aimMerge) {
					p.Signal(syscall.SIGKILL)
					return true
				}
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func tmpFilesIn(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			names = append(names, e.Name())
		}
	}
	return names
}
