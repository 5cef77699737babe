// Package kubelocal starts a throwaway single-node Kubernetes cluster on this machine,
// for trying the Kubernetes runner (examples/kubernetes's -local) and for tests: etcd,
// the control plane and a kubelet bound to 127.0.0.1, with a containerd of its own
// (its own socket, root and state, never the system one), a bridge CNI without a
// gateway, a locally built pause image, and RuntimeClasses for runc (and runsc, opt-in
// with SANDBOX_KUBE_RUNSC=1 where gVisor is installed). Close tears everything down: Pods, containers, processes,
// mounts, cgroups, iptables chains and links. Fixed ports and a shared cgroup root
// mean one cluster per machine at a time; Start waits for a machine-wide lock.
//
// The binaries come from KUBE_BIN_DIR (scripts/install-kubernetes.sh builds them and
// prints it); containerd, ctr and the CNI plugins from Debian's packages. It is for
// development: a production cluster is run by its operators.
package kubelocal

import (
	"context"

	"github.com/agentsandbox/sandbox/internal/testsupport/kubetest"
)

// BinDirEnv names the environment variable holding the Kubernetes binaries' directory.
const BinDirEnv = kubetest.BinDirEnv

// RuntimeClassRunc and RuntimeClassRunsc are the RuntimeClasses Start creates (runsc
// only with SANDBOX_KUBE_RUNSC=1 where the machine has gVisor): pass one to kubernetes.WithRuntimeClass. The
// runc class runs the node's runtime wrapper, which applies the per-run process limit
// of kubernetes.WithRuntimePIDsLimit.
const (
	RuntimeClassRunc  = kubetest.RuntimeClassRunc
	RuntimeClassRunsc = kubetest.RuntimeClassRunsc
)

// Options configure Start: BinDir (default $KUBE_BIN_DIR), the pause image (built when
// empty) and Log (progress lines; nil discards them).
type Options = kubetest.Options

// Cluster is a running local cluster: Config and Client reach its API server as an
// administrator, Kubeconfig is the same as a file, RuntimeClasses the classes created,
// Started how long Start took. ImportImage loads an image archive into the node's
// containerd (use it with kubernetes.WithImagePullPolicy(corev1.PullNever)); Close
// stops the cluster and removes everything it made.
type Cluster = kubetest.Cluster

// BinDir returns the directory of the Kubernetes binaries, or an error saying how to
// get them (and which of the Debian parts is missing).
func BinDir() (string, error) { return kubetest.BinDir() }

// Start starts a cluster and waits (bounded by ctx) until its node is Ready and
// schedulable (about 10 seconds, after a wait for any other local cluster to close).
// On error everything started is torn down.
func Start(ctx context.Context, opts Options) (*Cluster, error) { return kubetest.Start(ctx, opts) }
