// Command sandbox-kube-runtime is a node add-on for the Kubernetes runner
// (adapters/kubernetes): an OCI runtime wrapper that gives a sandbox Pod's containers
// the per-run process limit Kubernetes has no field for and, when asked, removes the
// Pod's network before its container exists, then runs the real runtime.
//
// Install it as the BinaryName of a containerd runtime (the handler of a
// RuntimeClass) with the Pod annotation passed through, for example:
//
//	[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
//	  runtime_type = "io.containerd.runc.v2"
//	  pod_annotations = ["dev.agentsandbox.pids-limit", "dev.agentsandbox.netdown"]
//	  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
//	    BinaryName = "/opt/agentsandbox/runc"
//
// where /opt/agentsandbox/runc is this binary and /opt/agentsandbox/runc.target names
// the real runtime (/usr/sbin/runc). On "create", when the bundle's config.json carries
// the annotation dev.agentsandbox.pids-limit, it sets linux.resources.pids.limit to it
// (never raising one already lower); when it carries dev.agentsandbox.netdown=true
// it enters the container's network namespace (the Pod's) and deletes every interface
// but lo, checking that no route is left, and fails the create otherwise: the agent's
// process never exists with a network, and no container of the Pod needs
// CAP_NET_ADMIN (the runner's WithRuntimeNetworkRemoval). Everything else passes
// through unchanged, with the same arguments, by exec.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentsandbox/sandbox/internal/netdown"
)

// Annotation is the Pod annotation holding the process limit.
const Annotation = "dev.agentsandbox.pids-limit"

// NetdownAnnotation asks for the Pod's network to be removed ("true").
const NetdownAnnotation = "dev.agentsandbox.netdown"

func main() {
	target, err := os.ReadFile(os.Args[0] + ".target")
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-kube-runtime: no target runtime:", err)
		os.Exit(1)
	}
	real := strings.TrimSpace(string(target))
	if !filepath.IsAbs(real) {
		fmt.Fprintln(os.Stderr, "sandbox-kube-runtime: the target runtime must be an absolute path")
		os.Exit(1)
	}
	if bundle, ok := createBundle(os.Args[1:]); ok {
		if err := limitPIDs(filepath.Join(bundle, "config.json")); err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-kube-runtime:", err)
			os.Exit(1)
		}
		if ns, err := netnsToEmpty(filepath.Join(bundle, "config.json")); err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-kube-runtime:", err)
			os.Exit(1)
		} else if ns != "" {
			if err := netdown.In(ns); err != nil {
				fmt.Fprintln(os.Stderr, "sandbox-kube-runtime: removing the pod's network:", err)
				os.Exit(1)
			}
		}
	}
	argv := append([]string{real}, os.Args[1:]...)
	err = syscall.Exec(real, argv, os.Environ())
	fmt.Fprintln(os.Stderr, "sandbox-kube-runtime: exec", real, err)
	os.Exit(1)
}

// createBundle finds the bundle of a "create" (or "run") command line.
func createBundle(args []string) (string, bool) {
	create := false
	bundle := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "create" || a == "run":
			create = true
		case a == "--bundle" || a == "-b":
			if i+1 < len(args) {
				bundle = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--bundle="):
			bundle = strings.TrimPrefix(a, "--bundle=")
		}
	}
	return bundle, create && bundle != ""
}

// limitPIDs sets linux.resources.pids.limit from the annotation, keeping every other
// field of the spec as it is.
func limitPIDs(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	// Numbers stay json.Number: a spec's 64-bit values must survive the round trip.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var spec map[string]any
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	ann, _ := spec["annotations"].(map[string]any)
	v, _ := ann[Annotation].(string)
	if v == "" {
		return nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return fmt.Errorf("annotation %s=%q is not a positive number", Annotation, v)
	}
	linux := obj(spec, "linux")
	res := obj(linux, "resources")
	pids := obj(res, "pids")
	if cur, ok := pids["limit"].(json.Number); ok {
		if c, err := cur.Int64(); err == nil && c > 0 && c <= n {
			return nil
		}
	}
	pids["limit"] = n
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	tmp := path + ".pids"
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// netnsToEmpty returns the network namespace to empty: the spec's, when it carries
// NetdownAnnotation=true; "" when it does not ask, or when the container gets a new
// namespace of its own (which has only lo). Any other value of the annotation is an
// error: a typo must not leave the network in place.
func netnsToEmpty(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
		Linux       struct {
			Namespaces []struct {
				Type string `json:"type"`
				Path string `json:"path"`
			} `json:"namespaces"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	v, ok := spec.Annotations[NetdownAnnotation]
	if !ok {
		return "", nil
	}
	if v != "true" {
		return "", fmt.Errorf("annotation %s=%q, want \"true\"", NetdownAnnotation, v)
	}
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == "network" {
			return ns.Path, nil
		}
	}
	// No network namespace of its own: it would share the node's.
	return "", fmt.Errorf("annotation %s on a container without a network namespace", NetdownAnnotation)
}

func obj(m map[string]any, key string) map[string]any {
	if o, ok := m[key].(map[string]any); ok {
		return o
	}
	o := map[string]any{}
	m[key] = o
	return o
}
