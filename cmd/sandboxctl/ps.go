package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/adapters/nomad"
	"github.com/agentsandbox/sandbox/port"
)

// entry is one line of ps: a container the library made.
type entry struct {
	Runtime string    `json:"runtime"`
	Owner   string    `json:"owner"`
	RunID   string    `json:"run_id"`
	Kind    string    `json:"kind"` // sandbox, session, pool, proxy
	ID      string    `json:"id"`
	Created time.Time `json:"created,omitzero"`
	State   string    `json:"state"`
}

func cmdPs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := newFlags("ps", stderr, &c)
	if code, ok := parse(fs, args, 0, 0, stderr, ""); !ok {
		return code
	}
	var all []entry
	var errs []error
	if c.runtime == "all" || c.runtime == "docker" {
		e, err := psDocker(ctx, c)
		all, errs = append(all, e...), append(errs, err)
	}
	if c.runtime == "all" || c.runtime == "containerd" {
		e, err := psContainerd(ctx, c)
		all, errs = append(all, e...), append(errs, err)
	}
	if c.runtime != "all" && c.runtime != "docker" && c.runtime != "containerd" {
		fmt.Fprintf(stderr, "sandboxctl ps: unknown runtime %q\n", c.runtime)
		return exitUsage
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Owner != all[j].Owner {
			return all[i].Owner < all[j].Owner
		}
		return all[i].Created.Before(all[j].Created)
	})
	if c.json {
		if all == nil {
			all = []entry{}
		}
		_ = json.NewEncoder(stdout).Encode(all)
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RUNTIME\tOWNER\tRUN\tKIND\tID\tAGE\tSTATE")
		for _, e := range all {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Runtime, e.Owner, e.RunID, e.Kind, short(e.ID), age(e.Created), e.State)
		}
		tw.Flush()
	}
	// A runtime that could not be listed is an error even when the other answered:
	// an operator must not read a partial list as the whole.
	if err := errors.Join(errs...); err != nil {
		return errCode(stderr, "ps", err)
	}
	return exitOK
}

func dockerClient(host string) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	return client.New(opts...)
}

func psDocker(ctx context.Context, c common) ([]entry, error) {
	cli, err := dockerClient(c.dockerHost)
	if err != nil {
		return nil, fmt.Errorf("docker: %w: %v", port.ErrUnavailable, err)
	}
	defer cli.Close()
	f := client.Filters{}
	if c.owner != "" {
		f.Add("label", port.LabelOwner+"="+c.owner)
	} else {
		f.Add("label", port.LabelOwner)
	}
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("docker: %w: %v", port.ErrUnavailable, firstLine(err.Error()))
	}
	var out []entry
	for _, s := range list.Items {
		e := entry{Runtime: "docker", Owner: s.Labels[port.LabelOwner], RunID: s.Labels[port.LabelRunID],
			Kind: kindOf(s.Labels), ID: s.ID, Created: createdOf(s.Labels, time.Unix(s.Created, 0)), State: string(s.State)}
		// Docker cannot relabel a container: a pool's sandbox claimed by a run is
		// renamed after it instead (agentsandbox-<run id>-<suffix>).
		if name := dockerName(s.Names); e.Kind == port.KindPool && name != "" && !strings.HasPrefix(name, dockerPoolPrefix) {
			e.Kind = kindPooled
			if run, ok := runOfName(name); ok {
				e.RunID = run
			}
		}
		out = append(out, e)
	}
	return out, nil
}

func psContainerd(ctx context.Context, c common) ([]entry, error) {
	cli, err := ctrd.New(c.containerdAddress, ctrd.WithTimeout(3*time.Second))
	if err != nil {
		return nil, fmt.Errorf("containerd: %w: %v", port.ErrUnavailable, firstLine(err.Error()))
	}
	defer cli.Close()
	ctx = namespaces.WithNamespace(ctx, c.namespace)
	filter := `labels."` + port.LabelOwner + `"`
	if c.owner != "" {
		filter += "==" + strconv.Quote(c.owner)
	}
	cs, err := cli.Containers(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("containerd: %w: %v", port.ErrUnavailable, firstLine(err.Error()))
	}
	var out []entry
	for _, ct := range cs {
		info, err := ct.Info(ctx, ctrd.WithoutRefreshedMetadata)
		if err != nil {
			continue // removed meanwhile
		}
		state := "created"
		if t, err := ct.Task(ctx, nil); err == nil {
			if st, err := t.Status(ctx); err == nil {
				state = string(st.Status)
			}
		}
		out = append(out, entry{Runtime: "containerd", Owner: info.Labels[port.LabelOwner], RunID: info.Labels[port.LabelRunID],
			Kind: kindOf(info.Labels), ID: info.ID, Created: createdOf(info.Labels, info.CreatedAt), State: state})
	}
	return out, nil
}

// kindPooled is ps's kind of a pool's sandbox that a run claimed.
const kindPooled = "sandbox (pooled)"

// dockerPoolPrefix starts the name of a Docker pool's sandbox waiting for a run.
const dockerPoolPrefix = "agentsandbox-pool-"

// kindOf names what a container is for: a pool's sandbox waiting for a run (pool), one
// a run claimed, a session, a sandbox, a proxy.
func kindOf(l map[string]string) string {
	_, pooled := l[containerd.LabelPool]
	switch k := l[port.LabelKind]; {
	case k == port.KindPool:
		return port.KindPool
	case pooled:
		return kindPooled
	case k != "":
		return k
	}
	return "?"
}

// dockerName is a container's name without Docker's leading slash.
func dockerName(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return strings.TrimPrefix(names[0], "/")
}

// runOfName is the run ID in the name of a sandbox named after its run
// (agentsandbox-<run id>-<8 hex digits>).
func runOfName(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "agentsandbox-")
	if !ok || len(rest) < 10 || rest[len(rest)-9] != '-' || !isHex(rest[len(rest)-8:]) {
		return "", false
	}
	return rest[:len(rest)-9], true
}

func createdOf(l map[string]string, fallback time.Time) time.Time {
	if t, err := time.Parse(time.RFC3339, l[port.LabelCreatedAt]); err == nil {
		return t
	}
	return fallback
}

func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return d.String()
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func short(id string) string {
	if len(id) > 12 && isHex(id) {
		return id[:12]
	}
	return id
}

func isHex(s string) bool {
	for _, r := range s {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

// sweepReport is sweep's JSON output, per part swept: "docker", "docker-nginx" (the
// Docker proxy manager's per-run directories), "containerd", "inproc-proxy" (the
// in-process proxies' directories and sockets), "workspaces" (NewWorkspace's), or
// "nomad-node".
type sweepReport struct {
	Runtime string   `json:"runtime"`
	DryRun  bool     `json:"dry_run"`
	Removed []string `json:"removed"`
	Errors  []string `json:"errors,omitempty"`
}

// sweepPart is one sweeper of a sweep, named for the report.
type sweepPart struct {
	name string
	sw   port.Sweeper
}

func cmdSweep(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := newFlags("sweep", stderr, &c)
	older := fs.Duration("older-than", 10*time.Minute, "grace `period`: keep what is younger (a run just starting)")
	runID := fs.String("run-id", "", "sweep only this `run`")
	dry := fs.Bool("dry-run", false, "list what would be removed, remove nothing")
	nomadAddr := fs.String("nomad-addr", os.Getenv("NOMAD_ADDR"), "Nomad servers' `address`, for --runtime nomad-node (the token is $NOMAD_TOKEN)")
	proxyDir := fs.String("proxy-dir", filepath.Join(os.TempDir(), inprocproxy.DefaultBaseDirName), "the proxies' per-run directories' `root` (in-process and Docker nginx proxies; default the library's)")
	wsDir := fs.String("workspace-dir", os.TempDir(), "`parent` of the workspaces NewWorkspace made (default the library's)")
	poolDir := fs.String("pool-dir", docker.DefaultPoolDir, "warm pools' slot directories' `root` (default the library's)")
	if code, ok := parse(fs, args, 0, 0, stderr, ""); !ok {
		return code
	}
	if c.owner == "" {
		fmt.Fprintln(stderr, "sandboxctl sweep: --owner is required (a sweep never touches another owner's sandboxes)")
		return exitUsage
	}
	c.poolDir = *poolDir
	opts := port.SweepOptions{OlderThan: *older, RunID: *runID, DryRun: *dry}
	var parts []sweepPart
	var errs []error
	add := func(name string, sw port.Sweeper, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			return
		}
		parts = append(parts, sweepPart{name, sw})
	}
	// The sandboxes first (they mount the rest), then the proxies, then the
	// workspaces.
	switch c.runtime {
	case "all", "docker", "containerd":
		if c.runtime != "containerd" {
			r, err := dockerRunner(c)
			add("docker", r, err)
			m, err := dockerProxies(c, *proxyDir)
			if m != nil {
				defer m.Close()
			}
			add("docker-nginx", m, err)
		}
		if c.runtime != "docker" {
			r, err := containerdRunner(c)
			if r != nil {
				defer r.Close()
			}
			add("containerd", r, err)
		}
		m, err := inprocproxy.NewManager(inprocproxy.WithOwner(c.owner), inprocproxy.WithBaseDir(*proxyDir))
		add("inproc-proxy", m, err)
		add("workspaces", sandbox.WorkspaceSweeper(*wsDir, c.owner), nil)
	case "nomad-node":
		// The node-local half of a Nomad sweep (nomad.Runner.SweepNode), against this
		// host's Docker: run on each client machine, e.g. from cron. Not in "all": it
		// needs the servers.
		r, err := nomadNodeSweeper(c, *nomadAddr)
		add("nomad-node", r, err)
	default:
		fmt.Fprintf(stderr, "sandboxctl sweep: unknown runtime %q\n", c.runtime)
		return exitUsage
	}
	if tty(stderr) {
		fmt.Fprintf(stderr, "sweeping owner %s...\n", c.owner)
	}
	sweepers := make([]port.Sweeper, len(parts))
	for i, p := range parts {
		sweepers[i] = p.sw
	}
	// One call, as a host would make it: each resource is named once, so the dry
	// run lists exactly what the sweep removes.
	got, err := sandbox.Sweep(ctx, opts, sweepers...)
	if err != nil {
		errs = append(errs, err)
	}
	reps := sweepReports(got, parts, *dry)
	printSweep(stdout, c.json, reps, *dry)
	failed := false
	for _, r := range reps {
		failed = failed || len(r.Errors) > 0
	}
	if err := errors.Join(errs...); err != nil {
		return errCode(stderr, "sweep", err)
	}
	if failed {
		return exitFailed
	}
	return exitOK
}

// sweepReports names each sweeper's report for the output.
func sweepReports(got []port.SweepReport, parts []sweepPart, dry bool) []sweepReport {
	var reps []sweepReport
	for i, rep := range got {
		r := sweepReport{Runtime: parts[i].name, DryRun: dry, Removed: rep.Removed}
		if r.Removed == nil {
			r.Removed = []string{}
		}
		for _, e := range rep.Errors {
			r.Errors = append(r.Errors, e.Error())
		}
		reps = append(reps, r)
	}
	return reps
}

// printSweep writes the reports as JSON or as a table.
func printSweep(stdout io.Writer, asJSON bool, reps []sweepReport, dry bool) {
	if asJSON {
		_ = json.NewEncoder(stdout).Encode(reps)
		return
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	verb := "REMOVED"
	if dry {
		verb = "WOULD REMOVE"
	}
	fmt.Fprintf(tw, "FROM\t%s\n", verb)
	for _, r := range reps {
		for _, x := range r.Removed {
			fmt.Fprintf(tw, "%s\t%s\n", r.Runtime, x)
		}
		for _, e := range r.Errors {
			fmt.Fprintf(tw, "%s\terror: %s\n", r.Runtime, e)
		}
	}
	tw.Flush()
}

// dockerProxies is the Docker proxy manager of the owner, for its sweep: nginx
// containers and their per-run directories under dir.
func dockerProxies(c common, dir string) (*docker.ProxyManager, error) {
	opts := []docker.ProxyOption{docker.WithOwner(c.owner), docker.WithProxyBaseDir(dir)}
	if c.dockerHost != "" {
		opts = append(opts, docker.WithHost(c.dockerHost))
	}
	return docker.NewProxyManager(opts...)
}

// nodeSweeper sweeps one Nomad client node's Docker engine (nomad.Runner.SweepNode).
type nodeSweeper struct {
	r      *nomad.Runner
	docker nomad.NodeDocker
}

func (n nodeSweeper) Sweep(ctx context.Context, opts port.SweepOptions) (port.SweepReport, error) {
	return n.r.SweepNode(ctx, n.docker, opts)
}

func nomadNodeSweeper(c common, addr string) (port.Sweeper, error) {
	if addr == "" {
		return nil, port.Invalidf("--nomad-addr (or $NOMAD_ADDR) is required for the nomad-node runtime")
	}
	r, err := nomad.NewRunner(nomad.WithAddress(addr), nomad.WithOwner(c.owner))
	if err != nil {
		return nil, err
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if c.dockerHost != "" {
		opts = append(opts, client.WithHost(c.dockerHost))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: docker: %w", port.ErrUnavailable, err)
	}
	return nodeSweeper{r: r, docker: cli}, nil
}

func dockerRunner(c common) (*docker.Runner, error) {
	opts := []docker.Option{docker.WithOwner(c.owner)}
	if c.poolDir != "" {
		opts = append(opts, docker.WithPoolDir(c.poolDir))
	}
	if c.dockerHost != "" {
		opts = append(opts, docker.WithHost(c.dockerHost))
	}
	if c.sessionDir != "" {
		opts = append(opts, docker.WithSessionDir(c.sessionDir))
	}
	return docker.NewRunner(opts...)
}

func containerdRunner(c common) (*containerd.Runner, error) {
	opts := []containerd.Option{containerd.WithOwner(c.owner), containerd.WithAddress(c.containerdAddress), containerd.WithNamespace(c.namespace)}
	if c.poolDir != "" {
		opts = append(opts, containerd.WithPoolDir(c.poolDir))
	}
	if c.sessionDir != "" {
		opts = append(opts, containerd.WithSessionDir(c.sessionDir))
	}
	return containerd.NewRunner(opts...)
}
