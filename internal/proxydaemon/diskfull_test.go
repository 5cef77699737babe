package proxydaemon_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/proxydaemon"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
)

// callResult is one call's outcome as its client saw it.
type callResult struct {
	status int
	callID string
}

// TestDiskFullKeepsTheAuditWhole fills the daemon's state directory (a 16 MiB tmpfs
// the test mounts) while a run without a budget makes calls as fast as it can, then
// frees it and goes on:
//   - every call whose answer a client received whole has its record in the audit
//     (the daemon refuses a call, 503, when it cannot record it, and never completes
//     one whose record it then drops);
//   - the journal never holds a torn line (a short write is cut back) and the
//     registry opens again after a restart;
//   - once space is back, the journal is rotated again (it does not grow to refill
//     the disk) and calls are served and recorded again.
//
// About 10 s.
func TestDiskFullKeepsTheAuditWhole(t *testing.T) {
	up := litellmtest.NewServer()
	defer up.Close()
	dir := shortDir(t)
	state := testenv.SmallDisk(t, 16<<20)
	mut := func(c *proxydaemon.Config) { c.StateDir = state }
	d := startDaemon(t, dir, mut)
	reg := register(t, d, up, "run-disk", nil)
	c := runClient(reg.SocketPath, reg.Token)

	var mu sync.Mutex
	var results []callResult
	calls := func(n, workers int) (ok, refused, other int) {
		var wg sync.WaitGroup
		var left = n
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					mu.Lock()
					if left == 0 {
						mu.Unlock()
						return
					}
					left--
					mu.Unlock()
					resp, err := c.Post("http://sandbox/v1/chat/completions", "application/json", strings.NewReader(chat))
					if err != nil {
						mu.Lock()
						other++
						mu.Unlock()
						continue
					}
					_, rerr := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					mu.Lock()
					switch {
					case rerr != nil:
						other++
					case resp.StatusCode == 200:
						ok++
						results = append(results, callResult{200, resp.Header.Get("X-Litellm-Call-Id")})
					case resp.StatusCode == 503:
						refused++
					default:
						other++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return
	}
	if ok, _, _ := calls(20, 4); ok != 20 {
		t.Fatalf("before the disk filled: %d of 20 calls succeeded", ok)
	}

	// The disk fills while calls are in flight: some were admitted with room and
	// end with none.
	var filler *testenv.Filler
	filled := make(chan struct{})
	go func() {
		time.Sleep(50 * time.Millisecond)
		filler = testenv.Fill(t, state)
		close(filled)
	}()
	ok, refused, other := calls(600, 8)
	<-filled
	if more, r2, o2 := calls(200, 8); more+r2+o2 > 0 {
		ok, refused, other = ok+more, refused+r2, other+o2
	}
	t.Logf("calls while the disk filled and once full: %d answered, %d refused (503), %d other", ok, refused, other)
	if refused == 0 {
		t.Errorf("with the disk full no call was refused: the daemon cannot have recorded all %d", ok)
	}
	if err := filler.Free(); err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(state, proxydaemon.DBName+".journal")
	// Space is back: calls are served and recorded again, and the journal is rotated
	// (moved into the database every 250 ms), not left to grow.
	var sizes []int64
	for range 5 {
		if ok, _, _ := calls(100, 8); ok != 100 {
			t.Errorf("with space back: %d of 100 calls succeeded", ok)
		}
		time.Sleep(300 * time.Millisecond)
		if fi, err := os.Stat(journal); err == nil {
			sizes = append(sizes, fi.Size())
		}
	}
	t.Logf("journal sizes with space back: %v", sizes)
	if n := len(sizes); n == 0 || sizes[n-1] > 16<<10 {
		t.Errorf("the journal is not rotated once space is back (sizes %v)", sizes)
	}
	if _, err := os.Stat(journal + ".old"); err == nil {
		t.Error("a journal renamed aside was never moved into the database")
	}
	checkJournalWhole(t, journal)

	have := map[string]bool{}
	recs, err := d.client.Audit(context.Background(), reg.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs.Records {
		have[r.CallID] = true
	}
	lost := 0
	for _, r := range results {
		if !have[r.callID] {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d calls answered whole have no audit record", lost, len(results))
	}

	// A restart opens the registry (nothing torn, nothing corrupt) with every record.
	d.close()
	d2 := startDaemon(t, dir, mut)
	recs2, err := d2.client.Audit(context.Background(), reg.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs2.Records) < len(results) {
		t.Errorf("after a restart the audit has %d records, want at least the %d answered calls", len(recs2.Records), len(results))
	}
}

// checkJournalWhole requires every line of the journal file to be whole JSON.
func checkJournalWhole(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Errorf("the journal ends in a torn line: %q", b[max(0, len(b)-80):])
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		if !json.Valid(sc.Bytes()) {
			t.Errorf("journal line %d is torn: %.80q", n, sc.Bytes())
		}
	}
}
