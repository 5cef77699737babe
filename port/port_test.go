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
