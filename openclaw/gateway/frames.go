package gateway

import "encoding/json"

// Protocol versions this client speaks. The current gateway speaks 4 and refuses
// clients whose range excludes it; 3 is kept so older gateways still answer.
const (
	MinProtocol = 3
	MaxProtocol = 4
)

// Frame types on the wire.
const (
	frameReq   = "req"
	frameRes   = "res"
	frameEvent = "event"
)

// Event names the client understands.
const (
	eventChallenge = "connect.challenge"
	eventTick      = "tick"
	eventShutdown  = "shutdown"
	eventChat      = "chat"
	eventAgent     = "agent"
)

// requestFrame is {type:"req", id, method, params}.
type requestFrame struct {
	Type   string `json:"type"`
	ID     string `json:"id"`
	Method string `json:"method"`
	Params any    `json:"params,omitempty"`
}

// errorShape is the gateway's error object.
type errorShape struct {
	Code         string          `json:"code"`
	Message      string          `json:"message"`
	Details      json.RawMessage `json:"details,omitempty"`
	Retryable    bool            `json:"retryable,omitempty"`
	RetryAfterMs int64           `json:"retryAfterMs,omitempty"`
}

// inFrame is the union of the three frame kinds as received. Payloads stay raw
// and are decoded loosely by whoever consumes them: the gateway sends fields
// beyond its own schema.
type inFrame struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	OK      bool            `json:"ok,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Error   *errorShape     `json:"error,omitempty"`
	Event   string          `json:"event,omitempty"`
	Seq     *int64          `json:"seq,omitempty"`
}

// response is one res frame delivered to a waiting call.
type response struct {
	ok      bool
	payload json.RawMessage
	err     *errorShape
}

// ClientInfo identifies this client to the gateway. ID and Mode are enums on the
// gateway side: ("gateway-client", "backend") is the pair meant for server-side
// integrations and, on loopback with a shared token, needs no device pairing.
type ClientInfo struct {
	ID       string `json:"id"`
	Version  string `json:"version"`
	Platform string `json:"platform"`
	Mode     string `json:"mode"`
}

type connectAuth struct {
	Token string `json:"token,omitempty"`
}

// connectParams is the closed connect schema; only fields it allows are sent.
type connectParams struct {
	MinProtocol int          `json:"minProtocol"`
	MaxProtocol int          `json:"maxProtocol"`
	Client      ClientInfo   `json:"client"`
	Role        string       `json:"role,omitempty"`
	Scopes      []string     `json:"scopes,omitempty"`
	Caps        []string     `json:"caps,omitempty"`
	Auth        *connectAuth `json:"auth,omitempty"`
}

// Hello is what the gateway said when it accepted the connection (the hello-ok
// payload), decoded loosely.
type Hello struct {
	// Protocol is the negotiated protocol version.
	Protocol int `json:"protocol"`
	// Server identifies the gateway build and this connection.
	Server struct {
		Version string `json:"version"`
		ConnID  string `json:"connId"`
	} `json:"server"`
	// Features lists the methods and events the gateway offers.
	Features struct {
		Methods []string `json:"methods"`
		Events  []string `json:"events"`
	} `json:"features"`
	// Policy carries the limits the gateway enforces.
	Policy struct {
		// MaxPayload is the largest frame the gateway accepts, in bytes.
		MaxPayload int64 `json:"maxPayload"`
		// MaxBufferedBytes is the gateway's send buffer limit per connection.
		MaxBufferedBytes int64 `json:"maxBufferedBytes"`
		// TickIntervalMs is the period of the gateway's tick events.
		TickIntervalMs int64 `json:"tickIntervalMs"`
	} `json:"policy"`
	// Auth echoes the granted role and scopes.
	Auth struct {
		Method string   `json:"method"`
		Role   string   `json:"role"`
		Scopes []string `json:"scopes"`
	} `json:"auth"`
}

// HasMethod reports whether the gateway advertised method.
func (h *Hello) HasMethod(method string) bool {
	for _, m := range h.Features.Methods {
		if m == method {
			return true
		}
	}
	return false
}
