package gatewaytest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// configPath is the file the double claims to run from.
const configPath = "/gatewaytest/openclaw.json"

// WithConfig sets the config the double serves with config.get and changes
// with config.patch (default: an empty object). The double keeps a copy.
func WithConfig(cfg map[string]any) Option {
	return func(s *Server) { s.config = copyJSON(cfg) }
}

// Config returns a copy of the double's current config.
func (s *Server) Config() map[string]any {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	return copyJSON(s.config)
}

// ConfigWrites counts the config.patch requests the double applied.
func (s *Server) ConfigWrites() int {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	return s.cfgWrites
}

// PatchConfig applies a merge patch as another writer would (the config's hash
// changes, so a config.patch based on an earlier config.get is refused).
func (s *Server) PatchConfig(patch map[string]any) {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	s.config = mergePatch(s.config, copyJSON(patch)).(map[string]any)
	s.cfgHash = hashConfig(s.config)
}

func (s *Server) configSnapshot() map[string]any {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	raw, _ := json.Marshal(s.config)
	return map[string]any{
		"path": configPath, "exists": true, "valid": true, "hash": s.cfgHash,
		"raw": string(raw), "config": copyJSON(s.config), "issues": []any{},
	}
}

// configPatch follows the gateway's config.patch: a JSON merge patch in raw,
// guarded by baseHash, refusing to drop array entries outside replacePaths.
func (s *Server) configPatch(c *Conn, req Request) {
	refuse := func(msg string) {
		_ = c.ReplyError(req.ID, Error{Code: "INVALID_REQUEST", Message: msg}, nil)
	}
	var p struct {
		Raw          string   `json:"raw"`
		BaseHash     string   `json:"baseHash"`
		ReplacePaths []string `json:"replacePaths"`
	}
	if err := req.Decode(&p); err != nil || p.Raw == "" {
		refuse("invalid config.patch params: raw (string) required")
		return
	}
	var patch map[string]any
	if err := json.Unmarshal([]byte(p.Raw), &patch); err != nil || patch == nil {
		refuse("config.patch raw must be an object")
		return
	}
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	switch {
	case p.BaseHash == "":
		refuse("config base hash required; re-run config.get and retry")
		return
	case p.BaseHash != s.cfgHash:
		refuse("config changed since last load; re-run config.get and retry")
		return
	}
	next := mergePatch(copyJSON(s.config), patch).(map[string]any)
	if lost := shrunkArrays(s.config, next, "", p.ReplacePaths); len(lost) > 0 {
		refuse(fmt.Sprintf("config.patch would remove entries from array path(s): %s. Pass replacePaths with the exact path(s) when this is intentional, or use config.apply for full replacement.", strings.Join(lost, ", ")))
		return
	}
	changed := changedPaths(s.config, next, "")
	s.config = next
	s.cfgHash = hashConfig(next)
	s.cfgWrites++
	_ = c.Reply(req.ID, map[string]any{
		"ok": true, "path": configPath, "hash": s.cfgHash, "config": copyJSON(next),
		"changedPaths": changed, "restart": map[string]any{"required": false},
	})
}

// modelListed reports whether the config lists provider/model, or lists no
// providers at all (then every model is allowed).
func (s *Server) modelListed(provider, model string) bool {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	models, _ := s.config["models"].(map[string]any)
	providers, _ := models["providers"].(map[string]any)
	if len(providers) == 0 {
		return true
	}
	prov, _ := providers[provider].(map[string]any)
	list, _ := prov["models"].([]any)
	for _, m := range list {
		if e, _ := m.(map[string]any); e["id"] == model {
			return true
		}
	}
	return false
}

// mergePatch applies an RFC 7396 merge patch to target.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = mergePatch(t[k], v)
	}
	return t
}

// shrunkArrays lists the array paths of old that lose entries in next (or
// vanish), except those in allowed.
func shrunkArrays(old, next any, path string, allowed []string) []string {
	switch o := old.(type) {
	case []any:
		n, isArr := next.([]any)
		if (!isArr || len(n) < len(o)) && len(o) > 0 && !slices.Contains(allowed, path) {
			return []string{path}
		}
	case map[string]any:
		n, _ := next.(map[string]any)
		var out []string
		for k, v := range o {
			out = append(out, shrunkArrays(v, n[k], join(path, k), allowed)...)
		}
		slices.Sort(out)
		return out
	}
	return nil
}

// changedPaths lists the leaf paths that differ between old and next.
func changedPaths(old, next any, path string) []string {
	o, oMap := old.(map[string]any)
	n, nMap := next.(map[string]any)
	if old == nil && nMap { // an added object: its leaves changed
		o, oMap = map[string]any{}, true
	}
	if next == nil && oMap { // a removed object
		n, nMap = map[string]any{}, true
	}
	if !oMap || !nMap {
		a, _ := json.Marshal(old)
		b, _ := json.Marshal(next)
		if string(a) == string(b) {
			return nil
		}
		return []string{path}
	}
	var out []string
	for k := range o {
		out = append(out, changedPaths(o[k], n[k], join(path, k))...)
	}
	for k := range n {
		if _, had := o[k]; !had {
			out = append(out, changedPaths(nil, n[k], join(path, k))...)
		}
	}
	slices.Sort(out)
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func hashConfig(cfg map[string]any) string {
	raw, _ := json.Marshal(cfg)
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// copyJSON deep-copies a JSON object through encoding.
func copyJSON(v map[string]any) map[string]any {
	raw, err := json.Marshal(v)
	if err != nil {
		panic("gatewaytest: config is not JSON: " + err.Error())
	}
	out := map[string]any{}
	_ = json.Unmarshal(raw, &out)
	return out
}
