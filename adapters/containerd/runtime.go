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

// WithRuntime selects the OCI runtime sandboxes run with, by name, as on every
// runtime adapter: RuntimeRunc (the default), RuntimeRunsc (gVisor, through
// RuntimeRunscWrapper, which gives runsc the flags sandboxes need), RuntimeCrun,
// or the name of another runc-compatible binary on containerd's PATH. The lockdown
// is the same OCI spec whichever runs it. WithRuntimeBinary takes a path instead.
func WithRuntime(name string) Option {
	return func(c *config) error {
		if name == "" || strings.ContainsAny(name, " \t\r\n\x00/") {
			return port.Invalidf("runtime %q is not a runtime name (runc, runsc, crun); give a binary's path with WithRuntimeBinary", name)
		}
		c.runtimeName, c.runtime = name, name
		switch name {
		case RuntimeRunc:
			c.runtime = ""
		case RuntimeRunsc:
			c.runtime = RuntimeRunscWrapper
		}
		return nil
	}
}

// WithRuntimeBinary selects the OCI runtime binary the runc shim runs for every
// sandbox by its absolute path on the containerd host (a runc-compatible binary, or
// a wrapper such as RuntimeRunscWrapper). Runtime reports the binary's name.
func WithRuntimeBinary(path string) Option {
	return func(c *config) error {
		if !filepath.IsAbs(path) || filepath.Clean(path) != path || strings.ContainsAny(path, " \t\r\n\x00") {
			return port.Invalidf("runtime binary %q is not a clean absolute path", path)
		}
		c.runtimeName, c.runtime = filepath.Base(path), path
		return nil
	}
}

// Runtime returns the name of the OCI runtime sandboxes run with (RuntimeRunc,
// RuntimeRunsc, ...: what WithRuntime was given; a binary's base name with
// WithRuntimeBinary).
func (r *Runner) Runtime() string {
	if r.cfg.runtimeName == "" {
		return RuntimeRunc
	}
	return r.cfg.runtimeName
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
	return !strings.Contains(filepath.Base(r.cfg.runtime), "runsc")
}
