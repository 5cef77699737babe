// Package kubelocal starts a throwaway single-node Kubernetes cluster on this machine,
// for trying the Kubernetes runner (examples/kubernetes's -local) and for tests: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet, all on
// 127.0.0.1, with the cluster's own CRI-enabled containerd (its own socket, root and
// state; never the system's), a bridge CNI network without a gateway (pods get an
// interface but no route anywhere), a locally built pause image, and a RuntimeClass per
// OCI runtime (runc always; runsc, through gVisor's own containerd shim, with
// SANDBOX_KUBE_RUNSC=1 and SANDBOX_KUBE_RUNSC_BIN set where gVisor is installed).
//
// The binaries come from KUBE_BIN_DIR (scripts/install-kubernetes.sh builds them and
// prints it); containerd, its runc shim, ctr and the CNI plugins from Debian's packages
// (containerd, containernetworking-plugins). It is for development: a production
// cluster is run by its operators. Tests share one cluster per package through
// internal/testsupport/kubetest.
//
// One cluster at a time per machine: the kubelet's cgroup root (/kubepods) and a few of
// its directories are machine-wide, so Start takes an exclusive lock (a flock on
// LockPath) that Close releases; a second Start waits for it.
//
// Close leaves nothing on every path: it deletes every pod through the kubelet (so the
// CNI plugin releases addresses and links), stops the control plane and the kubelet,
// kills and deletes whatever containerd still holds, stops containerd, unmounts what
// was mounted under the cluster's directory and the pods' network namespaces, removes
// the cgroups under kubepods, the iptables chains, the bridge link, the kubelet's
// machine-wide directories it created and the cluster's directory. Every process is
// started with a parent-death signal, and Start first cleans up what a killed earlier
// process left (found by its directory name and a dead owner pid).
package kubelocal

import (
	"context"
	"fmt"

	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/internal/gobuild"
)

// PausePackage is the pause program's package.
const PausePackage = "github.com/agentsandbox/sandbox/adapters/kubernetes/kubelocal/pause"

// PauseImage builds the pod sandbox image: a static pause program in a scratch image.
func PauseImage(ctx context.Context) (ref string, archive []byte, err error) {
	bin, err := gobuild.StaticBytes(ctx, gobuild.ModuleDir(), PausePackage)
	if err != nil {
		return "", nil, fmt.Errorf("kubelocal: building pause: %w", err)
	}
	img := agentimage.Static("agentsandbox/pause", bin)
	return img.Archive()
}
