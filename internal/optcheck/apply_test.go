package optcheck

import (
	"errors"
	"testing"
)

type applyConfig struct{ n []int }

type applyOption func(*applyConfig) error

// TestApply: options run in order, nil ones are skipped, the first error stops
// the rest and comes back as it was.
func TestApply(t *testing.T) {
	add := func(i int) applyOption { return func(c *applyConfig) error { c.n = append(c.n, i); return nil } }
	var c applyConfig
	if err := Apply(&c, []applyOption{add(1), nil, add(2)}); err != nil || len(c.n) != 2 || c.n[0] != 1 || c.n[1] != 2 {
		t.Fatalf("Apply = %v, ran %v", err, c.n)
	}
	bad := errors.New("bad")
	c = applyConfig{}
	err := Apply(&c, []applyOption{add(1), func(*applyConfig) error { return bad }, add(3)})
	if err != bad || len(c.n) != 1 {
		t.Errorf("Apply = %v, ran %v; want the error itself after the first option only", err, c.n)
	}
}
