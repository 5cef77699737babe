package kubelocal

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentsandbox/sandbox/internal/gobuild"
	"github.com/agentsandbox/sandbox/internal/localcluster"
)

// BinDirEnv names the directory of the cluster's binaries (kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet, etcd).
const BinDirEnv = "KUBE_BIN_DIR"

// LockPath serialises clusters on a machine.
const LockPath = "/tmp/agentsandbox-kubetest.lock"

// dirPrefix names a cluster's directory under os.TempDir; the owner's pid is in
// dirPrefix+"<random>/owner.pid".
const dirPrefix = "agentsandbox-kube-"

// BridgeName is the host bridge the pods' interfaces attach to.
const BridgeName = "agsbx-kube0"

// PodCIDR is the range the pods' addresses come from (host-local IPAM).
const PodCIDR = "10.213.0.0/24"

// NodeName is the single node's name.
const NodeName = "localhost"

// PIDsLimit is the kubelet's per-pod process limit (podPidsLimit), a backstop for every
// Pod; runs get their own limit through the runtime wrapper (PIDsAnnotation).
const PIDsLimit = 4096

// RuntimeClass names (their handlers are the containerd runtimes of the same name).
const (
	RuntimeClassRunc  = "runc"
	RuntimeClassRunsc = "runsc"
)

// Options configure Start.
type Options struct {
	// BinDir holds the Kubernetes binaries (default $KUBE_BIN_DIR).
	BinDir string
	// PauseImage is the reference and docker-archive of the pod sandbox image; Start
	// builds one when empty.
	PauseImage        string
	PauseImageArchive []byte
	// Log, if set, receives progress lines.
	Log func(format string, args ...any)
}

// Cluster is a running single-node cluster.
type Cluster struct {
	// Kubeconfig is the admin's kubeconfig file (system:masters).
	Kubeconfig string
	// Config is the admin's client configuration; Client its clientset.
	Config *rest.Config
	Client kubernetes.Interface
	// ContainerdSocket is the cluster's own containerd's address.
	ContainerdSocket string
	// RuntimeClasses are the RuntimeClasses created, by name.
	RuntimeClasses []string
	// Started is how long Start took.
	Started time.Duration

	dir   string
	opts  Options
	procs []*proc // started, in order
	lock  *os.File
	ports ports
	pki   *pki
	// made records machine-wide paths the kubelet creates that did not exist before.
	made []string
	// chains are the iptables chains that existed before Start (the kubelet must not
	// add any; Close removes any KUBE-* chain that appeared).
	chains map[string]bool
	logf   func(string, ...any)
	// containerdPath is containerd's PATH when it needs a shim of the cluster's own.
	containerdPath string
}

type ports struct{ etcdClient, etcdPeer, apiserver, kubelet int }

type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// BinDir returns the directory of the Kubernetes binaries, or an error saying how to get them.
func BinDir() (string, error) {
	d := os.Getenv(BinDirEnv)
	if d == "" {
		return "", fmt.Errorf("%s is not set (scripts/install-kubernetes.sh prints it)", BinDirEnv)
	}
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "etcd"} {
		if _, err := os.Stat(filepath.Join(d, b)); err != nil {
			return "", fmt.Errorf("%s: %w", BinDirEnv, err)
		}
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		if _, err := exec.LookPath(b); err != nil {
			return "", fmt.Errorf("%s is needed (Debian's containerd package): %w", b, err)
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		return "", fmt.Errorf("the CNI plugins are needed (Debian's containernetworking-plugins): %w", err)
	}
	return d, nil
}

// Dir is the cluster's directory (logs, state).
func (c *Cluster) Dir() string { return c.dir }

// Start starts a cluster and waits (bounded by ctx) until its node is Ready and the
// default namespace's service account exists. On error everything started is torn down.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	start := time.Now()
	if opts.BinDir == "" {
		if opts.BinDir, err = BinDir(); err != nil {
			return nil, err
		}
	}
	c = &Cluster{opts: opts, logf: opts.Log}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	if c.lock, err = os.OpenFile(LockPath, os.O_CREATE|os.O_RDWR, 0o600); err != nil {
		return nil, err
	}
	if err := flock(ctx, c.lock); err != nil {
		c.lock.Close()
		return nil, err
	}
	cleanStale(c.logf)
	defer func() {
		if err != nil {
			err = fmt.Errorf("kubelocal: %w\n%s", err, c.Logs(15))
			_ = c.Close()
		}
	}()
	if c.dir, err = os.MkdirTemp("", dirPrefix); err != nil {
		return c, err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return c, err
	}
	c.chains = iptablesChains()
	for _, p := range []string{"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/etc/kubernetes"} {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			c.made = append(c.made, p)
		}
	}
	if err := os.WriteFile(filepath.Join(c.dir, "made"), []byte(strings.Join(c.made, "\n")), 0o600); err != nil {
		return c, err
	}
	fp, err := localcluster.FreePorts(4)
	if err != nil {
		return c, err
	}
	c.ports = ports{fp[0], fp[1], fp[2], fp[3]}
	if err := c.writePKI(); err != nil {
		return c, fmt.Errorf("certificates: %w", err)
	}
	if opts.PauseImage == "" {
		if opts.PauseImage, opts.PauseImageArchive, err = PauseImage(ctx); err != nil {
			return c, err
		}
		c.opts = opts
	}
	if err := c.startContainerd(ctx); err != nil {
		return c, err
	}
	if err := c.ImportImage(ctx, opts.PauseImageArchive); err != nil {
		return c, fmt.Errorf("importing the pause image: %w", err)
	}
	if err := c.startControlPlane(ctx); err != nil {
		return c, err
	}
	if err := c.startKubelet(); err != nil {
		return c, err
	}
	if err := c.waitReady(ctx); err != nil {
		return c, err
	}
	if err := c.createRuntimeClasses(ctx); err != nil {
		return c, err
	}
	c.Started = time.Since(start)
	return c, nil
}

func (c *Cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.dir}, parts...)...)
}

func (c *Cluster) writePKI() error {
	p, err := newPKI(c.path("pki"))
	if err != nil {
		return err
	}
	c.pki = p
	server := fmt.Sprintf("https://127.0.0.1:%d", c.ports.apiserver)
	for _, cert := range []struct {
		name, cn string
		orgs     []string
		hosts    []string
	}{
		{"apiserver", "kube-apiserver", nil, []string{"127.0.0.1", "localhost", "10.0.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil},
		{"admin", "kubetest-admin", []string{"system:masters"}, nil},
		{"controller-manager", "system:kube-controller-manager", nil, nil},
		{"scheduler", "system:kube-scheduler", nil, nil},
		{"kubelet", "system:node:" + NodeName, []string{"system:nodes"}, []string{"127.0.0.1", NodeName}},
	} {
		if err := p.issue(cert.name, cert.cn, cert.orgs, cert.hosts...); err != nil {
			return err
		}
		if _, err := p.kubeconfig(cert.name, server); err != nil {
			return err
		}
	}
	sa, err := p.writeKey("sa")
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return err
	}
	if err := p.write("sa.pub", "PUBLIC KEY", pub); err != nil {
		return err
	}
	c.Kubeconfig = p.path("admin.kubeconfig")
	return nil
}

// start runs a component with its output in dir/logs/name.log and a parent-death signal.
func (c *Cluster) start(name, bin string, args ...string) (*proc, error) {
	if err := os.MkdirAll(c.path("logs"), 0o700); err != nil {
		return nil, err
	}
	logPath := c.path("logs", name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	if name == "containerd" && c.containerdPath != "" {
		cmd.Env = append(os.Environ(), "PATH="+c.containerdPath)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c.procs = append(c.procs, p)
	_ = os.WriteFile(c.path(name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
	c.logf("kubelocal: started %s (pid %d)", name, cmd.Process.Pid)
	return p, nil
}

// exited reports whether p has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %[3]q

[ttrpc]
  address = "%[3]s.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %[4]q
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %[5]q
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    disable_apparmor = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      snapshotter = "overlayfs"
%[6]s
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = %[7]q
      max_conf_num = 1
`

// runtimeConfig is one runtime handler: the runc shim running the runtime wrapper
// (cmd/sandbox-kube-runtime, which applies the Pod's process-limit annotation), which
// runs the real runtime.
const runtimeConfig = `      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%[1]s]
        runtime_type = "io.containerd.runc.v2"
        pod_annotations = [%[3]q, %[4]q]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%[1]s.options]
          BinaryName = %[2]q
`

// PIDsAnnotation is the Pod annotation the runtime wrapper reads.
const PIDsAnnotation = "dev.agentsandbox.pids-limit"

// NetdownAnnotation is the Pod annotation asking the runtime wrapper to empty the
// Pod's network namespace.
const NetdownAnnotation = "dev.agentsandbox.netdown"

// RuntimePackage is the runtime wrapper's package.
const RuntimePackage = "github.com/agentsandbox/sandbox/cmd/sandbox-kube-runtime"

// cniConfig is a bridge network without a gateway and without masquerading: a pod
// gets an interface and an address on an isolated bridge, no default route, and the
// host no address on the bridge (so no route to the pods either).
const cniConfig = `{
  "cniVersion": "0.4.0",
  "name": "agentsandbox-kubetest",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": false,
    "isDefaultGateway": false,
    "ipMasq": false,
    "hairpinMode": false,
    "ipam": {
      "type": "host-local",
      "dataDir": %q,
      "ranges": [[{"subnet": %q}]]
    }
  }]
}
`

// runsc says whether to register gVisor: only when asked (SANDBOX_KUBE_RUNSC=1) and
// both gVisor's runsc (RunscBinEnv) and its containerd shim (RunscShimEnv, or
// containerd-shim-runsc-v1 on PATH) are there. A Pod on runsc through the runc shim
// (runsc as the runc shim's BinaryName) hung; gVisor's own shim is what drives runsc
// under containerd's CRI. Not working yet on this machine kind: with that shim
// (go install gvisor.dev/gvisor/shim at the runsc version, renamed), every Pod
// sandbox fails at once with "failed to set OOM Score on shim: write
// /proc/PID/oom_score_adj: permission denied": the shim lowers its child's score to
// -999, which needs CAP_SYS_RESOURCE, which root lacks here (the reason containerd
// needs restrict_oom_score_adj too), and it has no option to skip that. It stays
// opt-in for machines with that capability.
func (c *Cluster) runsc() (bin, shim string, ok bool) {
	if os.Getenv("SANDBOX_KUBE_RUNSC") != "1" {
		return "", "", false
	}
	bin = os.Getenv(RunscBinEnv)
	if fi, err := os.Stat(bin); bin == "" || err != nil || fi.Mode()&0o111 == 0 {
		return "", "", false
	}
	shim = os.Getenv(RunscShimEnv)
	if shim == "" {
		shim, _ = exec.LookPath("containerd-shim-runsc-v1")
	}
	if fi, err := os.Stat(shim); shim == "" || err != nil || fi.Mode()&0o111 == 0 {
		return "", "", false
	}
	return bin, shim, true
}

// RunscBinEnv names the runsc binary (scripts/install-runsc.sh prints it) and
// RunscShimEnv gVisor's containerd shim (containerd-shim-runsc-v1).
const (
	RunscBinEnv  = "SANDBOX_KUBE_RUNSC_BIN"
	RunscShimEnv = "SANDBOX_KUBE_RUNSC_SHIM"
)

// runscRuntimeConfig is gVisor's runtime handler: its own shim, configured by a TOML
// file (runscShimConfig) naming runsc and its flags.
const runscRuntimeConfig = `      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%[1]s]
        runtime_type = "io.containerd.runsc.v1"
        pod_annotations = [%[3]q]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%[1]s.options]
          TypeUrl = "io.containerd.runsc.v1.options"
          ConfigPath = %[2]q
`

// runscShimConfig: the sandbox has no network of its own (--network=none), so the
// Pod's interface is never seen inside and no network removal is needed.
const runscShimConfig = `binary_name = %q
root_path = %q
[runsc_config]
  network = "none"
  host-uds = "open"
`

func (c *Cluster) startContainerd(ctx context.Context) error {
	c.ContainerdSocket = c.path("containerd", "containerd.sock")
	for _, d := range []string{"containerd/root", "containerd/state", "containerd/opt", "cni/net.d", "cni/ipam", "runtimes"} {
		if err := os.MkdirAll(c.path(d), 0o700); err != nil {
			return err
		}
	}
	wrapper, err := gobuild.Cached(ctx, RuntimePackage, "sandbox-kube-runtime", filepath.Join(os.TempDir(), "agentsandbox-kube-runtime"))
	if err != nil {
		return fmt.Errorf("building the runtime wrapper: %w", err)
	}
	targets := map[string]string{RuntimeClassRunc: "/usr/sbin/runc"}
	if p, err := exec.LookPath("runc"); err == nil {
		targets[RuntimeClassRunc] = p
	}
	extra := ""
	if bin, shim, ok := c.runsc(); ok {
		// containerd finds a shim by its name on its PATH.
		if err := os.MkdirAll(c.path("bin"), 0o700); err != nil {
			return err
		}
		if err := copyFile(shim, c.path("bin", "containerd-shim-runsc-v1")); err != nil {
			return err
		}
		if err := os.Chmod(c.path("bin", "containerd-shim-runsc-v1"), 0o755); err != nil {
			return err
		}
		conf := c.path("runtimes", "runsc.toml")
		if err := os.WriteFile(conf, []byte(fmt.Sprintf(runscShimConfig, bin, c.path("containerd", "state", "runsc"))), 0o644); err != nil {
			return err
		}
		extra += fmt.Sprintf(runscRuntimeConfig, RuntimeClassRunsc, conf, PIDsAnnotation)
		c.containerdPath = c.path("bin") + string(os.PathListSeparator) + os.Getenv("PATH")
	}
	for _, name := range []string{RuntimeClassRunc} {
		target, ok := targets[name]
		if !ok {
			continue
		}
		bin := c.path("runtimes", name)
		if err := copyFile(wrapper, bin); err != nil {
			return err
		}
		if err := os.WriteFile(bin+".target", []byte(target), 0o644); err != nil {
			return err
		}
		extra += fmt.Sprintf(runtimeConfig, name, bin, PIDsAnnotation, NetdownAnnotation)
	}
	cfg := fmt.Sprintf(containerdConfig, c.path("containerd/root"), c.path("containerd/state"), c.ContainerdSocket,
		c.path("containerd/opt"), c.opts.PauseImage, extra, c.path("cni/net.d"))
	if err := os.WriteFile(c.path("containerd", "config.toml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	cni := fmt.Sprintf(cniConfig, BridgeName, c.path("cni/ipam"), PodCIDR)
	if err := os.WriteFile(c.path("cni/net.d", "10-agentsandbox.conflist"), []byte(cni), 0o600); err != nil {
		return err
	}
	p, err := c.start("containerd", "containerd", "--config", c.path("containerd", "config.toml"))
	if err != nil {
		return err
	}
	return waitFor(ctx, 60*time.Second, "containerd", p, func() bool {
		out, err := exec.CommandContext(ctx, "ctr", "-a", c.ContainerdSocket, "version").CombinedOutput()
		return err == nil && bytes.Contains(out, []byte("Server:"))
	})
}

// ImportImage imports a docker-archive (or OCI) image into the cluster's containerd,
// in the namespace the kubelet uses.
func (c *Cluster) ImportImage(ctx context.Context, archive []byte) error {
	cmd := exec.CommandContext(ctx, "ctr", "-a", c.ContainerdSocket, "-n", "k8s.io", "images", "import", "--no-unpack=false", "-")
	cmd.Stdin = bytes.NewReader(archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import: %w: %s", err, out)
	}
	return nil
}

func (c *Cluster) startControlPlane(ctx context.Context) error {
	bin := func(n string) string { return filepath.Join(c.opts.BinDir, n) }
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdClient)
	p, err := c.start("etcd", bin("etcd"),
		"--name", "kubetest", "--data-dir", c.path("etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdPeer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdPeer),
		"--initial-cluster", fmt.Sprintf("kubetest=http://127.0.0.1:%d", c.ports.etcdPeer),
		"--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		return err
	}
	if err := waitFor(ctx, 60*time.Second, "etcd", p, func() bool { return httpOK(ctx, etcdURL+"/health", nil) }); err != nil {
		return err
	}
	k := c.pki.path
	p, err = c.start("kube-apiserver", bin("kube-apiserver"),
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(c.ports.apiserver),
		"--tls-cert-file", k("apiserver.crt"), "--tls-private-key-file", k("apiserver.key"),
		"--client-ca-file", k("ca.crt"),
		"--kubelet-client-certificate", k("apiserver-kubelet-client.crt"),
		"--kubelet-client-key", k("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority", k("ca.crt"),
		"--kubelet-preferred-address-types", "Hostname",
		"--service-account-key-file", k("sa.pub"),
		"--service-account-signing-key-file", k("sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--authorization-mode", "Node,RBAC",
		"--anonymous-auth=false",
		"--allow-privileged=false",
		"--endpoint-reconciler-type", "none",
		"--profiling=false",
		"--cert-dir", c.path("apiserver-certs"),
		"--v", "1")
	if err != nil {
		return err
	}
	if err := waitFor(ctx, 120*time.Second, "kube-apiserver", p, func() bool {
		return httpOK(ctx, fmt.Sprintf("https://127.0.0.1:%d/readyz", c.ports.apiserver), c.pki)
	}); err != nil {
		return err
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return err
	}
	c.Config.QPS, c.Config.Burst = 200, 400
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	// The controller manager and the scheduler each use one kubeconfig for
	// everything, serve on loopback only, and run alone (no leader election).
	component := func(name, kubeconfig string, extra ...string) error {
		kc := k(kubeconfig)
		_, err := c.start(name, bin(name), append([]string{
			"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
			"--bind-address", "127.0.0.1", "--secure-port", "0",
			"--leader-elect=false", "--profiling=false", "--v", "1",
		}, extra...)...)
		return err
	}
	if err := component("kube-controller-manager", "controller-manager.kubeconfig",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file", k("sa.key"),
		"--root-ca-file", k("ca.crt"),
		"--flex-volume-plugin-dir", c.path("flexvolume")); err != nil {
		return err
	}
	return component("kube-scheduler", "scheduler.kubeconfig")
}

const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %[1]d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[2]q
authorization:
  mode: Webhook
tlsCertFile: %[3]q
tlsPrivateKeyFile: %[4]q
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[5]s
makeIPTablesUtilChains: false
podLogsDir: %[6]q
volumePluginDir: %[7]q
resolvConf: ""
podPidsLimit: %[8]d
maxPods: 110
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
evictionPressureTransitionPeriod: 5s
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
fileCheckFrequency: 20s
staticPodPath: ""
shutdownGracePeriod: 0s
localStorageCapacityIsolation: true
containerLogMaxSize: 10Mi
containerLogMaxFiles: 2
enableDebuggingHandlers: true
`

func (c *Cluster) startKubelet() error {
	k := c.pki.path
	cfg := fmt.Sprintf(kubeletConfig, c.ports.kubelet, k("ca.crt"), k("kubelet.crt"), k("kubelet.key"), c.ContainerdSocket,
		c.path("pod-logs"), c.path("volume-plugins"), PIDsLimit)
	if err := os.WriteFile(c.path("kubelet.yaml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	for _, d := range []string{"pod-logs", "volume-plugins", "kubelet"} {
		if err := os.MkdirAll(c.path(d), 0o700); err != nil {
			return err
		}
	}
	_, err := c.start("kubelet", filepath.Join(c.opts.BinDir, "kubelet"),
		"--config", c.path("kubelet.yaml"),
		"--kubeconfig", k("kubelet.kubeconfig"),
		"--root-dir", c.path("kubelet"),
		"--cert-dir", c.path("kubelet-certs"),
		"--hostname-override", NodeName,
		"--v", "1")
	return err
}

// waitReady waits until the node is Ready without taints that keep pods off and the
// default namespace's service account exists (the admission of every pod needs it).
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var last string
	for {
		for _, p := range c.procs {
			if p.exited() {
				return fmt.Errorf("%s exited", p.name)
			}
		}
		last = c.notReady(ctx)
		if last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the node is not ready: %s", last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// notReady says why the cluster cannot take pods yet; "" when it can.
func (c *Cluster) notReady(ctx context.Context) string {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return "node: " + err.Error()
	}
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return "node not Ready"
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return "node tainted " + t.Key
		}
	}
	if _, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
		return "default service account: " + err.Error()
	}
	return ""
}

func (c *Cluster) createRuntimeClasses(ctx context.Context) error {
	names := []string{RuntimeClassRunc}
	if _, _, ok := c.runsc(); ok {
		names = append(names, RuntimeClassRunsc)
	}
	for _, n := range names {
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: n}, Handler: n}
		if _, err := c.Client.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("runtime class %s: %w", n, err)
		}
	}
	c.RuntimeClasses = names
	return nil
}

// Logs returns the last n lines of every component's log.
func (c *Cluster) Logs(n int) string {
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "--- %s (last %d lines)\n%s\n", p.name, n, localcluster.TailFile(p.log, n))
	}
	return b.String()
}

// waitFor polls ok until it holds, p exits (an error) or the timeout or ctx ends.
func waitFor(ctx context.Context, timeout time.Duration, what string, p *proc, ok func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	delay := 20 * time.Millisecond
	for !ok() {
		if p.exited() {
			return fmt.Errorf("%s exited: %s", what, localcluster.TailFile(p.log, 15))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", what, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
	return nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// iptablesChains lists the chains of every iptables table.
func iptablesChains() map[string]bool {
	chains := map[string]bool{}
	out, err := exec.Command("iptables-save").Output()
	if err != nil {
		return chains
	}
	table := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		case strings.HasPrefix(l, ":"):
			if f := strings.Fields(l[1:]); len(f) > 0 {
				chains[table+"/"+f[0]] = true
			}
		}
	}
	return chains
}

// Containers lists the IDs of the containers (and pod sandboxes) in the cluster's
// containerd whose labels match.
func (c *Cluster) Containers(ctx context.Context, match func(labels map[string]string) bool) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ctr", "-a", c.ContainerdSocket, "-n", "k8s.io", "containers", "ls", "-q").Output()
	if err != nil {
		return nil, fmt.Errorf("ctr containers ls: %w", err)
	}
	var ids []string
	for _, id := range strings.Fields(string(out)) {
		info, err := exec.CommandContext(ctx, "ctr", "-a", c.ContainerdSocket, "-n", "k8s.io", "containers", "info", id).Output()
		if err != nil {
			continue // removed meanwhile
		}
		var ci struct{ Labels map[string]string }
		if json.Unmarshal(info, &ci) == nil && match(ci.Labels) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}
