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
		// Replaced whole, as a sampler may read it meanwhile.
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
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

// A claimed pooled sandbox on a hybrid host: the run's counters are the change since
// the claim, the peak is reset at the claim, and ClaimBytes is the usage then.
func TestStartClaimedV1(t *testing.T) {
	v1, v2 := t.TempDir(), t.TempDir()
	write(t, v1, map[string]string{
		"memory.limit_in_bytes":     "1073741824\n",
		"memory.usage_in_bytes":     "461373440\n",
		"memory.max_usage_in_bytes": "500000000\n",
		"memory.failcnt":            "40\n",
		"memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
	})
	write(t, v2, map[string]string{"memory.pressure": pressure})
	s := StartClaimed(Paths{V1Memory: v1, V2: v2}, time.Hour)
	if b, _ := os.ReadFile(filepath.Join(v1, "memory.max_usage_in_bytes")); string(b) != "0" {
		t.Errorf("peak not reset at the claim: %q", b)
	}
	// The run: more limit hits, an OOM kill, 300 ms more full stall, a new peak.
	write(t, v1, map[string]string{
		"memory.max_usage_in_bytes": "700000000\n",
		"memory.failcnt":            "45\n",
		"memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
	})
	write(t, v2, map[string]string{"memory.pressure": "some avg10=1.00 avg60=0 avg300=0 total=3000000\nfull avg10=2.00 avg60=0 avg300=0 total=1800000\n"})
	m := s.Stop()
	want := port.MemoryPressure{LimitBytes: 1 << 30, PeakBytes: 700000000, LimitHits: 5, OOMKills: 1,
		SomeStall: 500 * time.Millisecond, FullStall: 300 * time.Millisecond, FullAvg10: 2, ClaimBytes: 461373440}
	if m == nil {
		t.Fatal("no memory data")
	}
	got := *m
	got.Samples = 0
	if got != want || m.Samples < 2 {
		t.Fatalf("got %+v, want %+v", *m, want)
	}
}

// On cgroup v2 the peak is reset for the file the sampler holds open; the cgroup
// going away before the end keeps the last sample.
func TestStartClaimedV2(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"memory.max":      "67108864\n",
		"memory.current":  "1000000\n",
		"memory.peak":     "9000000\n",
		"memory.events":   "max 3\noom_kill 0\n",
		"memory.pressure": pressure,
	})
	s := StartClaimed(Paths{V2: dir}, time.Hour)
	// The peak file the sampler reset and holds open now says 2000000.
	if err := os.WriteFile(filepath.Join(dir, "memory.peak"), []byte("2000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, dir, map[string]string{"memory.events": "max 4\noom_kill 0\n"})
	s.Sample()
	if err := os.Rename(dir, dir+"-gone"); err != nil { // the cgroup goes, at once
		t.Fatal(err)
	}
	m := s.Stop()
	if m == nil || m.PeakBytes != 2000000 || m.LimitHits != 1 || m.ClaimBytes != 1000000 || m.LimitBytes != 64<<20 || m.SomeStall != 0 {
		t.Fatalf("got %+v", m)
	}
	if none := StartClaimed(Paths{V2: filepath.Join(dir, "gone")}, time.Millisecond).Stop(); none != nil {
		t.Errorf("a vanished cgroup, yet %+v", none)
	}
	if none := StartClaimed(Paths{}, time.Millisecond).Stop(); none != nil {
		t.Errorf("no cgroup, yet %+v", none)
	}
}

// The stall times are the sandbox's own or none: a process left in the unified
// root (runsc's sandbox on a hybrid host) or in another unified cgroup than its
// memory one reads no PSI, else a 400 ms run was reported stalled for seconds.
func TestParseKeepsOnlyTheSandboxsCgroup(t *testing.T) {
	old := Root
	Root = t.TempDir()
	t.Cleanup(func() { Root = old })
	mk := func(dir string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, dir, map[string]string{"cgroup.procs": ""})
	}
	uni := filepath.Join(Root, "unified")
	mk(uni)
	write(t, uni, map[string]string{"cgroup.subtree_control": ""})
	mk(filepath.Join(uni, "ns", "run-a"))
	mk(filepath.Join(uni, "system.slice", "containerd.service"))
	mk(filepath.Join(Root, "memory", "ns", "run-a"))
	for _, c := range []struct {
		name, file string
		want       Paths
	}{
		{"runc: same path in both", "4:memory:/ns/run-a\n0::/ns/run-a\n",
			Paths{V1Memory: filepath.Join(Root, "memory", "ns", "run-a"), V2: filepath.Join(uni, "ns", "run-a")}},
		{"runsc: unified root", "4:memory:/ns/run-a\n0::/\n",
			Paths{V1Memory: filepath.Join(Root, "memory", "ns", "run-a")}},
		{"another unified cgroup", "4:memory:/ns/run-a\n0::/system.slice/containerd.service\n",
			Paths{V1Memory: filepath.Join(Root, "memory", "ns", "run-a")}},
		{"v2 root only", "0::/\n", Paths{}},
	} {
		got, ok := parse([]byte(c.file))
		if got != c.want || ok != (c.want != Paths{}) {
			t.Errorf("%s: got %+v ok=%v, want %+v", c.name, got, ok, c.want)
		}
	}
}
