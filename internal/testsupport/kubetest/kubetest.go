// Package kubetest shares one real single-node Kubernetes cluster
// (adapters/kubernetes/kubelocal) among the tests of a package: Main starts it from
// TestMain and fails the binary when the teardown leaves anything; Shared hands it to
// a test, or skips the test (fails it under SANDBOX_REQUIRE) when the machine has no
// Kubernetes binaries.
//
// The cluster itself is kubelocal's; the names below are its.
package kubetest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/kubernetes/kubelocal"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

// BinDirEnv names the directory of the cluster's binaries (kubelocal.BinDirEnv).
const BinDirEnv = kubelocal.BinDirEnv

// RuntimeClassRunc and RuntimeClassRunsc are the RuntimeClasses the cluster creates.
const (
	RuntimeClassRunc  = kubelocal.RuntimeClassRunc
	RuntimeClassRunsc = kubelocal.RuntimeClassRunsc
)

// Options configure Start (kubelocal.Options).
type Options = kubelocal.Options

// Cluster is a running cluster (kubelocal.Cluster).
type Cluster = kubelocal.Cluster

// BinDir returns the directory of the Kubernetes binaries (kubelocal.BinDir).
func BinDir() (string, error) { return kubelocal.BinDir() }

// Start starts a cluster (kubelocal.Start).
func Start(ctx context.Context, opts Options) (*Cluster, error) { return kubelocal.Start(ctx, opts) }

var shared = testenv.SharedPart[*Cluster]{Part: "kubernetes", Name: "kubetest"}

// Main starts one cluster for a test package, runs the tests and tears the cluster
// down. Without the binaries (BinDir) the tests still run: Shared then skips them, or
// fails them under SANDBOX_REQUIRE.
func Main(m *testing.M) int {
	if _, err := BinDir(); err != nil {
		shared.Fail(err)
		return m.Run()
	}
	return shared.Main(m, func() (*Cluster, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		c, err := Start(ctx, Options{Log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
		if err == nil {
			fmt.Fprintf(os.Stderr, "kubetest: cluster ready in %v (runtime classes %v)\n", c.Started.Round(10*time.Millisecond), c.RuntimeClasses)
		}
		return c, err
	}, (*Cluster).Leftovers)
}

// Shared returns the cluster Main started. It skips t when there is none (or fails it
// under SANDBOX_REQUIRE=kubernetes or all).
func Shared(t testing.TB) *Cluster {
	t.Helper()
	return shared.Get(t)
}
