package main

import (
	"context"
	"fmt"
	"io"

	"github.com/agentsandbox/sandbox/bridge"
)

// cmdBridge builds the in-sandbox bridge into the cache sandbox.Open reads
// (bridge.Build) and prints its path: run at a released version where a Go
// toolchain is (an image's build step), it seeds the cache for hosts without one.
func cmdBridge(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := newFlags("bridge", stderr, &c)
	dir := fs.String("dir", "", "cache `directory` (default the library's, "+bridge.DefaultDir()+")")
	if code, ok := parse(fs, args, 0, 0, stderr, ""); !ok {
		return code
	}
	p, err := bridge.Build(ctx, *dir)
	if err != nil {
		return errCode(stderr, "bridge", err)
	}
	fmt.Fprintln(stdout, p)
	return exitOK
}
