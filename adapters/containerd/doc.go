// Package containerd adapts a containerd daemon (through
// github.com/containerd/containerd/v2/client) to the sandbox ports, with the same
// behaviour and security properties as the Docker adapter, proven by the same
// conformance suite (sandboxtest).
//
// Each sandbox is a container in a namespace of the library's own (default
// "agentsandbox") with a fresh network namespace and no CNI: loopback only. Capabilities
// are empty, no-new-privileges is set, the default seccomp profile applies, pids and
// memory are bounded by cgroups, the root filesystem is read-only with small noexec
// tmpfs mounts at /tmp and /run, and the process runs as a non-root user.
//
// containerd has no image builder and this library uses no registry: images come from
// archives (LoadImage, the `docker save` or OCI format) or are already in the namespace.
package containerd
