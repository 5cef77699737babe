package main

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/runner/session"
)

// contractFlags reads the Flag* constants of api/bridgeapi from its source: the
// names the hosts write the bridge's command lines with.
func contractFlags(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "..", "api", "bridgeapi", "argv.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, n := range v.Names {
				if lit, ok := v.Values[i].(*ast.BasicLit); ok && strings.HasPrefix(n.Name, "Flag") {
					flags[n.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
	}
	return flags
}

// TestFlagsAreTheContracts: the bridge defines exactly the flags api/bridgeapi names,
// no more and no fewer, so a host and a bridge built from the same source agree.
func TestFlagsAreTheContracts(t *testing.T) {
	named := contractFlags(t)
	if len(named) < 17 {
		t.Fatalf("found %d Flag constants in api/bridgeapi: %v", len(named), named)
	}
	var o options
	fs := newFlagSet(&o, io.Discard)
	var defined []string
	fs.VisitAll(func(f *flag.Flag) { defined = append(defined, f.Name) })
	var want []string
	for c, v := range named {
		want = append(want, v)
		if fs.Lookup(v) == nil {
			t.Errorf("bridgeapi.%s = %q is no flag of the bridge", c, v)
		}
	}
	sort.Strings(defined)
	sort.Strings(want)
	if strings.Join(defined, " ") != strings.Join(want, " ") {
		t.Errorf("the bridge's flags %v, the contract's %v", defined, want)
	}
}

// TestHostCommandLinesParse: every command line the hosts build (api/bridgeapi's
// builders, the session flags runners insert) parses with the bridge's own flags and
// hands the bridge the command after "--".
func TestHostCommandLinesParse(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	cmd := []string{"/agent", "-x", "--", "y"}
	lines := map[string][]string{
		"prefix":  append(bridgeapi.Prefix("/b", true, time.Minute, now), cmd...),
		"init":    append(bridgeapi.Prefix("/b", false, 0, now), cmd...),
		"egress":  append(bridgeapi.WithEgress(bridgeapi.Prefix("/b", true, time.Minute, now)), cmd...),
		"preload": bridgeapi.PreloadArgs("/b", cmd, "30s"),
		"session": session.InsertFlags(append(bridgeapi.Prefix("/b", true, time.Minute, now), cmd...),
			append(append(session.BridgeFlags([]int{8080, 9090}), session.OutputFlags(1<<20)...), session.MarkFlags(1<<20)...)),
	}
	for name, argv := range lines {
		var o options
		fs := newFlagSet(&o, io.Discard)
		if err := fs.Parse(argv[1:]); err != nil {
			t.Errorf("%s: %q: %v", name, argv, err)
			continue
		}
		if got := fs.Args(); strings.Join(got, "\x00") != strings.Join(cmd, "\x00") {
			t.Errorf("%s: command %q, want %q", name, got, cmd)
		}
	}
}
