package gateway

import (
	"regexp"
	"strings"
)

// DefaultAgentID is the agent a session key without an "agent:" prefix belongs to
// when no agent is named.
const DefaultAgentID = "main"

// agentIDPattern is the gateway's notion of a canonical agent id.
var agentIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// ValidAgentID reports whether id is an agent id the gateway keeps as given
// (letters, digits, '_' and '-', starting with a letter or digit, at most 64).
func ValidAgentID(id string) bool { return agentIDPattern.MatchString(id) }

// CanonicalSessionKey returns the form in which the gateway names a session in
// its events: trimmed and lowercased, and prefixed with "agent:<agentID>:" unless
// it already starts with "agent:" (agentID defaults to DefaultAgentID). The
// special keys "global" and "unknown" stay as they are. It returns "" for an
// empty key.
//
// OpenClaw keeps the case of some channel peer ids (signal:, matrix:) inside
// keys; the client compares keys case-insensitively, so such keys still match.
func CanonicalSessionKey(agentID, key string) string {
	k := strings.ToLower(strings.TrimSpace(key))
	if k == "" {
		return ""
	}
	if k == "global" || k == "unknown" || strings.HasPrefix(k, "agent:") {
		return k
	}
	a := strings.ToLower(strings.TrimSpace(agentID))
	if a == "" {
		a = DefaultAgentID
	}
	return "agent:" + a + ":" + k
}

// sameSessionKey compares a key from an event with a run's canonical key; an
// empty key never matches.
func sameSessionKey(agentID, fromEvent, canonical string) bool {
	fromEvent = strings.TrimSpace(fromEvent)
	if fromEvent == "" || canonical == "" {
		return false
	}
	if strings.EqualFold(fromEvent, canonical) { // the usual case, without allocating
		return true
	}
	return CanonicalSessionKey(agentID, fromEvent) == strings.ToLower(canonical)
}
