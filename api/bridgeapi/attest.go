package bridgeapi

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxOpenFiles is the largest open-files limit (RLIMIT_NOFILE) a sandbox may have:
// the largest a run's spec may ask for, and the most Violations accepts.
const MaxOpenFiles = 1 << 16

// AttestationPath is where the in-sandbox bridge posts its Attestation over the run's
// LLM socket, before it starts the agent. A proxy accepts one per run, and only with the
// run's attestation key (AttestKeyHeader), which the bridge alone holds; any other is
// refused.
const AttestationPath = "/_agentsandbox/attestation"

// Attestation is what the in-sandbox bridge observed about its own sandbox at start:
// facts read from the kernel's view inside, not the host's intent. The host judges them
// itself (Violations); the bridge only reports.
type Attestation struct {
	Time time.Time `json:"time"`
	UID  int       `json:"uid"`
	GID  int       `json:"gid"`
	// Interfaces are the network interfaces that exist (want: only "lo").
	Interfaces []string `json:"interfaces"`
	// Routes counts IPv4 and IPv6 routes through any interface but lo.
	Routes int `json:"routes"`
	// Nameservers are resolv.conf's (informational: with no route they are unreachable).
	Nameservers []string `json:"nameservers,omitempty"`
	// CapEff, CapPrm and CapBnd are /proc/self/status's capability sets, in hex.
	CapEff string `json:"cap_eff"`
	CapPrm string `json:"cap_prm"`
	CapBnd string `json:"cap_bnd"`
	// NoNewPrivs and Seccomp (0 off, 1 strict, 2 filter) are /proc/self/status's.
	NoNewPrivs bool `json:"no_new_privs"`
	Seccomp    int  `json:"seccomp"`
	// ReadOnlyRoot says the root filesystem is mounted read-only.
	ReadOnlyRoot bool `json:"read_only_root"`
	// EngineSockets are container-engine sockets found (Docker, containerd, CRI-O,
	// podman): any one is a way out.
	EngineSockets []string `json:"engine_sockets,omitempty"`
	// OpenFiles is RLIMIT_NOFILE's hard limit; PIDsMax the pids cgroup's limit ("max"
	// when unlimited, "" when not visible).
	OpenFiles uint64 `json:"open_files"`
	PIDsMax   string `json:"pids_max"`
	// Mounts counts the mount points.
	Mounts int `json:"mounts"`
	// Kernel is the kernel the sandbox's processes talk to, as the bridge sees it
	// from inside: KernelGVisor when /proc/version is gVisor's, else KernelLinux
	// (empty from bridges that predate the field). KernelVersion is /proc/version's
	// first line (informational).
	Kernel        string `json:"kernel,omitempty"`
	KernelVersion string `json:"kernel_version,omitempty"`
	// Runtime is the OCI runtime the host chose for the sandbox (its runner's
	// port.RuntimeReporter). The host sets it; the bridge never does. When set, Violations
	// checks that the kernel seen inside is that runtime's (RuntimeKernel).
	Runtime string `json:"runtime,omitempty"`
}

// Kernels an Attestation can report.
const (
	// KernelLinux is the host's Linux kernel, shared with the host (runc, crun).
	KernelLinux = "linux"
	// KernelGVisor is gVisor's own kernel in user space (runsc).
	KernelGVisor = "gvisor"
)

// RuntimeKernel returns the kernel a sandbox run by the OCI runtime named runtime
// (a name or a path, as runners report it) must see: KernelGVisor for gVisor (a
// name containing "runsc", as gVisor's binary and the wrappers and registrations
// around it are named), else KernelLinux.
func RuntimeKernel(runtime string) string {
	if strings.Contains(runtime, "runsc") {
		return KernelGVisor
	}
	return KernelLinux
}

// Violations judges a: the isolation every sandbox must have. It returns one line per
// broken property; none means the sandbox is what the runner promised.
func (a *Attestation) Violations() []string {
	if a == nil {
		return []string{"no attestation"}
	}
	var v []string
	if len(a.Interfaces) != 1 || a.Interfaces[0] != "lo" {
		v = append(v, fmt.Sprintf("network interfaces %v, want only lo", a.Interfaces))
	}
	if a.Routes != 0 {
		v = append(v, fmt.Sprintf("%d routes through interfaces other than lo", a.Routes))
	}
	for _, c := range []struct{ name, val string }{{"effective", a.CapEff}, {"permitted", a.CapPrm}, {"bounding", a.CapBnd}} {
		if n, err := strconv.ParseUint(strings.TrimPrefix(c.val, "0x"), 16, 64); err != nil || n != 0 {
			v = append(v, fmt.Sprintf("%s capabilities %q, want none", c.name, c.val))
		}
	}
	if !a.NoNewPrivs {
		v = append(v, "no_new_privs is off")
	}
	if a.Seccomp != 2 {
		v = append(v, fmt.Sprintf("seccomp mode %d, want 2 (filter)", a.Seccomp))
	}
	if a.UID == 0 || a.GID == 0 {
		v = append(v, fmt.Sprintf("uid %d gid %d: root", a.UID, a.GID))
	}
	if !a.ReadOnlyRoot {
		v = append(v, "root filesystem is writable")
	}
	if len(a.EngineSockets) > 0 {
		v = append(v, fmt.Sprintf("container-engine sockets reachable: %v", a.EngineSockets))
	}
	if a.OpenFiles == 0 || a.OpenFiles > MaxOpenFiles {
		v = append(v, fmt.Sprintf("open files limit %d, want at most %d", a.OpenFiles, MaxOpenFiles))
	}
	// gVisor's own cgroupfs shows no pids limit ("max"): the limit holds on the
	// host's cgroup of the whole sandbox, whose processes each thread of the agent
	// needs (a fork bomb fails there; the conformance suite's ForkBombContained).
	if (a.PIDsMax == "" || a.PIDsMax == "max") && !(a.Kernel == KernelGVisor && a.PIDsMax == "max") {
		v = append(v, fmt.Sprintf("pids limit %q, want a number", a.PIDsMax))
	}
	if a.Runtime != "" {
		if want := RuntimeKernel(a.Runtime); a.Kernel != want {
			v = append(v, fmt.Sprintf("kernel %q seen inside, but the host ran runtime %q (want kernel %q)", a.Kernel, a.Runtime, want))
		}
	}
	return v
}
