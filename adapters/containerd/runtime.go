package containerd

import (
	"path/filepath"
	"strings"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"

	"github.com/agentsandbox/sandbox/port"
)

// OCI runtimes known by name. Any other binary (a name on the daemon's PATH or an
// absolute path) that speaks runc's command line works too.
const (
	// RuntimeRunc is the default.
	RuntimeRunc = "runc"
	// RuntimeRunsc is gVisor. The runc shim cannot pass it flags, and sandboxes need
	// some (--network=none, --host-uds=open for the LLM socket, --oci-seccomp): give
	// it a wrapper instead, as scripts/setup.sh installs RuntimeRunscWrapper.
	RuntimeRunsc = "runsc"
	// RuntimeRunscWrapper is the wrapper scripts/setup.sh installs: the runsc that
	// scripts/install-runsc.sh builds (systrap platform, no KVM needed) with no network
	// stack of its own, connecting to the host unix sockets mounted in, and applying
	// the spec's seccomp profile inside gVisor too.
	RuntimeRunscWrapper = "/usr/local/bin/runsc-sandbox"
	// RuntimeCrun is crun. It needs a pure cgroup v2 (unified) or v1 host: on a hybrid
	// layout (cgroup v1 controllers with a v2 mount at /sys/fs/cgroup/unified) it
	// fails to create tasks.
	RuntimeCrun = "crun"
)

// runcShim is the shim every runtime runs under: it execs the runtime binary by name.
const runcShim = "io.containerd.runc.v2"

// WithRuntime selects the OCI runtime binary the runc shim runs for every sandbox
// (default RuntimeRunc): a name on containerd's PATH, such as RuntimeRunsc or
// RuntimeCrun, or an absolute path. The lockdown is the same OCI spec whichever runs it.
func WithRuntime(binary string) Option {
	return func(c *config) error {
		if binary == "" || strings.ContainsAny(binary, " \t\r\n\x00") || (strings.Contains(binary, "/") && !filepath.IsAbs(binary)) {
			return port.Invalidf("runtime %q is not a binary name or an absolute path", binary)
		}
		if binary == RuntimeRunc {
			binary = ""
		}
		c.runtime = binary
		return nil
	}
}

// Runtime returns the OCI runtime binary sandboxes run with.
func (r *Runner) Runtime() string {
	if r.cfg.runtime == "" {
		return RuntimeRunc
	}
	return r.cfg.runtime
}

// withRuntime sets the container's runtime: the runc shim, with BinaryName when the
// runtime is not runc.
func (r *Runner) withRuntime() client.NewContainerOpts {
	if r.cfg.runtime == "" {
		return client.WithRuntime(runcShim, nil)
	}
	return client.WithRuntime(runcShim, &runcoptions.Options{BinaryName: r.cfg.runtime})
}

// phase reports the end of a run's phase to the benchmark hook, if any.
func (r *Runner) phase(name string) {
	if r.cfg.phaseHook != nil {
		r.cfg.phaseHook(name)
	}
}

// propagatesMounts reports whether the runtime's sandboxes see a host mount made on
// one of their bind sources after they were created, as warm pools need. gVisor does
// not: its gofer serves each bind mount from the directory it opened at start.
func (r *Runner) propagatesMounts() bool {
	return !strings.Contains(filepath.Base(r.Runtime()), "runsc")
}
