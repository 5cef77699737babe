package port

import (
	"errors"
	"testing"
)

func TestPreloadShapesTemplate(t *testing.T) {
	base := RunSpec{RunID: "r", Image: "img", Argv: []string{"node", "a.mjs"}}
	pre := &Preload{Argv: []string{"node", "/p/preload.mjs"}, Mounts: []Mount{{Source: "/srv/p", Target: "/p"}}}
	with := base
	with.Preload = pre
	if TemplateOf(base).Equal(TemplateOf(with)) || TemplateOf(base).Key() == TemplateOf(with).Key() {
		t.Error("a preloaded shape equals a plain one")
	}
	other := *pre
	other.Mounts = []Mount{{Source: "/srv/other", Target: "/p"}}
	o := base
	o.Preload = &other
	if TemplateOf(with).Equal(TemplateOf(o)) || TemplateOf(with).Key() == TemplateOf(o).Key() {
		t.Error("preloads with different code mounts share a template")
	}
	tm := TemplateOf(with)
	pre.Argv[0] = "changed"
	if tm.Preload.Argv[0] != "node" {
		t.Error("TemplateOf kept the caller's slices")
	}
	cold := with.ColdSpec()
	if cold.Preload != nil || len(cold.Mounts) != 1 || cold.Mounts[0].Target != "/p" || cold.Mounts[0].Writable {
		t.Errorf("ColdSpec = %+v", cold)
	}
	if len(with.Mounts) != 0 {
		t.Error("ColdSpec changed its receiver's mounts")
	}
	for name, p := range map[string]*Preload{
		"no argv":  {},
		"writable": {Argv: []string{"x"}, Mounts: []Mount{{Source: "/a", Target: "/b", Writable: true}}},
		"nul":      {Argv: []string{"x\x00"}},
		"negative": {Argv: []string{"x"}, Timeout: -1},
		"relative": {Argv: []string{"x"}, Mounts: []Mount{{Source: "a", Target: "/b"}}},
		"reserved": {Argv: []string{"x"}, Mounts: []Mount{{Source: "/a", Target: "/workspace"}}},
	} {
		s := base
		s.Preload = p
		if err := s.WithDefaults().Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", name, err)
		}
	}
	if err := with.WithDefaults().Validate(); err != nil {
		t.Errorf("a valid preload: %v", err)
	}
}

func TestEntrypointError(t *testing.T) {
	err := error(&RunError{Code: CodeContainerFailed, Err: &EntrypointError{Entry: "/w/a.mjs", Reason: "gone"}})
	var ee *EntrypointError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &ee) || ee.Entry != "/w/a.mjs" {
		t.Errorf("%v", err)
	}
}
