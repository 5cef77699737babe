package nginxconf

import (
	"encoding/json"
	"strings"

	"github.com/agentsandbox/sandbox/proxypolicy"
)

// DefaultNJSModule is where Debian (libnginx-mod-http-js) and the nginx images
// (nginx:alpine) keep nginx's JavaScript module, which the proxy loads for its
// response header filter.
const DefaultNJSModule = proxypolicy.DefaultNJSModule

// DefaultScriptPath is where the proxy reads NginxScript (next to its
// configuration).
const DefaultScriptPath = "/etc/llmproxy/llmproxy.js"

// NginxScript is the njs module RenderNginx's configuration imports: the filter
// every forwarded response's header passes before it reaches the sandbox. It
// keeps only the response headers proxypolicy.ResponseHeaders lists (the Go
// fronts' allowlist; stock nginx can only hide headers by name), and it ends
// the call without a byte to the client when the upstream answers with an
// informational status (1xx, 101 included): nginx before 1.29 takes the first
// status line it reads as the final one and relays what follows as the body,
// so a hostile upstream's 100 followed by a 199 carrying hidden headers would
// reach the agent's HTTP client as headers, and a 101 would make the
// connection a tunnel. The Go fronts skip informational answers (and refuse an
// unsolicited 101 with a 502); nginx cannot skip one it has taken as final,
// and njs cannot rewrite its status line, so the call is cut instead (the
// audit record says why). The script holds no secret.
func NginxScript() []byte {
	allowed := map[string]int{}
	for _, h := range proxypolicy.ResponseHeaders() {
		allowed[strings.ToLower(h)] = 1
	}
	names, _ := json.Marshal(allowed) // a map of strings cannot fail
	return []byte(`// Response header filter of the per-run LLM proxy, written by nginxconf.NginxScript.
var allowed = ` + string(names) + `;

function headers(r) {
    if (r.status < 200) {
        r.variables.llmproxy_error = "upstream_informational";
        throw new Error("llmproxy: the upstream answered with status " + r.status + "; the call is cut");
    }
    var names = Object.keys(r.headersOut);
    for (var i = 0; i < names.length; i++) {
        if (allowed[names[i].toLowerCase()] !== 1) {
            delete r.headersOut[names[i]];
        }
    }
}

export default {headers};
`)
}
