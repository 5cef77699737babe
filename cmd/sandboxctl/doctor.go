package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/port"
)

// check is one line of doctor's report.
type check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok, warn, fail
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

const (
	statusOK   = "ok"
	statusWarn = "warn"
	statusFail = "fail"
)

func cmdDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := newFlags("doctor", stderr, &c)
	if code, ok := parse(fs, args, 0, 0, stderr, ""); !ok {
		return code
	}
	checks := doctor(ctx, c)
	failed := false
	for _, ch := range checks {
		failed = failed || ch.Status == statusFail
	}
	if c.json {
		_ = json.NewEncoder(stdout).Encode(checks)
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CHECK\tSTATUS\tDETAIL")
		for _, ch := range checks {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", ch.Name, ch.Status, ch.Detail)
			if ch.Fix != "" && ch.Status != statusOK {
				fmt.Fprintf(tw, "\t\t  fix: %s\n", ch.Fix)
			}
		}
		tw.Flush()
	}
	if failed {
		return exitFailed
	}
	return exitOK
}

// doctor runs every check; none takes longer than a few seconds.
func doctor(ctx context.Context, c common) []check {
	var out []check
	d := checkDocker(ctx, c.dockerHost)
	out = append(out, d.checks...)
	out = append(out, checkContainerd(ctx, c.containerdAddress), checkCgroups(), checkMountAPI(), checkPIDs(), checkNofile(),
		checkCommand("nginx", "nginx", []string{"-v"}, "apt-get install -y nginx-light (the per-run nginx proxy and its image builder use it)"),
		checkOpenClaw())
	return out
}

type dockerChecks struct{ checks []check }

// checkDocker and checkContainerd are the runtime drivers' own probes
// (port.DetectRuntime), the ones sandbox.Open uses to pick a runtime for an empty
// target: what doctor reports is what Open finds.
func checkDocker(ctx context.Context, host string) dockerChecks {
	fix := "start the daemon (bash scripts/setup.sh starts containerd and dockerd), or point --docker-host / DOCKER_HOST at it"
	target := docker.Scheme + "://"
	if host != "" {
		u, err := url.Parse(host)
		if err != nil {
			return dockerChecks{[]check{{Name: "docker", Status: statusFail, Detail: err.Error(), Fix: fix}}}
		}
		// The driver's target: docker:///path for a socket, docker://host:port for TCP.
		target += u.Host + u.Path
	}
	info, err := port.DetectRuntime(ctx, target)
	if err != nil {
		return dockerChecks{[]check{{Name: "docker", Status: statusFail, Detail: firstLine(err.Error()), Fix: fix},
			{Name: "runsc (docker)", Status: statusWarn, Detail: "not checked: Docker is unreachable", Fix: "fix docker first"}}}
	}
	out := []check{{Name: "docker", Status: statusOK, Detail: info.Detail}}
	rs := check{Name: "runsc (docker)", Status: statusWarn, Detail: "gVisor is not registered (runtimes: " + strings.Join(info.Runtimes, ", ") + ")",
		Fix: "optional, for gVisor sandboxes: bash scripts/install-runsc.sh registers runsc with Docker"}
	for _, name := range info.Runtimes {
		if docker.IsGVisor(name) {
			rs.Status, rs.Detail = statusOK, "registered as runtime "+strconv.Quote(name)
		}
	}
	return dockerChecks{append(out, rs)}
}

func checkContainerd(ctx context.Context, addr string) check {
	fix := "start containerd (bash scripts/setup.sh), or point --containerd-address at its socket"
	info, err := port.DetectRuntime(ctx, containerd.Scheme+"://"+addr)
	if err != nil {
		return check{Name: "containerd", Status: statusFail, Detail: firstLine(err.Error()), Fix: fix}
	}
	return check{Name: "containerd", Status: statusOK, Detail: info.Detail}
}

func checkCgroups() check {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		b, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		ctrl := strings.Fields(string(b))
		for _, need := range []string{"memory", "pids"} {
			if !contains(ctrl, need) {
				return check{Name: "cgroups", Status: statusFail, Detail: "cgroup v2 without the " + need + " controller",
					Fix: "enable it (cgroup_enable=" + need + " on the kernel command line, or delegate it to this cgroup)"}
			}
		}
		return check{Name: "cgroups", Status: statusOK, Detail: "cgroup v2 (unified), controllers: " + strings.Join(ctrl, " ")}
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err == nil {
		return check{Name: "cgroups", Status: statusWarn, Detail: "cgroup v1 (legacy hierarchy)",
			Fix: "works; cgroup v2 (systemd.unified_cgroup_hierarchy=1) gives exact OOM accounting"}
	}
	return check{Name: "cgroups", Status: statusFail, Detail: "no cgroup hierarchy under /sys/fs/cgroup",
		Fix: "mount cgroup2 at /sys/fs/cgroup (mount -t cgroup2 none /sys/fs/cgroup)"}
}

// checkMountAPI: warm pools attach a run's directories with open_tree/move_mount.
func checkMountAPI() check {
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return check{Name: "mount API", Status: statusWarn, Detail: "open_tree unavailable: " + err.Error(),
			Fix: "warm pools need Linux 5.2+ (open_tree, move_mount) and CAP_SYS_ADMIN; cold runs work without"}
	}
	unix.Close(fd)
	var u unix.Utsname
	_ = unix.Uname(&u)
	return check{Name: "mount API", Status: statusOK, Detail: "open_tree/move_mount available (kernel " + unix.ByteSliceToString(u.Release[:]) + ")"}
}

// checkPIDs: each sandbox holds a few processes; pid_max bounds them all.
func checkPIDs() check {
	max, err := readInt("/proc/sys/kernel/pid_max")
	if err != nil {
		return check{Name: "pid_max", Status: statusWarn, Detail: err.Error()}
	}
	b, _ := os.ReadFile("/proc/loadavg")
	used := 0
	if f := strings.Fields(string(b)); len(f) >= 4 {
		if _, tot, ok := strings.Cut(f[3], "/"); ok {
			used, _ = strconv.Atoi(tot)
		}
	}
	detail := fmt.Sprintf("pid_max %d, %d tasks now, headroom %d", max, used, max-used)
	if max-used < 32768 {
		return check{Name: "pid_max", Status: statusWarn, Detail: detail, Fix: "raise it: sysctl -w kernel.pid_max=4194304"}
	}
	return check{Name: "pid_max", Status: statusOK, Detail: detail}
}

func checkNofile() check {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return check{Name: "nofile", Status: statusWarn, Detail: err.Error()}
	}
	detail := fmt.Sprintf("open files: soft %d, hard %d", l.Cur, l.Max)
	if l.Cur < 65536 {
		return check{Name: "nofile", Status: statusWarn, Detail: detail,
			Fix: "a host running many sandboxes and proxies wants ulimit -n 1048576 (LimitNOFILE= in its systemd unit)"}
	}
	return check{Name: "nofile", Status: statusOK, Detail: detail}
}

func checkCommand(name, bin string, args []string, fix string) check {
	p, err := exec.LookPath(bin)
	if err != nil {
		return check{Name: name, Status: statusWarn, Detail: bin + " not found on PATH", Fix: fix}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p, args...).CombinedOutput()
	if err != nil {
		return check{Name: name, Status: statusWarn, Detail: p + " did not run: " + err.Error(), Fix: fix}
	}
	return check{Name: name, Status: statusOK, Detail: p + ": " + firstLine(strings.TrimSpace(string(out)))}
}

func checkOpenClaw() check {
	fix := "optional, for OpenClaw agents: eval \"$(bash scripts/install-openclaw.sh)\" and export OPENCLAW_BIN"
	bin := os.Getenv("OPENCLAW_BIN")
	if bin == "" {
		if p, err := exec.LookPath("openclaw"); err == nil {
			bin = p
		}
	}
	if bin == "" {
		return check{Name: "openclaw", Status: statusWarn, Detail: "OPENCLAW_BIN unset and openclaw not on PATH", Fix: fix}
	}
	return checkCommand("openclaw", bin, []string{"--version"}, fix)
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func dockerInfoOptions() client.InfoOptions { return client.InfoOptions{} }
