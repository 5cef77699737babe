package integration

import (
	"os"
	"testing"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv/testsweep"
)

// TestMain sweeps what a test process of this package that died mid-run left behind
// (its owners are dead), so it is cleaned, never counted as this run's leftovers.
func TestMain(m *testing.M) { os.Exit(testsweep.Main(m)) }
