package nomadlocal

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentsandbox/sandbox/internal/localcluster"
	"github.com/hashicorp/nomad/api"
)

// Version is the Nomad version the project pins (scripts/install-nomad.sh).
const Version = "1.6.3"

// Binary returns the nomad binary: NOMAD_BIN, else "nomad" on PATH.
func Binary() (string, error) {
	if p := os.Getenv("NOMAD_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("NOMAD_BIN: %w", err)
		}
		return p, nil
	}
	p, err := exec.LookPath("nomad")
	if err != nil {
		return "", errors.New("no NOMAD_BIN and no nomad on PATH (eval \"$(scripts/install-nomad.sh)\" && export NOMAD_BIN)")
	}
	return p, nil
}

// Options configure Start.
type Options struct {
	// Bin is the nomad binary (default Binary()).
	Bin string
	// Dir is where the data directories go (default a new temporary directory,
	// removed by Close).
	Dir string
	// Clients is the number of client agents (default 2).
	Clients int
	// FastNodeLoss makes the server mark a silent client node down within about 5 s
	// (heartbeat TTL 2 s, grace 3 s) instead of about 20 s: for node-loss tests, on a
	// cluster of their own (a loaded machine may then lose a node spuriously).
	FastNodeLoss bool
	// ACL turns Nomad's ACL system on (server and clients) and bootstraps it: the
	// cluster's own API client holds the management token, and Token makes narrower
	// tokens for the code under test.
	ACL bool
	// Log receives the agents' output; nil discards it (it is kept in files under Dir
	// and printed by Close when KeepLogs is set).
	Log func(format string, args ...any)
}

// Cluster is a running local Nomad cluster.
type Cluster struct {
	// Addr is the server's HTTP address, e.g. "http://127.0.0.1:4646".
	Addr string
	// NodeNames are the clients' node names, unique to this cluster.
	NodeNames []string
	// Started is how long Start took until both nodes were ready.
	Started time.Duration

	id      string
	dir     string
	ownDir  bool
	agents  []*agent
	log     func(string, ...any)
	api     *api.Client
	stopped bool
}

type agent struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	logf string
}

// Start starts a server and the clients and waits (bounded by ctx) until every client
// node is ready with a healthy docker driver. On error nothing is left running.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	start := time.Now()
	if opts.Bin == "" {
		if opts.Bin, err = Binary(); err != nil {
			return nil, err
		}
	}
	if opts.Clients == 0 {
		opts.Clients = 2
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	c = &Cluster{id: "sbxnomad-" + hex.EncodeToString(b[:]), dir: opts.Dir, log: opts.Log}
	if c.log == nil {
		c.log = func(string, ...any) {}
	}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "nomadlocal-"); err != nil {
			return nil, err
		}
		c.ownDir = true
	}
	defer func() {
		if err != nil {
			_ = c.Close()
			c = nil
		}
	}()
	ports, err := localcluster.FreePorts(3 + 3*opts.Clients)
	if err != nil {
		return c, err
	}
	rpc := ports[1]
	c.Addr = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	scfg := serverConfig(c.dir, c.id, ports[0:3])
	if opts.ACL {
		scfg += "acl {\n  enabled = true\n}\n"
	}
	if opts.FastNodeLoss {
		scfg = strings.Replace(scfg, "  bootstrap_expect = 1\n", "  bootstrap_expect = 1\n  min_heartbeat_ttl = \"2s\"\n  heartbeat_grace = \"3s\"\n", 1)
	}
	if err := c.startAgent(opts.Bin, "server", scfg); err != nil {
		return c, err
	}
	for i := 0; i < opts.Clients; i++ {
		name := fmt.Sprintf("%s-%d", c.id, i+1)
		c.NodeNames = append(c.NodeNames, name)
		ccfg := clientConfig(c.dir, name, rpc, ports[3+3*i:6+3*i])
		if opts.ACL {
			ccfg += "acl {\n  enabled = true\n}\n"
		}
		if err := c.startAgent(opts.Bin, name, ccfg); err != nil {
			return c, err
		}
	}
	if c.api, err = api.NewClient(&api.Config{Address: c.Addr}); err != nil {
		return c, err
	}
	if opts.ACL {
		if err := c.bootstrap(ctx); err != nil {
			return c, err
		}
	}
	if err := c.waitReady(ctx); err != nil {
		return c, err
	}
	c.Started = time.Since(start)
	return c, nil
}

// bootstrap takes the management token once the server has a leader, and gives it
// to the cluster's own client (teardown and readiness checks).
func (c *Cluster) bootstrap(ctx context.Context) error {
	for {
		tok, _, err := c.api.ACLTokens().Bootstrap((&api.WriteOptions{}).WithContext(ctx))
		if err == nil {
			c.api.SetSecretID(tok.SecretID)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nomadlocal: ACL bootstrap: %w (last: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Token creates an ACL policy named name with rules (HCL) and a client token bound
// to it alone, and returns the token's secret. The cluster must have ACL on.
func (c *Cluster) Token(name, rules string) (string, error) {
	if _, err := c.api.ACLPolicies().Upsert(&api.ACLPolicy{Name: name, Rules: rules}, nil); err != nil {
		return "", fmt.Errorf("nomadlocal: policy %s: %w", name, err)
	}
	tok, _, err := c.api.ACLTokens().Create(&api.ACLToken{Name: name, Type: "client", Policies: []string{name}}, nil)
	if err != nil {
		return "", fmt.Errorf("nomadlocal: token for %s: %w", name, err)
	}
	return tok.SecretID, nil
}

// KillNode kills the client agent of node name without warning (SIGKILL), as a
// node that dies would be: the containers it started go on running in Docker until
// something stops them (Close removes them). The servers mark the node down after
// their heartbeat grace.
func (c *Cluster) KillNode(name string) error {
	for _, a := range c.agents {
		if a.name == name {
			if err := a.cmd.Process.Kill(); err != nil {
				return err
			}
			<-a.done
			return nil
		}
	}
	return fmt.Errorf("nomadlocal: no client node %q", name)
}

// RestartNode starts again the client agent of node name after KillNode, with the
// same configuration and data directory, as a node that comes back: it restores the
// allocations it had and reconciles them with the servers.
func (c *Cluster) RestartNode(name string) error {
	for i, a := range c.agents {
		if a.name != name {
			continue
		}
		select {
		case <-a.done:
		default:
			return fmt.Errorf("nomadlocal: node %q is running", name)
		}
		logf, err := os.OpenFile(a.logf, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		defer logf.Close()
		cmd := exec.Command(a.cmd.Path, a.cmd.Args[1:]...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr, cmd.Env = a.cmd.SysProcAttr, a.cmd.Env
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("restarting nomad %s: %w", name, err)
		}
		na := &agent{name: name, cmd: cmd, done: make(chan struct{}), logf: a.logf}
		go func() { _ = cmd.Wait(); close(na.done) }()
		c.agents[i] = na
		return nil
	}
	return fmt.Errorf("nomadlocal: no client node %q", name)
}

// API returns a client of the server's HTTP API.
func (c *Cluster) API() *api.Client { return c.api }

// Dir is the directory holding the agents' data directories and logs.
func (c *Cluster) Dir() string { return c.dir }

func serverConfig(dir, id string, p []int) string {
	return fmt.Sprintf(`name = %q
data_dir = %q
bind_addr = "127.0.0.1"
datacenter = "dc1"
disable_update_check = true
log_level = "WARN"
ports {
  http = %d
  rpc  = %d
  serf = %d
}
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
server {
  enabled          = true
  bootstrap_expect = 1
  # Terminal allocations and evaluations of purged jobs go soon.
  job_gc_interval        = "5s"
  job_gc_threshold       = "5s"
  eval_gc_threshold      = "5s"
  batch_eval_gc_threshold = "5s"
  default_scheduler_config {
    scheduler_algorithm = "spread"
  }
}
`, id+"-server", filepath.Join(dir, "server"), p[0], p[1], p[2])
}

// clientConfig is a client agent's configuration. The docker plugin settings are
// what the Nomad runner needs (see adapters/nomad's package documentation):
// volumes enabled (host-path workspaces, mounts and the bridge binary), the dangling
// container reconciler off (two clients share one Docker engine and would remove each
// other's containers), image garbage collection off (the images are built locally and
// shared), and the node name on every container so Close finds them.
func clientConfig(dir, name string, rpc int, p []int) string {
	return fmt.Sprintf(`name = %q
data_dir = %q
bind_addr = "127.0.0.1"
datacenter = "dc1"
disable_update_check = true
log_level = "WARN"
ports {
  http = %d
  rpc  = %d
  serf = %d
}
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
client {
  enabled = true
  servers = ["127.0.0.1:%d"]
  network_interface = "lo"
  cgroup_parent = %q
  gc_interval = "10s"
  options = {
    "driver.allowlist" = "docker"
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean,consul,vault"
  }
}
plugin "docker" {
  config {
    volumes {
      enabled = true
    }
    extra_labels = ["node_name", "job_name", "task_name"]
    allow_runtimes = ["runc", "runsc", "crun"]
    gc {
      image     = false
      container = true
      dangling_containers {
        enabled = false
      }
    }
  }
}
`, name, filepath.Join(dir, name), p[0], p[1], p[2], rpc, name+".slice")
}

func (c *Cluster) startAgent(bin, name, config string) error {
	cfgPath := filepath.Join(c.dir, name+".hcl")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		return err
	}
	logPath := filepath.Join(c.dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "agent", "-config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The agents die with the process that started them, however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=", "NOMAD_TOKEN=", "CONSUL_HTTP_ADDR=", "VAULT_ADDR=")
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting nomad %s: %w", name, err)
	}
	a := &agent{name: name, cmd: cmd, done: make(chan struct{}), logf: logPath}
	go func() { _ = cmd.Wait(); close(a.done) }()
	c.agents = append(c.agents, a)
	return nil
}

func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		ready, state := c.readyNodes()
		if ready == len(c.NodeNames) {
			return nil
		}
		for _, a := range c.agents {
			select {
			case <-a.done:
				return fmt.Errorf("nomad agent %s exited during start-up:\n%s", a.name, localcluster.TailFile(a.logf, 30))
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster was not ready in time (%s):\n%s", state, c.Logs(20))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readyNodes counts this cluster's nodes that are ready with a healthy docker driver.
func (c *Cluster) readyNodes() (int, string) {
	nodes, _, err := c.api.Nodes().List(&api.QueryOptions{Params: map[string]string{"os": "true"}})
	if err != nil {
		return 0, err.Error()
	}
	n := 0
	var states []string
	for _, stub := range nodes {
		d := stub.Drivers["docker"]
		ok := stub.Status == "ready" && stub.SchedulingEligibility == "eligible" && d != nil && d.Detected && d.Healthy
		if ok {
			n++
		}
		states = append(states, fmt.Sprintf("%s=%s/docker:%v", stub.Name, stub.Status, d != nil && d.Healthy))
	}
	return n, strings.Join(states, ",")
}

// Logs returns the last n lines of every agent's log.
func (c *Cluster) Logs(n int) string {
	var b strings.Builder
	for _, a := range c.agents {
		fmt.Fprintf(&b, "== %s\n%s\n", a.name, localcluster.TailFile(a.logf, n))
	}
	return b.String()
}

// Close stops every job, removes the containers of this cluster's nodes, kills the
// agents, unmounts what they left mounted and removes the data directories. It is
// idempotent and returns the first error (after trying everything).
func (c *Cluster) Close() error {
	if c == nil || c.stopped {
		return nil
	}
	c.stopped = true
	var errs []error
	if c.api != nil {
		if err := c.stopJobs(); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(c.agents) - 1; i >= 0; i-- {
		a := c.agents[i]
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("nomad %s did not exit", a.name))
		}
	}
	if err := removeContainers(c.NodeNames); err != nil {
		errs = append(errs, err)
	}
	if err := unmountUnder(c.dir); err != nil {
		errs = append(errs, err)
	}
	if c.ownDir {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, err)
		}
	} else {
		for _, a := range c.agents {
			_ = os.RemoveAll(filepath.Join(c.dir, a.name))
		}
	}
	return errors.Join(errs...)
}

// stopJobs purges every job and waits (bounded) for their allocations to stop, so the
// clients stop their containers themselves.
func (c *Cluster) stopJobs() error {
	jobs, _, err := c.api.Jobs().List(nil)
	if err != nil {
		return fmt.Errorf("listing jobs: %w", err)
	}
	for _, j := range jobs {
		_, _, _ = c.api.Jobs().Deregister(j.ID, true, nil)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		allocs, _, err := c.api.Allocations().List(nil)
		if err != nil {
			return nil // the server is gone; removeContainers handles the rest
		}
		running := 0
		for _, a := range allocs {
			if a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending {
				running++
			}
		}
		if running == 0 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// removeContainers force-removes every Docker container labelled with one of the node
// names (the docker plugin's extra_labels put it there).
func removeContainers(nodes []string) error {
	if len(nodes) == 0 {
		return nil
	}
	var ids []string
	for _, n := range nodes {
		out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=com.hashicorp.nomad.node_name="+n).Output()
		if err != nil {
			return fmt.Errorf("listing containers of %s: %w", n, err)
		}
		ids = append(ids, strings.Fields(string(out))...)
	}
	if len(ids) == 0 {
		return nil
	}
	if out, err := exec.Command("docker", append([]string{"rm", "-f", "-v"}, ids...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("removing containers: %v: %s", err, out)
	}
	return nil
}

// unmountUnder detaches every mount below dir (the clients mount a tmpfs in each
// task's secrets directory), deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	prefix := filepath.Clean(dir) + "/"
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], prefix) {
			points = append(points, fields[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
