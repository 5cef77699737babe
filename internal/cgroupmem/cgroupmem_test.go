package cgroupmem

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, c := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const pressure = "some avg10=12.50 avg60=3.00 avg300=1.00 total=2500000\nfull avg10=40.25 avg60=9.00 avg300=2.00 total=1500000\n"

func TestReadV2(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"memory.max":      "20971520\n",
		"memory.peak":     "20000000\n",
		"memory.events":   "low 0\nhigh 0\nmax 731\noom 1\noom_kill 1\noom_group_kill 0\n",
		"memory.pressure": pressure,
	})
	m, ok := Paths{V2: dir}.Read()
	want := port.MemoryPressure{LimitBytes: 20 << 20, PeakBytes: 20000000, LimitHits: 731, OOMKills: 1,
		SomeStall: 2500 * time.Millisecond, FullStall: 1500 * time.Millisecond, FullAvg10: 40.25}
	if !ok || m != want {
		t.Fatalf("got %+v, want %+v", m, want)
	}
}

// A hybrid host: limits and events from the v1 memory controller, stalls from the
// unified hierarchy.
func TestReadV1WithUnifiedPSI(t *testing.T) {
	v1, v2 := t.TempDir(), t.TempDir()
	write(t, v1, map[string]string{
		"memory.limit_in_bytes":     "67108864\n",
		"memory.max_usage_in_bytes": "1234567\n",
		"memory.failcnt":            "12\n",
		"memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
	})
	write(t, v2, map[string]string{"memory.pressure": pressure, "memory.max": "ignored on a hybrid host"})
	m, ok := Paths{V1Memory: v1, V2: v2}.Read()
	if !ok || m.LimitBytes != 64<<20 || m.PeakBytes != 1234567 || m.LimitHits != 12 || m.OOMKills != 2 || m.FullStall != 1500*time.Millisecond {
		t.Fatalf("got %+v", m)
	}
	if _, ok := (Paths{V2: filepath.Join(v2, "gone")}).Read(); ok {
		t.Error("a vanished cgroup read as ok")
	}
}

func TestHint(t *testing.T) {
	timeout := errors.New("run exceeded its 2m0s limit")
	d := 2 * time.Minute
	calm := &port.MemoryPressure{FullStall: time.Second}
	if err := Hint(timeout, calm, d); err != timeout {
		t.Errorf("a calm run got a hint: %v", err)
	}
	if err := Hint(timeout, nil, d); err != timeout {
		t.Errorf("no data got a hint: %v", err)
	}
	thrash := &port.MemoryPressure{LimitBytes: 20 << 20, FullStall: 90 * time.Second, LimitHits: 5000}
	err := Hint(timeout, thrash, d)
	if !errors.Is(err, timeout) || !strings.Contains(err.Error(), "stalled on memory for 1m30s of 2m0s") || !strings.Contains(err.Error(), "memory limit looks too small") {
		t.Errorf("hint: %v", err)
	}
}

// Sampler on this process: it reads whatever cgroup the test runs in, and Stop
// returns promptly.
func TestSamplerOnSelf(t *testing.T) {
	s := Start(func() int { return os.Getpid() }, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	s.Sample()
	m := s.Stop()
	if _, ok := ForPID(os.Getpid()); ok && (m == nil || m.Samples == 0) {
		t.Errorf("no samples of a readable cgroup: %+v", m)
	}
	if none := Start(func() int { return 0 }, time.Millisecond).Stop(); none != nil {
		t.Errorf("no process, yet %+v", none)
	}
}
