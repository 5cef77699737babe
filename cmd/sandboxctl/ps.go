package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
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
	if err := fs.Parse(args); err != nil {
		return parseCode(err)
	} else if fs.NArg() > 0 {
		return exitUsage
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
		out = append(out, entry{Runtime: "docker", Owner: s.Labels[port.LabelOwner], RunID: s.Labels[port.LabelRunID],
			Kind: kindOf(s.Labels), ID: s.ID, Created: createdOf(s.Labels, time.Unix(s.Created, 0)), State: string(s.State)})
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

// kindOf names what a container is for: a pool slot, a session, a sandbox, a proxy.
func kindOf(l map[string]string) string {
	if _, ok := l[containerd.LabelPool]; ok && l[port.LabelRunID] == "" {
		return "pool"
	}
	if _, ok := l[containerd.LabelPool]; ok {
		return "sandbox (pooled)"
	}
	if k := l[port.LabelKind]; k != "" {
		return k
	}
	return "?"
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

// sweepReport is sweep's JSON output, per runtime.
type sweepReport struct {
	Runtime string   `json:"runtime"`
	DryRun  bool     `json:"dry_run"`
	Removed []string `json:"removed"`
	Errors  []string `json:"errors,omitempty"`
}

func cmdSweep(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := newFlags("sweep", stderr, &c)
	older := fs.Duration("older-than", 10*time.Minute, "grace `period`: keep what is younger (a run just starting)")
	runID := fs.String("run-id", "", "sweep only this `run`")
	dry := fs.Bool("dry-run", false, "list what would be removed, remove nothing")
	nomadAddr := fs.String("nomad-addr", os.Getenv("NOMAD_ADDR"), "Nomad servers' `address`, for --runtime nomad-node (the token is $NOMAD_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return parseCode(err)
	} else if fs.NArg() > 0 {
		return exitUsage
	}
	if c.owner == "" {
		fmt.Fprintln(stderr, "sandboxctl sweep: --owner is required (a sweep never touches another owner's sandboxes)")
		return exitUsage
	}
	opts := port.SweepOptions{OlderThan: *older, RunID: *runID, DryRun: *dry}
	var reps []sweepReport
	var errs []error
	sweep := func(name string, sw port.Sweeper, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			return
		}
		if tty(stderr) {
			fmt.Fprintf(stderr, "sweeping %s (owner %s)...\n", name, c.owner)
		}
		rep, err := sw.Sweep(ctx, opts)
		r := sweepReport{Runtime: name, DryRun: *dry, Removed: rep.Removed}
		if r.Removed == nil {
			r.Removed = []string{}
		}
		for _, e := range rep.Errors {
			r.Errors = append(r.Errors, e.Error())
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		reps = append(reps, r)
	}
	switch c.runtime {
	case "all", "docker", "containerd":
	case "nomad-node":
		// The node-local half of a Nomad sweep (nomad.Runner.SweepNode), against this
		// host's Docker: run on each client machine, e.g. from cron. Not in "all": it
		// needs the servers.
		r, err := nomadNodeSweeper(c, *nomadAddr)
		sweep("nomad-node", r, err)
	default:
		fmt.Fprintf(stderr, "sandboxctl sweep: unknown runtime %q\n", c.runtime)
		return exitUsage
	}
	if c.runtime == "all" || c.runtime == "docker" {
		r, err := dockerRunner(c)
		sweep("docker", r, err)
	}
	if c.runtime == "all" || c.runtime == "containerd" {
		r, err := containerdRunner(c)
		if r != nil {
			defer r.Close()
		}
		sweep("containerd", r, err)
	}
	if c.json {
		_ = json.NewEncoder(stdout).Encode(reps)
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		verb := "REMOVED"
		if *dry {
			verb = "WOULD REMOVE"
		}
		fmt.Fprintf(tw, "RUNTIME\t%s\n", verb)
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
	if c.sessionDir != "" {
		opts = append(opts, containerd.WithSessionDir(c.sessionDir))
	}
	return containerd.NewRunner(opts...)
}
