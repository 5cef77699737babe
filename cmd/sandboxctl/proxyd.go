package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/api/proxydapi"
)

// DefaultAdminSocket is sandbox-proxyd's default -admin-socket.
const DefaultAdminSocket = "/run/agentsandbox-proxyd/admin.sock"

func cmdProxyd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: sandboxctl proxyd runs|usage|audit [flags]")
		return exitUsage
	}
	sub := args[0]
	var c common
	fs := newFlags("proxyd "+sub, stderr, &c)
	sock := fs.String("admin-socket", DefaultAdminSocket, "the daemon's admin `socket`")
	follow := fs.Bool("follow", false, "audit: keep printing records as they are stored, until the run ends or Ctrl-C")
	if err := fs.Parse(args[1:]); err != nil {
		return parseCode(err)
	}
	cli, err := proxyd.NewClient(*sock)
	if err != nil {
		return errCode(stderr, "proxyd", err)
	}
	defer cli.Close()
	switch sub {
	case "runs", "usage":
		if fs.NArg() != 0 {
			return exitUsage
		}
		runs, err := cli.List(ctx)
		if err != nil {
			return errCode(stderr, "proxyd "+sub, err)
		}
		if sub == "runs" {
			printRuns(stdout, c.json, runs)
		} else {
			printUsage(stdout, c.json, runs)
		}
		return exitOK
	case "audit":
		if fs.NArg() != 1 {
			fmt.Fprintln(stderr, "usage: sandboxctl proxyd audit [--follow] [--json] ID")
			return exitUsage
		}
		return proxydAudit(ctx, cli, fs.Arg(0), *follow, c.json, stdout, stderr)
	}
	fmt.Fprintf(stderr, "sandboxctl proxyd: unknown command %q (runs, usage, audit)\n", sub)
	return exitUsage
}

func printRuns(w io.Writer, asJSON bool, runs []proxyd.RunInfo) {
	if asJSON {
		if runs == nil {
			runs = []proxyd.RunInfo{}
		}
		_ = json.NewEncoder(w).Encode(runs)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRUN\tATTEMPT\tAGE\tLAST SEEN\tCALLS\tTOKENS\tWHERE")
	for _, r := range runs {
		where := r.SocketDir
		if r.IP != "" {
			where = r.IP
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s ago\t%d\t%d\t%s\n", r.ID, r.RunID, r.Attempt, age(r.RegisteredAt), age(r.LastSeen), r.Calls, r.Tokens, where)
	}
	tw.Flush()
}

// usageRow is one run's use of its budget; the last row of the table is the total.
type usageRow struct {
	RunID  string `json:"run_id"`
	Calls  int    `json:"calls"`
	Tokens int64  `json:"tokens"`
}

func printUsage(w io.Writer, asJSON bool, runs []proxyd.RunInfo) {
	byRun := map[string]*usageRow{}
	var order []string
	var total usageRow
	for _, r := range runs {
		u := byRun[r.RunID]
		if u == nil {
			u = &usageRow{RunID: r.RunID}
			byRun[r.RunID] = u
			order = append(order, r.RunID)
		}
		u.Calls += r.Calls
		u.Tokens += r.Tokens
		total.Calls += r.Calls
		total.Tokens += r.Tokens
	}
	rows := make([]usageRow, 0, len(order))
	for _, id := range order {
		rows = append(rows, *byRun[id])
	}
	if asJSON {
		_ = json.NewEncoder(w).Encode(map[string]any{"runs": rows, "total": map[string]any{"calls": total.Calls, "tokens": total.Tokens}})
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tCALLS\tTOKENS")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", r.RunID, r.Calls, r.Tokens)
	}
	fmt.Fprintf(tw, "TOTAL (%d runs)\t%d\t%d\n", len(rows), total.Calls, total.Tokens)
	tw.Flush()
}

func proxydAudit(ctx context.Context, cli *proxyd.Client, id string, follow, asJSON bool, stdout, stderr io.Writer) int {
	var tw *tabwriter.Writer
	if !asJSON {
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tSTATUS\tMETHOD\tPATH\tMODEL\tLATENCY\tBLOCKED\tCALL ID")
	}
	enc := json.NewEncoder(stdout)
	print := func(r proxydapi.AuditRecord) {
		if asJSON {
			_ = enc.Encode(r)
			return
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Time.Local().Format("15:04:05.000"), r.Status, r.Method, r.Path, r.Model,
			r.Latency.Round(time.Millisecond), r.Blocked, r.CallID)
		if follow {
			tw.Flush() // each record as it arrives
		}
	}
	if follow {
		err := cli.StreamAudit(ctx, id, 0, func(e proxyd.AuditEntry) error { print(e.Record); return nil })
		if tw != nil {
			tw.Flush()
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			return errCode(stderr, "proxyd audit", err)
		}
		return exitOK
	}
	var after int64
	for {
		page, err := cli.Audit(ctx, id, after)
		if err != nil {
			return errCode(stderr, "proxyd audit", err)
		}
		for _, r := range page.Records {
			print(r)
		}
		if len(page.Records) == 0 || page.Next <= after {
			break
		}
		after = page.Next
	}
	if tw != nil {
		tw.Flush()
	}
	return exitOK
}
