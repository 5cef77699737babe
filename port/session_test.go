package port

import (
	"errors"
	"testing"
	"time"
)

func TestSessionSpecDefaultsAndValidate(t *testing.T) {
	s := SessionSpec{RunSpec: RunSpec{RunID: "r1", Image: "img"}, Expose: []int{7000}}.WithDefaults()
	if s.Limits.Timeout != DefaultSessionLifetime || s.LogLimit != DefaultLogLimit || s.User != DefaultUser {
		t.Fatalf("defaults: %+v", s)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*SessionSpec){
		"port zero":  func(s *SessionSpec) { s.Expose = []int{0} },
		"port big":   func(s *SessionSpec) { s.Expose = []int{65536} },
		"twice":      func(s *SessionSpec) { s.Expose = []int{80, 80} },
		"too many":   func(s *SessionSpec) { s.Expose = []int{1, 2, 3, 4, 5, 6, 7, 8, 9} },
		"log limit":  func(s *SessionSpec) { s.LogLimit = -1 },
		"root":       func(s *SessionSpec) { s.User = "0:0" },
		"bad run id": func(s *SessionSpec) { s.RunID = "../x" },
	} {
		c := s
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", name, err)
		}
	}
}

func TestExecSpecValidate(t *testing.T) {
	e := ExecSpec{Argv: []string{"/bin/x", "a b"}}.WithDefaults()
	if e.Timeout != DefaultTimeout || e.OutputLimit != DefaultOutputLimit {
		t.Fatalf("defaults: %+v", e)
	}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]ExecSpec{
		"empty":    {},
		"nul argv": {Argv: []string{"a\x00b"}},
		"env key":  {Argv: []string{"x"}, Env: map[string]string{"A=B": "1"}},
		"env nul":  {Argv: []string{"x"}, Env: map[string]string{"A": "\x00"}},
		"rel dir":  {Argv: []string{"x"}, Dir: "work"},
		"negative": {Argv: []string{"x"}, Timeout: -time.Second},
	} {
		if err := c.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", name, err)
		}
	}
}
