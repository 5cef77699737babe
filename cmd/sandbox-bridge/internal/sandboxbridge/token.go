package sandboxbridge

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// Token mode: a shared proxy daemon (cmd/sandbox-proxyd) puts the run's token in
// the socket directory; the bridge then adds it to every request as
// X-Run-Token, which takes an HTTP-aware forward path. Without the file the
// bridge forwards raw bytes, as it always did.
// The names are bridgeapi.TokenFile and bridgeapi.TokenHeader.
const maxTokenLen = 512

// readRunToken returns the token in the socket's directory, or "" when there is
// none. A file that is not a plausible token is ignored (and logged).
func readRunToken(socket string, log *slog.Logger) string {
	f, err := os.Open(filepath.Join(filepath.Dir(socket), bridgeapi.TokenFile))
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.Warn("bridge: cannot read the run token", slog.Any("err", err))
		}
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenLen+1))
	tok := strings.TrimSpace(string(b))
	if err != nil || tok == "" || len(tok) > maxTokenLen || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }) {
		log.Warn("bridge: the run token file does not hold a token; forwarding without one")
		return ""
	}
	return tok
}

// setRunToken adds the run's token, if there is one, to a request of the bridge's own.
func setRunToken(req *http.Request, socket string) {
	if tok := readRunToken(socket, slog.New(slog.DiscardHandler)); tok != "" {
		req.Header.Set(bridgeapi.TokenHeader, tok)
	}
}

// relay is what Run starts on its listener: the raw forwarder or the token one.
type relay interface {
	serve()
	close()
}

// newRelay picks the forward path: HTTP with the run token when the socket's
// directory holds one, raw bytes otherwise.
func newRelay(ln net.Listener, socket string, log *slog.Logger) relay {
	if tok := readRunToken(socket, log); tok != "" {
		return newTokenForwarder(ln, socket, tok, log)
	}
	return newForwarder(ln, socket, log)
}

// tokenForwarder is an HTTP reverse proxy to the socket that sets X-Run-Token
// on every request (replacing any the agent sent) and flushes every write, so
// event streams pass unbuffered.
type tokenForwarder struct {
	ln     net.Listener
	srv    *http.Server
	tr     *http.Transport
	served chan struct{}
}

func newTokenForwarder(ln net.Listener, socket, token string, log *slog.Logger) *tokenForwarder {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: dialTimeout}).DialContext(ctx, "unix", socket)
		},
		Proxy:               nil,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "llm"
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(bridgeapi.TokenHeader, token)
		},
		Transport:     tr,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			resp.Body = &cutReporter{ReadCloser: resp.Body, ctx: resp.Request.Context(), log: log}
			return nil
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("bridge: cannot reach the LLM proxy socket", slog.String("socket", socket), slog.Any("err", err))
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, `{"error":{"message":"bridge: the LLM proxy cannot be reached","type":"upstream_error","param":null,"code":"502"}}`+"\n")
		},
	}
	return &tokenForwarder{ln: ln, tr: tr, served: make(chan struct{}), srv: &http.Server{
		Handler:           rp,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}}
}

func (f *tokenForwarder) serve() {
	defer close(f.served)
	_ = f.srv.Serve(f.ln)
}

func (f *tokenForwarder) close() {
	_ = f.srv.Close()
	<-f.served
	f.tr.CloseIdleConnections()
}

// cutReporter warns once when the LLM proxy's answer ends early while the agent
// still waits for it: a stream cut mid-body then names the hop that broke (the
// agent's side going away cancels ctx first, and is not reported).
type cutReporter struct {
	io.ReadCloser
	ctx    context.Context
	log    *slog.Logger
	warned bool
}

func (c *cutReporter) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if err != nil && err != io.EOF && c.ctx.Err() == nil && !c.warned {
		c.warned = true
		c.log.Warn("bridge: the LLM proxy's answer was cut before its end", slog.Any("err", err))
	}
	return n, err
}
