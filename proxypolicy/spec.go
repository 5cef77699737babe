package proxypolicy

import (
	"net/url"

	"github.com/agentsandbox/sandbox/port"
)

// ValidateSpec checks a proxy spec as every proxy built on this policy does before
// it starts (the in-process proxy, the shared daemon, the Nomad sidecar): the run,
// key and attribution (NewPolicy), the upstream (an http or https URL with a host
// and nothing else), the budget and the labels. It returns the policy and the
// parsed upstream. Errors wrap port.ErrInvalidSpec.
func ValidateSpec(spec port.ProxySpec) (*Policy, *url.URL, error) {
	policy, err := NewPolicy(spec)
	if err != nil {
		return nil, nil, err
	}
	u, err := url.Parse(spec.Upstream)
	switch {
	case err != nil:
		return nil, nil, port.Invalidf("upstream %q is not a URL", spec.Upstream)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, nil, port.Invalidf("upstream %q is not an http or https URL", spec.Upstream)
	case u.Host == "" || u.Opaque != "":
		return nil, nil, port.Invalidf("upstream %q has no host", spec.Upstream)
	case u.User != nil:
		return nil, nil, port.Invalidf("upstream URL has user info; pass the key as the API key")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, nil, port.Invalidf("upstream %q has a query or fragment", spec.Upstream)
	}
	if spec.Budget.MaxCalls < 0 || spec.Budget.MaxTokens < 0 {
		return nil, nil, port.Invalidf("budget is negative")
	}
	if err := port.ValidateLabels(spec.Labels); err != nil {
		return nil, nil, err
	}
	return policy, u, nil
}
