package sandboxbridge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// gVisor's /proc/version: "-gvisor" in the release since 2023, and before that a
// fixed build date of its own (Debian bookworm's 2022 release says "Linux version
// 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016").
var gvisorMarkers = []string{"gvisor", "Sun Jan 10 15:06:54 PST 2016"}

// kernel reads /proc/version: which kernel the sandbox's processes talk to, and the
// line itself (clipped).
func kernel() (name, version string) {
	b, err := readSmall("/proc/version")
	if err != nil {
		return "", ""
	}
	version, _, _ = strings.Cut(string(b), "\n")
	if len(version) > 256 {
		version = version[:256]
	}
	for _, m := range gvisorMarkers {
		if strings.Contains(version, m) {
			return bridgeapi.KernelGVisor, version
		}
	}
	return bridgeapi.KernelLinux, version
}

// engineSockets are where container-engine sockets usually are; finding one inside a
// sandbox is a way out of it.
var engineSockets = []string{
	"/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
	"/var/run/containerd/containerd.sock", "/run/crio/crio.sock", "/run/podman/podman.sock",
	"/var/run/crio/crio.sock", "/run/user/1001/podman/podman.sock",
}

// Attest reads the sandbox's isolation from inside: interfaces, routes, resolv.conf,
// capabilities, no_new_privs, seccomp, ids, the root mount, engine sockets, limits,
// and the kernel (gVisor's or the host's).
// It reports facts; the host judges them.
func Attest() bridgeapi.Attestation {
	a := bridgeapi.Attestation{Time: time.Now().UTC(), UID: os.Getuid(), GID: os.Getgid()}
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			a.Interfaces = append(a.Interfaces, i.Name)
		}
	}
	a.Routes = countRoutes("/proc/net/route", 0, 1) + countRoutes("/proc/net/ipv6_route", -1, 0)
	if b, err := readSmall("/etc/resolv.conf"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "nameserver" {
				a.Nameservers = append(a.Nameservers, f[1])
			}
		}
	}
	if b, err := readSmall("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch k {
			case "CapEff":
				a.CapEff = v
			case "CapPrm":
				a.CapPrm = v
			case "CapBnd":
				a.CapBnd = v
			case "NoNewPrivs":
				a.NoNewPrivs = v == "1"
			case "Seccomp":
				a.Seccomp, _ = strconv.Atoi(v)
			}
		}
	}
	a.ReadOnlyRoot, a.Mounts = rootReadOnly()
	for _, p := range engineSockets {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSocket != 0 {
			a.EngineSockets = append(a.EngineSockets, p)
		}
	}
	a.OpenFiles = openFilesLimit()
	for _, p := range []string{"/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"} {
		if b, err := readSmall(p); err == nil {
			a.PIDsMax = strings.TrimSpace(string(b))
			break
		}
	}
	a.Kernel, a.KernelVersion = kernel()
	return a
}

// countRoutes counts the routes in a /proc/net route table whose interface is not lo;
// ifaceCol is the interface's column (negative: from the end), skip the header lines.
func countRoutes(path string, ifaceCol, skip int) int {
	b, err := readSmall(path)
	if err != nil {
		return 0
	}
	n := 0
	for i, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if i < skip || len(f) == 0 {
			continue
		}
		col := ifaceCol
		if col < 0 {
			col = len(f) + col
		}
		if col < len(f) && f[col] != "lo" {
			n++
		}
	}
	return n
}

// rootReadOnly reads /proc/self/mountinfo: whether "/" is mounted ro, and how many
// mount points there are.
func rootReadOnly() (ro bool, mounts int) {
	b, err := readSmall("/proc/self/mountinfo")
	if err != nil {
		return false, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		mounts++
		if f[4] == "/" { // the last mount on / wins
			ro = false
			for _, o := range strings.Split(f[5], ",") {
				if o == "ro" {
					ro = true
				}
			}
		}
	}
	return ro, mounts
}

// readSmall reads a small pseudo-file, refusing anything over 1 MiB.
func readSmall(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err == nil && len(b) > 1<<20 {
		err = fmt.Errorf("%s: over 1 MiB", p)
	}
	return b, err
}

// postAttestation sends a to the proxy on socket, before the agent exists.
func postAttestation(ctx context.Context, socket string, a bridgeapi.Attestation) error {
	body, err := json.Marshal(a)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cli := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://llm"+bridgeapi.AttestationPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	setRunToken(req, socket) // a shared proxy checks it (token.go)
	resp, err := cli.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the proxy answered %s", resp.Status)
	}
	return nil
}
