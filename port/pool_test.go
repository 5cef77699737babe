package port

import (
	"testing"
	"time"
)

func TestTemplateOfShapeOnly(t *testing.T) {
	a := RunSpec{RunID: "a", Image: "img", Argv: []string{"x"}, Env: map[string]string{"K": "1"}, WorkspaceDir: "/w1",
		Mounts: []Mount{{Source: "/s1", Target: "/data"}}, LLM: &LLMSocket{HostDir: "/l1"}, Limits: Limits{Timeout: time.Second}}
	b := RunSpec{RunID: "b", Image: "img", Argv: []string{"y"}, WorkspaceDir: "/w2",
		Mounts: []Mount{{Source: "/s2", Target: "/data"}}, LLM: &LLMSocket{HostDir: "/l2"}, Limits: Limits{Timeout: time.Hour}, OutputLimit: 5}
	ta, tb := TemplateOf(a), TemplateOf(b)
	if !ta.Equal(tb) || ta.Key() != tb.Key() {
		t.Fatalf("same shape, different templates: %+v vs %+v", ta, tb)
	}
	for name, change := range map[string]func(*RunSpec){
		"image":     func(s *RunSpec) { s.Image = "other" },
		"user":      func(s *RunSpec) { s.User = "1002" },
		"memory":    func(s *RunSpec) { s.Limits.MemoryBytes = 64 << 20 },
		"workspace": func(s *RunSpec) { s.WorkspaceDir = "" },
		"mount rw":  func(s *RunSpec) { s.Mounts[0].Writable = true },
		"target":    func(s *RunSpec) { s.Mounts[0].Target = "/other" },
		"llm":       func(s *RunSpec) { s.LLM = nil },
	} {
		c := b
		c.Mounts = append([]Mount(nil), b.Mounts...)
		change(&c)
		if tc := TemplateOf(c); tc.Equal(ta) || tc.Key() == ta.Key() {
			t.Errorf("%s: a different shape has the same template", name)
		}
	}
	if err := ta.Spec("pool-x").Validate(); err != nil {
		t.Errorf("the template's spec is invalid: %v", err)
	}
}
