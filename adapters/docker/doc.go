// Package docker adapts the Docker Engine API (through github.com/moby/moby/client, the
// maintained continuation of github.com/docker/docker/client) to the sandbox ports.
//
// Runner implements port.SandboxRunner and port.Sweeper: every sandbox runs with no
// network, all capabilities dropped, no-new-privileges, pids and memory limits, a
// read-only root with small noexec tmpfs mounts at /tmp and /run, and a non-root user.
// Every container carries the port.LabelPrefix labels and is removed on every path; a
// Sweep removes what a dead host process left behind.
package docker
