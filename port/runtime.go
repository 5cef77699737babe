package port

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// ImageLoader loads image archives into the image store a runtime's sandboxes are
// created from.
type ImageLoader interface {
	// LoadImage loads an image archive (as `docker save` writes it, or an OCI
	// layout tar such as agentimage.Image.Archive makes) and returns the names of
	// the images it held, as the runtime stores them. Errors: ErrInvalidSpec for an
	// archive the runtime cannot read; ErrUnavailable when the runtime cannot be
	// reached; ErrUnsupported for a runtime that cannot put images where its
	// sandboxes run (a cluster's nodes), saying how to get them there.
	LoadImage(ctx context.Context, archive io.Reader) ([]string, error)
}

// Runtime is a container runtime as a RuntimeDriver opens it: a SandboxRunner that
// can be checked, loaded with images and closed. Every runtime adapter's Runner is
// one, with the same methods and meaning, so a program swaps runtimes by changing
// the target string it opens.
type Runtime interface {
	SandboxRunner
	ImageLoader
	// Ping checks that the runtime answers. Errors wrap ErrUnavailable.
	Ping(ctx context.Context) error
	// Close releases the runtime's clients; sandboxes still running are not
	// stopped. Close is idempotent.
	Close() error
}

// RuntimeConfig is what every runtime takes, whatever its driver: the parts of a
// Runtime the facade (sandbox.Open) chooses for the host.
type RuntimeConfig struct {
	// Runtime is the OCI runtime the sandboxes run with, by name ("runc", "runsc",
	// "crun"): the same names on every adapter, each resolving a name to what it
	// needs (a registered Docker runtime, a binary for containerd's shim, a
	// Kubernetes RuntimeClass). Empty: the runtime's default (runc). The target's
	// runtime= query sets it.
	Runtime string
	// Owner labels everything the runtime creates; sweeps touch only their owner's
	// resources. Empty: DefaultOwner.
	Owner string
	// Bridge is the host path of the in-sandbox bridge binary (bridge.Build), the
	// entrypoint of runs with LLM access. Empty: none (images bring their own).
	Bridge string
	// Logger receives the runtime's records; nil discards them.
	Logger *slog.Logger
}

// RuntimeInfo is what a driver found when it probed a runtime (RuntimeDriver.Detect).
type RuntimeInfo struct {
	// Address is where the runtime was looked for (a socket, a URL), also when it
	// did not answer.
	Address string
	// Version is the runtime's own version.
	Version string
	// Detail is one line for people: version, address and what matters about the
	// host (cgroup version, operating system).
	Detail string
	// Runtimes are the OCI runtime names the runtime can run sandboxes with.
	Runtimes []string
}

// RuntimeDriver opens the runtimes of one target scheme, as a database/sql driver
// opens connections from a data source name. Runtime adapters register theirs in
// their own init (RegisterRuntime), so a program links only the runtimes it imports.
type RuntimeDriver interface {
	// Open returns a Runtime for target (a URL of the driver's scheme, without the
	// common runtime= query, which is in cfg.Runtime). A query parameter the driver
	// does not know is refused with ErrInvalidSpec naming it. Open may do I/O to
	// prepare what the runtime's nodes need (ctx bounds it), but it does not check
	// that the runtime answers: that is Ping.
	Open(ctx context.Context, target *url.URL, cfg RuntimeConfig) (Runtime, error)
	// Detect probes the runtime at target (the driver's default address when it
	// names none) and says what answered; an error says why not, and its
	// RuntimeInfo still names the address tried. A driver whose runtimes are never
	// chosen without a target (a cluster) returns an error wrapping ErrUnsupported.
	Detect(ctx context.Context, target *url.URL) (RuntimeInfo, error)
}

var (
	driversMu sync.RWMutex
	drivers   = map[string]RuntimeDriver{}
)

var schemeRe = regexp.MustCompile(`^[a-z][a-z0-9+.-]*$`)

// RegisterRuntime makes a runtime driver available under scheme (the target
// string's scheme, "docker" in "docker://"). It panics when scheme is registered
// twice, is not a URL scheme, or d is nil, as database/sql's Register does: it is
// called from adapters' init functions.
func RegisterRuntime(scheme string, d RuntimeDriver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if d == nil {
		panic("port: RegisterRuntime driver is nil")
	}
	if !schemeRe.MatchString(scheme) {
		panic("port: RegisterRuntime scheme " + strconv.Quote(scheme) + " is not a lower-case URL scheme")
	}
	if _, dup := drivers[scheme]; dup {
		panic("port: RegisterRuntime called twice for scheme " + scheme)
	}
	drivers[scheme] = d
}

// RuntimeDrivers returns the registered schemes, sorted.
func RuntimeDrivers() []string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	out := make([]string, 0, len(drivers))
	for s := range drivers {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func driver(scheme string) (RuntimeDriver, bool) {
	driversMu.RLock()
	defer driversMu.RUnlock()
	d, ok := drivers[scheme]
	return d, ok
}

// RuntimeQueryRuntime is the query parameter every target takes: the OCI runtime
// name (RuntimeConfig.Runtime).
const RuntimeQueryRuntime = "runtime"

// detectOrder is the order an empty target tries the local runtimes in: Docker
// first (what most hosts have, and what `docker ps` shows), then containerd; other
// registered drivers after them by scheme.
var detectOrder = []string{"docker", "containerd"}

// OpenRuntime opens the runtime target names with the registered driver of its
// scheme: "docker://", "docker:///var/run/docker.sock",
// "containerd:///run/containerd/containerd.sock?namespace=ns",
// "nomad://127.0.0.1:4646?namespace=..", "kubernetes://?kubeconfig=PATH&namespace=ns",
// each taking the common query runtime=runc|runsc|crun. An empty target picks the
// first runtime this host has (Docker, then containerd, then any other registered
// driver that detects itself; clusters are never picked without a target).
//
// cfg.Runtime and the target's runtime= must not disagree. Credentials are never
// part of a target (they end up in logs): a target with user information is
// refused. Errors: ErrInvalidSpec for a target that does not parse, names a scheme
// no driver registered (the error says which adapter to import) or a query the
// driver does not know; ErrUnavailable when an empty target finds no runtime (the
// error lists what each driver found); the driver's Open errors otherwise.
func OpenRuntime(ctx context.Context, target string, cfg RuntimeConfig) (Runtime, error) {
	if target == "" {
		return detectRuntime(ctx, cfg)
	}
	u, d, err := parseTarget(target)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	if q.Has(RuntimeQueryRuntime) {
		name := q.Get(RuntimeQueryRuntime)
		if len(q[RuntimeQueryRuntime]) > 1 || name == "" {
			return nil, Invalidf("target %s: runtime= must name one OCI runtime (runc, runsc, crun)", redactTarget(u))
		}
		if cfg.Runtime != "" && cfg.Runtime != name {
			return nil, Invalidf("target %s says runtime=%s, the configuration %s", redactTarget(u), name, cfg.Runtime)
		}
		cfg.Runtime = name
		q.Del(RuntimeQueryRuntime)
		u.RawQuery = q.Encode()
	}
	return d.Open(ctx, u, cfg)
}

// parseTarget parses a non-empty target and finds its driver.
func parseTarget(target string) (*url.URL, RuntimeDriver, error) {
	u, err := url.Parse(target)
	if err != nil {
		// url's error quotes the whole string; say only what is wrong.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, nil, Invalidf("target does not parse as a URL: %v", err)
	}
	if u.Scheme == "" || u.Opaque != "" {
		return nil, nil, Invalidf("target %q is not scheme://...: one of %s", target, targetSchemes())
	}
	if u.User != nil {
		return nil, nil, Invalidf("target %s has user information: credentials never go in a target (they end up in logs); give them to the adapter (its environment, or its options)", redactTarget(u))
	}
	d, ok := driver(u.Scheme)
	if !ok {
		return nil, nil, Invalidf("no runtime driver for %q (registered: %s): import github.com/agentsandbox/sandbox/adapters/%s, or adapters/all for every runtime", u.Scheme+"://", targetSchemes(), u.Scheme)
	}
	return u, d, nil
}

// DetectRuntime probes the runtime target names with its driver (the driver's
// default address when the target has only a scheme, "docker://"), as OpenRuntime
// does for an empty target and `sandboxctl doctor` for its report.
func DetectRuntime(ctx context.Context, target string) (RuntimeInfo, error) {
	u, d, err := parseTarget(target)
	if err != nil {
		return RuntimeInfo{}, err
	}
	return d.Detect(ctx, u)
}

func detectRuntime(ctx context.Context, cfg RuntimeConfig) (Runtime, error) {
	schemes := RuntimeDrivers()
	if len(schemes) == 0 {
		return nil, Invalidf("no runtime driver is registered: import github.com/agentsandbox/sandbox/adapters/docker (or containerd, nomad, kubernetes), or adapters/all")
	}
	order := slices.DeleteFunc(slices.Clone(detectOrder), func(s string) bool { return !slices.Contains(schemes, s) })
	for _, s := range schemes {
		if !slices.Contains(order, s) {
			order = append(order, s)
		}
	}
	var found []string
	for _, s := range order {
		d, _ := driver(s)
		u := &url.URL{Scheme: s}
		_, err := d.Detect(ctx, u)
		if errors.Is(err, ErrUnsupported) {
			continue
		}
		if err != nil {
			found = append(found, fmt.Sprintf("%s: %v", s, err))
			continue
		}
		if cfg.Runtime != "" {
			u.RawQuery = url.Values{RuntimeQueryRuntime: {cfg.Runtime}}.Encode()
		}
		return OpenRuntime(ctx, u.String(), cfg)
	}
	if len(found) == 0 {
		return nil, Invalidf("the empty target detects only local runtimes, and no local runtime driver is registered (%s): give a target (%s) or import adapters/docker or adapters/containerd", targetSchemes(), targetSchemes())
	}
	return nil, fmt.Errorf("%w: no container runtime answered on this host (%s); start one, or give a target such as docker:///var/run/docker.sock", ErrUnavailable, strings.Join(found, "; "))
}

func targetSchemes() string {
	s := RuntimeDrivers()
	if len(s) == 0 {
		return "none"
	}
	for i := range s {
		s[i] += "://"
	}
	return strings.Join(s, ", ")
}

// redactTarget is u without user information, for errors.
func redactTarget(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// TargetQuery returns target's query parameters, refusing with ErrInvalidSpec any
// not in known (named in the error, with the ones that are), and any given twice:
// a driver's check that no part of its target is silently ignored.
func TargetQuery(target *url.URL, known ...string) (url.Values, error) {
	q, err := url.ParseQuery(target.RawQuery)
	if err != nil {
		return nil, Invalidf("target %s: query: %v", redactTarget(target), err)
	}
	for k, v := range q {
		if !slices.Contains(known, k) {
			all := append([]string{RuntimeQueryRuntime}, known...)
			return nil, Invalidf("target %s: unknown query parameter %q (known: %s)", redactTarget(target), k, strings.Join(all, ", "))
		}
		if len(v) > 1 {
			return nil, Invalidf("target %s: query parameter %q given %d times", redactTarget(target), k, len(v))
		}
	}
	return q, nil
}
