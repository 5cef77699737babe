package openclaw

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// owned is a config path whose value only the builder sets: any setting that
// leaves it different from the generated value is refused.
type owned struct {
	path   string
	inv    Invariant
	why    string
	secret bool // never echo the value in errors
}

type rules struct {
	owned   []owned
	agentID string
	deny    []string // every entry must stay in tools.deny and out of every allow list
}

func (c *config) rules() rules {
	a := "agents.entries." + c.agentID
	return rules{
		agentID: c.agentID,
		deny:    sortedSet(RequiredDeny(c.gateway != nil), c.deny),
		owned: []owned{
			{path: "models", inv: InvSingleProvider, why: "the one provider (the LLM proxy), its base URL and catalog come from WithModels and WithBaseURL; models.mode stays \"replace\", catalog refresh stays off"},
			{path: "proxy", inv: InvOffline, why: "a forward proxy could route traffic around the LLM proxy"},
			{path: "update", inv: InvOffline, why: "update checks stay off: start-up must not reach the network"},
			{path: "discovery.mdns.mode", inv: InvOffline, why: "mDNS advertisement stays off"},
			{path: "cron.enabled", inv: InvCronOff, why: "OpenClaw's scheduler stays off; the host schedules runs"},
			{path: "tools.elevated.enabled", inv: InvElevatedOff, why: "elevated mode bypasses tool policy"},
			{path: "agents.defaults.elevatedDefault", inv: InvElevatedOff, why: "elevated mode bypasses tool policy"},
			{path: "agents.defaults.sandbox.mode", inv: InvSandboxOff, why: "OpenClaw's own sandbox needs a container runtime the sandbox does not have"},
			{path: "agents.defaults.heartbeat.every", inv: InvHeartbeatOff, why: "heartbeats must stay \"0m\": they make unattributed LLM calls and leak HEARTBEAT_OK into broadcast events"},
			{path: "agents.defaults.model", inv: InvSingleProvider, why: "the model must be a catalog model of the proxy provider: use WithDefaultModel"},
			{path: "agents.defaults.workspace", inv: InvSingleAgent, why: "use WithWorkspace"},
			{path: "agents.list", inv: InvSingleAgent, why: "agents.list is the legacy roster; the agent lives under keyed agents.entries"},
			{path: "agents.ownership", inv: InvSingleAgent, why: "there is exactly one agent"},
			{path: a + ".model", inv: InvSingleProvider, why: "the agent uses the default model of the proxy provider: use WithDefaultModel"},
			{path: a + ".workspace", inv: InvSingleAgent, why: "use WithWorkspace"},
			{path: "gateway.mode", inv: InvGatewayAuth, why: "the gateway mode comes from the builder"},
			{path: "gateway.port", inv: InvGatewayAuth, why: "use WithGateway"},
			{path: "gateway.bind", inv: InvGatewayAuth, why: "use WithGateway"},
			{path: "gateway.customBindHost", inv: InvGatewayAuth, why: "use WithGateway"},
			{path: "gateway.auth", inv: InvGatewayAuth, why: "token auth comes from WithGateway", secret: true},
			{path: "gateway.remote", inv: InvGatewayAuth, why: "no remote gateway", secret: true},
			{path: "gateway.tailscale", inv: InvGatewayAuth, why: "the gateway is not exposed beyond its bind address"},
			{path: "gateway.trustedProxies", inv: InvGatewayAuth, why: "no proxy may vouch for clients"},
			{path: "gateway.controlUi.enabled", inv: InvGatewayAuth, why: "the Control UI stays off"},
		},
	}
}

// check verifies tree against the invariants; base is the generated config and
// setting names what is being applied, for the error.
func (r rules) check(tree, base map[string]any, setting string) error {
	for _, o := range r.owned {
		keys := strings.Split(o.path, ".")
		got, gok := lookup(tree, keys)
		want, wok := lookup(base, keys)
		if gok == wok && (!gok || equal(got, want)) {
			continue
		}
		reason := "would change " + o.path
		switch {
		case !gok:
			reason = "would remove " + o.path
		case !o.secret:
			reason += " to " + show(got)
		}
		return &SettingError{Setting: setting, Invariant: o.inv, Reason: reason + ": " + o.why}
	}

	entries, _ := lookup(tree, []string{"agents", "entries"})
	em, ok := entries.(map[string]any)
	if !ok || len(em) != 1 || em[r.agentID] == nil {
		keys := []string{}
		for k := range em {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return &SettingError{Setting: setting, Invariant: InvSingleAgent, Reason: fmt.Sprintf("agents.entries must hold exactly the agent %q, has %q", r.agentID, keys)}
	}
	if _, ok := em[r.agentID].(map[string]any); !ok {
		return &SettingError{Setting: setting, Invariant: InvSingleAgent, Reason: "agents.entries." + r.agentID + " is not an object"}
	}
	a := []string{"agents", "entries", r.agentID}
	perAgent := []struct {
		keys []string
		ok   func(any) bool
		inv  Invariant
		why  string
	}{
		{append(a, "sandbox", "mode"), func(v any) bool { return v == "off" }, InvSandboxOff, "the agent's sandbox mode must be \"off\""},
		{append(a, "heartbeat", "every"), func(v any) bool { return v == "0m" }, InvHeartbeatOff, "the agent's heartbeat must be \"0m\""},
		{append(a, "tools", "elevated", "enabled"), func(v any) bool { return v == false }, InvElevatedOff, "the agent's elevated tools must stay off"},
		{append(a, "runtime"), func(any) bool { return false }, InvSingleAgent, "the agent runs on OpenClaw's embedded runtime, not an external harness"},
	}
	for _, p := range perAgent {
		if v, ok := lookup(tree, slices.Clip(p.keys)); ok && !p.ok(v) {
			return &SettingError{Setting: setting, Invariant: p.inv, Reason: fmt.Sprintf("%s is %s: %s", strings.Join(p.keys, "."), show(v), p.why)}
		}
	}

	deny, _ := lookup(tree, []string{"tools", "deny"})
	have := strList(deny)
	for _, t := range r.deny {
		if !slices.Contains(have, t) {
			return &SettingError{Setting: setting, Invariant: InvToolDeny, Reason: fmt.Sprintf("tools.deny must keep %q (required: %q)", t, r.deny)}
		}
	}
	for _, allow := range [][]string{
		{"tools", "allow"}, {"tools", "alsoAllow"}, {"gateway", "tools", "allow"},
		append(slices.Clip(a), "tools", "allow"), append(slices.Clip(a), "tools", "alsoAllow"),
	} {
		v, ok := lookup(tree, allow)
		if !ok {
			continue
		}
		for _, t := range strList(v) {
			if slices.Contains(r.deny, t) {
				return &SettingError{Setting: setting, Invariant: InvToolDeny, Reason: fmt.Sprintf("%s allows %q, which must stay denied", strings.Join(allow, "."), t)}
			}
		}
	}
	return nil
}

func strList(v any) []string {
	s, _ := v.([]any)
	out := make([]string, 0, len(s))
	for _, x := range s {
		if t, ok := x.(string); ok {
			out = append(out, t)
		}
	}
	return out
}

// show renders a value for an error message, capped.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}
