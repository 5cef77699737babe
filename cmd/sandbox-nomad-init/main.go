// Command sandbox-nomad-init is the first process of a sandbox on Nomad: it gives the
// sandbox the environment its run asked for and waits for the run's LLM proxy, then
// replaces itself (execve) with its argv, normally the sandbox bridge.
//
//	sandbox-nomad-init [-keep NAME,NAME...] [-wait SOCKET] [-wait-timeout D] -- argv...
//
// Nomad adds its own variables (NOMAD_ALLOC_ID, NOMAD_TASK_DIR, ...) to every task's
// environment and has no setting to leave them out; the environment the agent sees is
// made of the names in -keep plus PATH, HOME and HOSTNAME only. With -wait it dials
// the unix socket until it accepts a connection (or -wait-timeout passes): Nomad starts
// the sandbox task once the proxy's sidecar task runs, not once it listens.
//
// It exits 125 (as the bridge does) when it cannot start argv.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

func main() {
	fs := flag.NewFlagSet("sandbox-nomad-init", flag.ContinueOnError)
	keep := fs.String("keep", "", "comma-separated `names` of the variables to keep (besides PATH, HOME, HOSTNAME)")
	wait := fs.String("wait", "", "unix `socket` to wait for before starting argv")
	waitTimeout := fs.Duration("wait-timeout", 30*time.Second, "how long to wait for -wait")
	if err := fs.Parse(os.Args[1:]); err != nil || fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: sandbox-nomad-init [-keep NAMES] [-wait SOCKET] -- argv...")
		os.Exit(125)
	}
	keepSet := map[string]bool{"PATH": true, "HOME": true, "HOSTNAME": true}
	for _, k := range strings.Split(*keep, ",") {
		if k != "" {
			keepSet[k] = true
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if keepSet[name] {
			env = append(env, kv)
		}
	}
	if *wait != "" {
		waitFor(*wait, *waitTimeout)
	}
	argv := fs.Args()
	err := syscall.Exec(argv[0], argv, env)
	fmt.Fprintf(os.Stderr, "sandbox-nomad-init: exec %s: %v\n", argv[0], err)
	os.Exit(125)
}

// waitFor dials socket until it accepts a connection or timeout passes; the command
// starts either way (the bridge reports what fails later).
func waitFor(socket string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for d := 5 * time.Millisecond; ; d = min(2*d, 200*time.Millisecond) {
		c, err := net.DialTimeout("unix", socket, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "sandbox-nomad-init: %s did not accept connections in %v: %v\n", socket, timeout, err)
			return
		}
		time.Sleep(d)
	}
}
