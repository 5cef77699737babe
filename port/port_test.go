package port

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidateRunID(t *testing.T) {
	for _, ok := range []string{"a", "run-1", "R_2.x", strings.Repeat("a", 64)} {
		if err := ValidateRunID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", ".a", "a/b", "../x", "a b", "a\n", strings.Repeat("a", 65), "é"} {
		if err := ValidateRunID(bad); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%q: err = %v, want ErrInvalidSpec", bad, err)
		}
	}
}

func TestRunErrorUnwraps(t *testing.T) {
	err := error(&OpError{Op: "x.RunOnce", RunID: "r1", Err: &RunError{Code: CodeTimeout, Err: context.Canceled}})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) || errors.Is(err, ErrOOMKilled) {
		t.Errorf("errors.Is mismatch for %v", err)
	}
	var re *RunError
	if !errors.As(err, &re) || re.Code != CodeTimeout {
		t.Errorf("errors.As: %v", err)
	}
	if got := err.Error(); got != "x.RunOnce (run r1): timeout: context canceled" {
		t.Errorf("message %q", got)
	}
	if !errors.Is(&RunError{Code: CodeOOMKilled}, ErrOOMKilled) {
		t.Error("a RunError without cause must still match its sentinel")
	}
}

func TestRunSpecDefaultsAndValidate(t *testing.T) {
	s := RunSpec{RunID: "r", Image: "img"}.WithDefaults()
	if s.User != DefaultUser || s.Limits.PIDs != DefaultPIDs || s.Limits.MemoryBytes != DefaultMemoryBytes ||
		s.Limits.Timeout != DefaultTimeout || s.OutputLimit != DefaultOutputLimit {
		t.Errorf("defaults not applied: %+v", s)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	// A negative limit is an error, never silently replaced by the default.
	neg := RunSpec{RunID: "r", Image: "img", Limits: Limits{Timeout: -time.Second}}.WithDefaults()
	if err := neg.Validate(); !errors.Is(err, ErrInvalidSpec) || neg.Limits.Timeout != -time.Second {
		t.Errorf("negative timeout: %v (timeout %v), want ErrInvalidSpec", err, neg.Limits.Timeout)
	}
	for name, mut := range map[string]func(*RunSpec){
		"root uid":            func(s *RunSpec) { s.User = "0" },
		"root uid padded":     func(s *RunSpec) { s.User = "000:1" },
		"open files too low":  func(s *RunSpec) { s.Limits.OpenFiles = 3 },
		"negative memory":     func(s *RunSpec) { s.Limits.MemoryBytes = -1 },
		"negative output cap": func(s *RunSpec) { s.OutputLimit = -1 },
		"open files too high": func(s *RunSpec) { s.Limits.OpenFiles = MaxOpenFiles + 1 },
		"name user":           func(s *RunSpec) { s.User = "nobody" },
		"NUL in argv":         func(s *RunSpec) { s.Argv = []string{"a\x00b"} },
		"mount over /dev":     func(s *RunSpec) { s.Mounts = []Mount{{Source: "/tmp", Target: "/dev/x"}} },
		"mount on root":       func(s *RunSpec) { s.Mounts = []Mount{{Source: "/tmp", Target: "/"}} },
		"negative cpus":       func(s *RunSpec) { s.Limits.NanoCPUs = -1 },
		"relative llm dir":    func(s *RunSpec) { s.LLM = &LLMSocket{HostDir: "x"} },
		"negative timeout":    func(s *RunSpec) { s.Limits.Timeout = -time.Second },
	} {
		c := s
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: err = %v, want ErrInvalidSpec", name, err)
		}
	}
}

func TestAttestationViolations(t *testing.T) {
	good := Attestation{UID: 1001, GID: 1001, Interfaces: []string{"lo"}, CapEff: "0000000000000000",
		CapPrm: "0000000000000000", CapBnd: "0000000000000000", NoNewPrivs: true, Seccomp: 2,
		ReadOnlyRoot: true, OpenFiles: 1024, PIDsMax: "256"}
	if v := good.Violations(); len(v) != 0 {
		t.Fatalf("a locked-down sandbox has violations: %v", v)
	}
	for name, c := range map[string]struct {
		mut  func(*Attestation)
		want string
	}{
		"eth0":                    {func(a *Attestation) { a.Interfaces = []string{"eth0", "lo"} }, "network interfaces"},
		"route":                   {func(a *Attestation) { a.Routes = 1 }, "routes"},
		"cap_net_raw":             {func(a *Attestation) { a.CapBnd = "0000000000002000" }, "bounding capabilities"},
		"bad hex":                 {func(a *Attestation) { a.CapEff = "zz" }, "effective capabilities"},
		"privs":                   {func(a *Attestation) { a.NoNewPrivs = false }, "no_new_privs"},
		"seccomp off":             {func(a *Attestation) { a.Seccomp = 0 }, "seccomp"},
		"root":                    {func(a *Attestation) { a.UID = 0 }, "root"},
		"writable root":           {func(a *Attestation) { a.ReadOnlyRoot = false }, "writable"},
		"docker.sock":             {func(a *Attestation) { a.EngineSockets = []string{"/var/run/docker.sock"} }, "engine sockets"},
		"nofile":                  {func(a *Attestation) { a.OpenFiles = 1 << 20 }, "open files"},
		"pids":                    {func(a *Attestation) { a.PIDsMax = "max" }, "pids limit"},
		"no pids file":            {func(a *Attestation) { a.PIDsMax = "" }, "pids limit"},
		"gvisor unseen pids file": {func(a *Attestation) { a.Kernel, a.PIDsMax = KernelGVisor, "" }, "pids limit"},
		"runsc on linux":          {func(a *Attestation) { a.Kernel, a.Runtime = KernelLinux, "/usr/local/bin/runsc-sandbox" }, "runtime"},
		"runc on gvisor":          {func(a *Attestation) { a.Kernel, a.Runtime = KernelGVisor, "runc" }, "runtime"},
		"runtime, kernel unknown": {func(a *Attestation) { a.Runtime = "crun" }, "runtime"},
	} {
		a := good
		c.mut(&a)
		v := a.Violations()
		if len(v) != 1 || !strings.Contains(v[0], c.want) {
			t.Errorf("%s: violations %v, want one about %q", name, v, c.want)
		}
	}
	// What the runtime explains is no violation: gVisor's cgroupfs shows no pids limit
	// (the host's cgroup holds it), and a kernel that matches the host's runtime.
	for name, mut := range map[string]func(*Attestation){
		"gvisor pids":    func(a *Attestation) { a.Kernel, a.PIDsMax, a.Runtime = KernelGVisor, "max", "runsc" },
		"runc on linux":  func(a *Attestation) { a.Kernel, a.Runtime = KernelLinux, "runc" },
		"docker default": func(a *Attestation) { a.Kernel = KernelLinux },
	} {
		a := good
		mut(&a)
		if v := a.Violations(); len(v) != 0 {
			t.Errorf("%s: violations %v", name, v)
		}
	}
	var none *Attestation
	if v := none.Violations(); len(v) != 1 {
		t.Errorf("nil attestation: %v", v)
	}
}

func TestSweepOptionsValidate(t *testing.T) {
	for name, o := range map[string]SweepOptions{
		"negative grace": {OlderThan: -time.Second},
		"bad run id":     {RunID: "../x"},
	} {
		if err := o.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", name, err)
		}
	}
	for _, o := range []SweepOptions{{}, {OlderThan: time.Minute, RunID: "run-1", DryRun: true}} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
}
