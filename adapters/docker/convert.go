package docker

import (
	"fmt"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
)

// bridgeTarget is where the bridge binary is mounted inside a sandbox.
const bridgeTarget = "/.agentsandbox/bridge"

// sandboxConfig turns a validated spec (with defaults) into the container config.
// entrypoint is the full command: argv, or the image's, wrapped by the bridge if any.
func sandboxConfig(spec port.RunSpec, entrypoint []string, lbls map[string]string, bridge string) (*container.Config, *container.HostConfig) {
	tmpfsOpts := fmt.Sprintf("rw,noexec,nosuid,nodev,size=%d", spec.Limits.TmpfsBytes)
	pids := spec.Limits.PIDs
	hc := &container.HostConfig{
		NetworkMode:    container.NetworkMode("none"),
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true"},
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/tmp": tmpfsOpts, "/run": tmpfsOpts},
		IpcMode:        container.IPCModePrivate,
		LogConfig:      container.LogConfig{Type: "none"}, // output is read from the attach stream, capped
		Resources: container.Resources{
			Memory:     spec.Limits.MemoryBytes,
			MemorySwap: spec.Limits.MemoryBytes,
			NanoCPUs:   spec.Limits.NanoCPUs,
			PidsLimit:  &pids,
			Ulimits:    []*container.Ulimit{{Name: "nofile", Soft: spec.Limits.OpenFiles, Hard: spec.Limits.OpenFiles}},
		},
	}
	if spec.Network.Internal != "" {
		hc.NetworkMode = container.NetworkMode(spec.Network.Internal)
	}
	if spec.WorkspaceDir != "" {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: spec.WorkspaceDir, Target: port.WorkspacePath})
	}
	for _, m := range spec.Mounts {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: !m.Writable})
	}
	if spec.LLM != nil {
		// Read-only is enough to connect to a unix socket, and keeps the agent from
		// planting files next to it.
		if spec.LLM.Volume != "" {
			hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Source: spec.LLM.Volume, Target: port.LLMSocketDir, ReadOnly: true})
		} else {
			hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: spec.LLM.HostDir, Target: port.LLMSocketDir, ReadOnly: true})
		}
	}
	if bridge != "" {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: bridge, Target: bridgeTarget, ReadOnly: true})
	}
	cfg := &container.Config{
		Image:           spec.Image,
		User:            spec.User,
		Env:             port.EnvList(runner.BridgeEnv(spec, bridge != "")), // one precedence rule: port.RunSpec.SandboxEnv
		Entrypoint:      entrypoint,
		Cmd:             []string{},
		Labels:          lbls,
		Hostname:        port.SandboxHostname,
		WorkingDir:      workdir(spec),
		AttachStdout:    true,
		AttachStderr:    true,
		NetworkDisabled: spec.Network.Internal == "",
	}
	return cfg, hc
}

func workdir(spec port.RunSpec) string {
	if spec.WorkspaceDir != "" {
		return port.WorkspacePath
	}
	return ""
}
