package egress

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentsandbox/sandbox/port"
)

// rule is one allowed URI prefix of a provider.
type rule struct {
	scheme string
	host   string
	port   int
	prefix string // "" or "/..." (decoded, canonical)
}

// provider is a compiled port.EgressProvider.
type provider struct {
	id         string
	rules      []rule
	creds      map[string]bool
	places     map[string]*placement // by credential; nil entry: the default
	tunnelOnly bool
}

// placement is a compiled port.CredentialPlacement.
type placement struct {
	headers           map[string]bool // canonical names
	path, query, body bool
}

var defaultPlacement = compilePlacement(port.CredentialPlacement{})

func compilePlacement(cp port.CredentialPlacement) *placement {
	pl := &placement{headers: map[string]bool{}, path: cp.Path, query: cp.Query, body: cp.Body}
	hs := cp.Headers
	if len(hs) == 0 {
		hs = port.DefaultCredentialHeaders
	}
	for _, h := range hs {
		pl.headers[http.CanonicalHeaderKey(h)] = true
	}
	return pl
}

// place is where credential name may go.
func (pr *provider) place(name string) *placement {
	if pl := pr.places[name]; pl != nil {
		return pl
	}
	return defaultPlacement
}

// Policy is a compiled port.EgressPolicy.
type Policy struct {
	src       *port.EgressPolicy
	providers []*provider
	byID      map[string]*provider
}

// Compile validates a policy in depth and compiles it. Errors wrap
// port.ErrInvalidSpec.
func Compile(p *port.EgressPolicy) (*Policy, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, port.Invalidf("egress: no policy")
	}
	out := &Policy{src: p, byID: map[string]*provider{}}
	for _, pp := range p.Providers {
		pr := &provider{id: pp.ID, creds: map[string]bool{}, tunnelOnly: pp.TunnelOnly}
		for _, c := range pp.Credentials {
			pr.creds[c] = true
		}
		for name, cp := range pp.Placements {
			if pr.places == nil {
				pr.places = map[string]*placement{}
			}
			pr.places[name] = compilePlacement(cp)
		}
		for _, s := range pp.URIs {
			r, err := compileURI(s)
			if err != nil {
				return nil, port.Invalidf("egress: provider %q: URI %q: %v", pp.ID, s, err)
			}
			if pp.TunnelOnly && r.scheme != "https" {
				return nil, port.Invalidf("egress: provider %q is tunnel-only: only https URIs", pp.ID)
			}
			pr.rules = append(pr.rules, r)
		}
		out.providers = append(out.providers, pr)
		out.byID[pr.id] = pr
	}
	if p.UpstreamProxy != "" {
		if _, err := ParseUpstreamProxy(p.UpstreamProxy); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ParseUpstreamProxy checks an upstream proxy URL (http://host:port, nothing else).
func ParseUpstreamProxy(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, port.Invalidf("egress: upstream proxy %q is not an http://host:port URL without credentials", s)
	}
	return u, nil
}

func compileURI(s string) (rule, error) {
	u, err := url.Parse(s)
	if err != nil {
		return rule{}, err
	}
	var r rule
	switch u.Scheme {
	case "http", "https":
		r.scheme = u.Scheme
	default:
		return r, errString("scheme must be http or https")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return r, errString("no user info, query or fragment")
	}
	name, ip, err := ParseHost(u.Hostname())
	if err != nil {
		return r, err
	}
	if ip.IsValid() {
		return r, errString("IP literals are not allowed; name the host")
	}
	r.host = name
	r.port = defaultPort(r.scheme)
	if ps := u.Port(); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return r, errString("bad port")
		}
		r.port = n
	}
	if u.Path != "" && u.Path != "/" {
		if u.RawPath != "" || !cleanPath(u.Path) {
			return r, errString("path prefix must be canonical")
		}
		r.prefix = u.Path
	}
	return r, nil
}

type errString string

func (e errString) Error() string { return string(e) }

func defaultPort(scheme string) int {
	if scheme == "https" {
		return 443
	}
	return 80
}

// cleanPath reports a path with no dot segments, doubled slashes or backslashes.
func cleanPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.Contains(p, "//") || strings.ContainsRune(p, '\\') {
		return false
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

func (r rule) matchPath(p string) bool {
	if r.prefix == "" {
		return true
	}
	if strings.HasSuffix(r.prefix, "/") {
		return strings.HasPrefix(p, r.prefix)
	}
	return p == r.prefix || strings.HasPrefix(p, r.prefix+"/")
}

// match finds the provider for a destination. pathOK is false for CONNECT (the path
// is not known yet). want restricts the search to one provider (X-Provider).
// It returns the denial when none or several match.
func (p *Policy) match(scheme, host string, portN int, path string, checkPath bool, want string, target string) (*provider, *port.EgressDenial) {
	var found []*provider
	hostSeen, pathSeen := false, false
	for _, pr := range p.providers {
		if want != "" && pr.id != want {
			continue
		}
		for _, r := range pr.rules {
			if r.host != host {
				continue
			}
			hostSeen = true
			if r.scheme != scheme || r.port != portN {
				continue
			}
			if checkPath && !r.matchPath(path) {
				pathSeen = true
				continue
			}
			found = append(found, pr)
			break
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		return nil, &port.EgressDenial{Status: 403, Guard: port.GuardAmbiguous, Target: target, Message: "the destination matches more than one provider; name one with X-Provider"}
	case want != "" && p.byID[want] == nil:
		return nil, &port.EgressDenial{Status: 403, Guard: port.GuardAllowlist, Target: target, Message: "unknown provider"}
	case hostSeen && !pathSeen:
		return nil, &port.EgressDenial{Status: 403, Guard: port.GuardPort, Target: target, Message: "the host is allowed, but not with this scheme, port or path"}
	}
	return nil, &port.EgressDenial{Status: 403, Guard: port.GuardAllowlist, Target: target, Message: "the destination is not on the run's allowlist"}
}
