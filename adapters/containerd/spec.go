package containerd

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
)

// bridgeTarget is where the bridge binary is mounted inside a sandbox.
const bridgeTarget = "/.agentsandbox/bridge"

// specOpts builds the OCI spec of a sandbox. The default spec already gives a new,
// empty network namespace (runc brings its loopback up) and masks /proc's sensitive
// paths; these options lock the rest down.
func specOpts(spec port.RunSpec, img *imageInfo, bridgePath string) []oci.SpecOpts {
	return append([]oci.SpecOpts{withImageConfig(img)}, lockdown(spec, bridgePath)...)
}

// lockdown is every spec option but the image's config: what a sandbox is allowed.
func lockdown(spec port.RunSpec, bridgePath string) []oci.SpecOpts {
	uid, gid := parseUser(spec.User)
	argv := spec.Argv // empty: the image's own entrypoint and cmd
	tmpfs := func(dst string) specs.Mount {
		return specs.Mount{Destination: dst, Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "noexec", "nodev", "mode=1777", fmt.Sprintf("size=%d", spec.Limits.TmpfsBytes)}}
	}
	bind := func(src, dst string, ro bool) specs.Mount {
		mode := "rw"
		if ro {
			mode = "ro"
		}
		return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"rbind", mode, "nosuid", "nodev"}}
	}
	mounts := []specs.Mount{tmpfs("/tmp"), tmpfs("/run"),
		// The sandbox's own cgroups, read-only, as Docker mounts them: the bridge reads
		// its limits and OOM count there (runc shows only the container's own cgroup).
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"ro", "nosuid", "noexec", "nodev"}}}
	if spec.WorkspaceDir != "" {
		mounts = append(mounts, bind(spec.WorkspaceDir, port.WorkspacePath, false))
	}
	for _, m := range spec.Mounts {
		mounts = append(mounts, bind(m.Source, m.Target, !m.Writable))
	}
	if bridgePath != "" {
		mounts = append(mounts, bind(bridgePath, bridgeTarget, true))
	}
	if spec.LLM != nil {
		mounts = append(mounts, bind(spec.LLM.HostDir, port.LLMSocketDir, true))
	}

	opts := []oci.SpecOpts{
		// No supplementary groups: the user is numeric and the image's /etc/group is
		// not read (that would mount the root filesystem on every run).
		oci.WithUIDGID(uid, gid),
		oci.WithEnv(port.EnvList(spec.SandboxEnv())), // one precedence rule: port.RunSpec.SandboxEnv
		oci.WithCapabilities([]string{}),
		oci.WithAmbientCapabilities([]string{}),
		oci.WithNoNewPrivileges,
		seccomp.WithDefaultProfile(),
		oci.WithRootFSReadonly(),
		oci.WithoutRunMount,
		oci.WithMounts(mounts),
		oci.WithMemoryLimit(uint64(spec.Limits.MemoryBytes)),
		oci.WithMemorySwap(spec.Limits.MemoryBytes),
		oci.WithPidsLimit(spec.Limits.PIDs),
		oci.WithRlimit(&specs.POSIXRlimit{Type: "RLIMIT_NOFILE", Hard: uint64(spec.Limits.OpenFiles), Soft: uint64(spec.Limits.OpenFiles)}),
		oci.WithHostname(port.SandboxHostname),
	}
	if len(argv) > 0 {
		// The argv replaces the image's entrypoint and cmd, as with the Docker adapter.
		opts = append(opts, oci.WithProcessArgs(argv...))
	}
	if spec.Limits.NanoCPUs > 0 {
		const period = 100000
		opts = append(opts, oci.WithCPUCFS(spec.Limits.NanoCPUs*period/1e9, period))
	}
	if spec.WorkspaceDir != "" {
		opts = append(opts, oci.WithProcessCwd(port.WorkspacePath))
	}
	if bridgePath != "" {
		opts = append(opts, wrapWithBridge(runner.EgressPrefix(spec, bridgeapi.Prefix(bridgeTarget, spec.LLM != nil, spec.Limits.Timeout, time.Now()))))
	}
	return opts
}

// wrapWithBridge runs the resolved argv behind the in-sandbox bridge (see bridge.Prefix).
func wrapWithBridge(prefix []string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Process.Args = append(prefix, s.Process.Args...)
		return nil
	}
}
