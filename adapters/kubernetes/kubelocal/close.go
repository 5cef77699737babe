package kubelocal

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Close tears the cluster down and leaves nothing behind (see the package doc). It is
// safe to call on a partly started cluster and more than once.
func (c *Cluster) Close() error {
	if c == nil || c.lock == nil {
		return nil
	}
	var errs []error
	if c.Client != nil && len(c.procs) > 0 {
		if err := c.deletePods(); err != nil {
			c.logf("kubelocal: deleting pods: %v", err)
		}
	}
	// The kubelet first (it would restart what is killed under it), the control plane
	// after, containerd last.
	for _, name := range []string{"kubelet", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		for _, p := range c.procs {
			if p.name == name {
				stop(p, 10*time.Second)
			}
		}
	}
	if c.dir != "" {
		errs = append(errs, teardown(c.dir, c.made, c.chains, c.procs))
	}
	c.procs = nil
	_ = c.lock.Close() // releases the flock
	c.lock = nil
	return errors.Join(errs...)
}

// deletePods deletes every pod through the API and waits (bounded) until the kubelet
// has stopped them, so their sandboxes are torn down the normal way (CNI DEL).
func (c *Cluster) deletePods() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	grace := int64(1)
	for _, ns := range nss.Items {
		_ = c.Client.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
	}
	for {
		pods, err := c.Client.CoreV1().Pods(corev1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stop ends p: SIGTERM to its process group, SIGKILL after grace.
func stop(p *proc, grace time.Duration) {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// teardown removes what a cluster in dir left: containers and tasks in its containerd,
// the containerd itself and its shims, every process in the kubepods cgroups, mounts
// under dir, the pods' network namespaces, the cgroups, the bridge, new iptables chains,
// the machine-wide directories in made, and dir. procs are the processes this process
// started (nil for a stale cluster).
func teardown(dir string, made []string, chains map[string]bool, procs []*proc) error {
	var errs []error
	sock := filepath.Join(dir, "containerd", "containerd.sock")
	var containerd *proc
	for _, p := range procs {
		if p.name == "containerd" {
			containerd = p
		}
	}
	netns := map[string]bool{}
	if containerd != nil && !containerd.exited() {
		netns = removeContainers(sock)
		stop(containerd, 10*time.Second)
	}
	// Shims outlive containerd; what runs in the pods' cgroups is ours (the lock).
	killShims(sock)
	killCgroupProcs()
	for _, p := range procs {
		stop(p, time.Second)
	}
	for _, p := range mountsUnder(dir) {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	// The CRI pins each pod's network namespace under /var/run/netns as cni-<uuid>;
	// nothing else on these machines makes cni-* names there.
	ents, _ := os.ReadDir("/var/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "cni-") {
			netns[filepath.Join("/var/run/netns", e.Name())] = true
		}
	}
	for p := range netns {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, removeCgroups())
	if _, err := os.Stat("/sys/class/net/" + BridgeName); err == nil {
		if out, err := exec.Command("ip", "link", "del", BridgeName).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip link del %s: %v: %s", BridgeName, err, out))
		}
	}
	if chains != nil {
		for ch := range iptablesChains() {
			if chains[ch] {
				continue
			}
			table, name, _ := strings.Cut(ch, "/")
			if strings.HasPrefix(name, "KUBE-") || strings.HasPrefix(name, "CNI-") {
				_ = exec.Command("iptables", "-t", table, "-F", name).Run()
				if out, err := exec.Command("iptables", "-t", table, "-X", name).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("iptables -t %s -X %s: %v: %s", table, name, err, out))
				}
			}
		}
	}
	results, _ := filepath.Glob("/var/lib/cni/results/agentsandbox-kubetest-*")
	for _, r := range results {
		_ = os.Remove(r)
	}
	for _, p := range made {
		if p != "" {
			for _, m := range mountsUnder(p) {
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
			}
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// The kubelet's symlinks to the pods' logs, when /var/log/containers existed.
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if t, err := os.Readlink(l); err == nil && strings.HasPrefix(t, dir+"/") {
			_ = os.Remove(l)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeContainers kills and deletes every task and container of the cluster's
// containerd and returns the network namespaces their specs name.
func removeContainers(sock string) map[string]bool {
	netns := map[string]bool{}
	ctr := func(args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return exec.CommandContext(ctx, "ctr", append([]string{"-a", sock, "-n", "k8s.io"}, args...)...).Output()
	}
	out, err := ctr("containers", "ls", "-q")
	if err != nil {
		return netns
	}
	for _, id := range strings.Fields(string(out)) {
		if info, err := ctr("containers", "info", id); err == nil {
			var ci struct {
				Spec struct {
					Linux struct {
						Namespaces []struct{ Type, Path string }
					}
				}
			}
			if json.Unmarshal(info, &ci) == nil {
				for _, ns := range ci.Spec.Linux.Namespaces {
					if ns.Type == "network" && strings.HasPrefix(ns.Path, "/var/run/netns/") {
						netns[ns.Path] = true
					}
				}
			}
		}
		_, _ = ctr("tasks", "kill", "-s", "SIGKILL", id)
		_, _ = ctr("tasks", "delete", "-f", id)
		_, _ = ctr("containers", "delete", id)
	}
	return netns
}

// killShims kills the runc shims serving the containerd at sock.
func killShims(sock string) {
	for _, pid := range pidsWhere(func(cmdline string) bool {
		return strings.Contains(cmdline, "containerd-shim") && strings.Contains(cmdline, sock)
	}) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func pidsWhere(match func(cmdline string) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && match(strings.ReplaceAll(string(b), "\x00", " ")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cgroupRoots are the kubelet's cgroup roots in every mounted hierarchy.
func cgroupRoots() []string {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if fi, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil && fi.IsDir() {
		roots = append(roots, "/sys/fs/cgroup/kubepods")
	}
	return roots
}

// killCgroupProcs SIGKILLs every process in the kubepods cgroups (the pods').
func killCgroupProcs() {
	for i := 0; i < 20; i++ {
		found := false
		for _, root := range cgroupRoots() {
			_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
					return nil
				}
				b, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
						found = true
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				return nil
			})
		}
		if !found {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroups removes the kubepods cgroups, deepest first, retrying while the
// kernel still counts exiting processes in them.
func removeCgroups() error {
	var last error
	for i := 0; i < 50; i++ {
		last = nil
		for _, root := range cgroupRoots() {
			var dirs []string
			_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for j := len(dirs) - 1; j >= 0; j-- {
				if err := syscall.Rmdir(dirs[j]); err != nil && !errors.Is(err, syscall.ENOENT) {
					last = fmt.Errorf("rmdir %s: %w", dirs[j], err)
				}
			}
		}
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

// cleanStale tears down clusters whose owner process is gone (a test binary killed
// outright). The caller holds the lock.
func cleanStale(logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner.pid"))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && syscall.Kill(pid, 0) == nil {
			continue
		}
		// Components of a dead owner got its parent-death signal, except what
		// containerd started (the shims) and what runs in the pods.
		made, _ := os.ReadFile(filepath.Join(d, "made"))
		logf("kubelocal: cleaning up a stale cluster in %s", d)
		if err := teardown(d, strings.Split(string(made), "\n"), nil, nil); err != nil {
			logf("kubelocal: stale cluster %s: %v", d, err)
		}
	}
}

// flock takes an exclusive lock on f, waiting until ctx ends.
func flock(ctx context.Context, f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for another test cluster to end (%s): %w", LockPath, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// httpOK reports whether GET url answers 200; with p, over TLS with the admin's certificate.
func httpOK(ctx context.Context, url string, p *pki) bool {
	cl := &http.Client{Timeout: 5 * time.Second}
	if p != nil {
		cert, err := tls.LoadX509KeyPair(p.path("admin.crt"), p.path("admin.key"))
		if err != nil {
			return false
		}
		pool := x509.NewCertPool()
		pool.AddCert(p.caCert)
		cl.Transport = &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := cl.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	if tr, ok := cl.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
	return resp.StatusCode == http.StatusOK
}

// Leftovers lists what a closed cluster left on the machine: processes started from
// its directory or serving its containerd, mounts under its directory, pod network
// namespaces, kubepods cgroups, the bridge, new KUBE-*/CNI-* iptables chains and the
// directory itself. Empty after a clean Close.
func (c *Cluster) Leftovers() []string {
	var left []string
	for _, pid := range pidsWhere(func(cmdline string) bool { return c.dir != "" && strings.Contains(cmdline, c.dir) }) {
		left = append(left, fmt.Sprintf("process:%d", pid))
	}
	for _, m := range mountsUnder(c.dir) {
		left = append(left, "mount:"+m)
	}
	ents, _ := os.ReadDir("/var/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "cni-") {
			left = append(left, "netns:"+e.Name())
		}
	}
	for _, r := range cgroupRoots() {
		left = append(left, "cgroup:"+r)
	}
	if _, err := os.Stat("/sys/class/net/" + BridgeName); err == nil {
		left = append(left, "link:"+BridgeName)
	}
	for ch := range iptablesChains() {
		_, name, _ := strings.Cut(ch, "/")
		if c.chains != nil && !c.chains[ch] && (strings.HasPrefix(name, "KUBE-") || strings.HasPrefix(name, "CNI-")) {
			left = append(left, "iptables:"+ch)
		}
	}
	if _, err := os.Stat(c.dir); err == nil {
		left = append(left, "dir:"+c.dir)
	}
	for _, p := range c.made {
		if _, err := os.Lstat(p); err == nil {
			left = append(left, "path:"+p)
		}
	}
	return left
}
