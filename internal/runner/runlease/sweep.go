package runlease

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// Dead returns the run IDs of owner's leases under root that are no longer held (their
// holder died or stopped refreshing them), sorted: what a sweep lists before it
// removes them one by one with RemoveDead, so that a dry run and the sweep after it
// name the same leases.
func Dead(root, owner string) []string {
	dir, err := path(root, owner, "x")
	if err != nil {
		return nil
	}
	ents, err := os.ReadDir(filepath.Dir(dir))
	if err != nil {
		return nil
	}
	var dead []string
	for _, e := range ents {
		if e.Type().IsRegular() && !Held(root, owner, e.Name()) {
			dead = append(dead, e.Name())
		}
	}
	sort.Strings(dead)
	return dead
}

// RemoveDead removes owner's lease of runID under root if it is still not held (a
// holder that took it again meanwhile keeps it). A lease that is gone is no error.
func RemoveDead(root, owner, runID string) error {
	p, err := path(root, owner, runID)
	if err != nil {
		return err
	}
	if Held(root, owner, runID) {
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
