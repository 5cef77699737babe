// Command probe is the probe agent of the conformance suites (package sandboxtest): a
// static binary in a scratch image whose subcommands check, from inside a sandbox, what
// the sandbox allows. Each prints plain lines the tests assert on.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail(2, "usage: agent SUBCOMMAND [ARGS]")
	}
	args := os.Args[2:]
	if !localCommand(os.Args[1], args) && !networkCommand(os.Args[1], args) {
		fail(2, "unknown subcommand "+os.Args[1])
	}
}

// localCommand runs the subcommands that look at or strain the sandbox itself; false
// if cmd is not one of them.
func localCommand(cmd string, args []string) bool {
	switch cmd {
	case "net":
		netInfo()
	case "connect":
		connect(args[0])
	case "stat":
		for _, p := range args {
			if _, err := os.Stat(p); err == nil {
				fmt.Println("exists", p)
			} else {
				fmt.Println("missing", p)
			}
		}
	case "caps":
		caps()
	case "now":
		// The wall clock in Unix nanoseconds, for benchmarks splitting a run's latency
		// at the moment the agent runs (host and sandbox share the clock).
		fmt.Println(time.Now().UnixNano())
	case "euid":
		fmt.Printf("euid=%d uid=%d\n", os.Geteuid(), os.Getuid())
	case "setuid0":
		if err := syscall.Setuid(0); err != nil {
			fmt.Println("setuid0 refused:", err)
		} else {
			fmt.Println("setuid0 succeeded")
		}
	case "forkbomb":
		forkbomb(atoi(args[0]))
	case "memhog":
		memhog()
	case "alloc":
		// Allocate and touch n MiB, hold it for s seconds: a known peak.
		b := make([]byte, atoi(args[0])<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		time.Sleep(time.Duration(atoi(args[1])) * time.Second)
		fmt.Println("held", len(b)>>20)
	case "ticks":
		ticks(args[0])
	case "sleep":
		time.Sleep(time.Duration(atoi(args[0])) * time.Second)
		fmt.Println("slept")
	case "exit":
		os.Exit(atoi(args[0]))
	case "echo":
		fmt.Fprint(os.Stdout, args[0])
		fmt.Fprint(os.Stderr, args[1])
	case "flood":
		flood(atoi(args[0]))
	case "write":
		if err := os.WriteFile(args[0], []byte(args[1]), 0o644); err != nil {
			fail(4, "write failed: "+err.Error())
		}
		fmt.Println("wrote", args[0])
	case "id":
		fmt.Printf("uid=%d gid=%d\n", os.Getuid(), os.Getgid())
	case "cat":
		b, err := os.ReadFile(args[0])
		if err != nil {
			fail(4, err.Error())
		}
		os.Stdout.Write(b)
	case "env":
		for _, e := range os.Environ() {
			fmt.Println(e)
		}
	case "argv":
		for _, a := range args {
			fmt.Printf("[%s]\n", a)
		}
	case "scan":
		scan(strings.Join(args, ""))
	default:
		return false
	}
	return true
}

// networkCommand runs the subcommands that talk to the proxy, a socket or a barrier
// file; false if cmd is not one of them.
func networkCommand(cmd string, args []string) bool {
	switch cmd {
	case "http":
		httpGet(args[0])
	case "post":
		httpPost(args[0], args[1])
	case "reqs":
		rawRequests(args[0])
	case "rawdump":
		rawDump(args[0])
	case "burst":
		burst(atoi(args[0]), args[1:]...)
	case "trailers":
		trailers(args[0], args[1], args[2:]...)
	case "chat":
		chat(args[0], args[1], len(args) > 2 && args[2] == "--spoof")
	case "calls":
		for i := 0; i < atoi(args[0]); i++ {
			chat(args[1], fmt.Sprintf("call-%d", i), false)
		}
	case "hold":
		// One call, then stay alive until the barrier file appears: lets a test hold
		// many sandboxes (and their proxies) alive at the same moment.
		chat(args[1], args[2], false)
		for {
			if _, err := os.Stat(args[0]); err == nil {
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
	case "hold-then":
		// One call, the barrier file, then n more calls: lets a test restart the proxy
		// while the sandbox lives.
		chat(args[1], "before", false)
		for {
			if _, err := os.Stat(args[0]); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		for i := 0; i < atoi(args[2]); i++ {
			chat(args[1], fmt.Sprintf("after-%d", i), false)
		}
	case "serve":
		serve(args[0])
	case "stubborn":
		stubborn()
	case "fill":
		for _, dir := range args[1:] {
			fill(dir, atoi(args[0]))
		}
	case "chatter":
		chatter(args[0], atoi(args[1]))
	case "lines":
		barrier := ""
		if len(args) > 2 {
			barrier = args[2]
		}
		lines(atoi(args[0]), atoi(args[1]), barrier)
	case "stream":
		stream(args[0], args[1], args[2])
	case "plant":
		plant(args[0], args[1])
	case "await":
		// Print to both streams, then wait for the file: only a host that saw the
		// output while the run went on can create it.
		fmt.Fprint(os.Stdout, args[1])
		fmt.Fprint(os.Stderr, args[2])
		for {
			if _, err := os.Stat(args[0]); err == nil {
				fmt.Fprint(os.Stdout, " done")
				return true
			}
			time.Sleep(20 * time.Millisecond)
		}
	default:
		return false
	}
	return true
}

func fail(code int, msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(code)
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fail(2, "not a number: "+s)
	}
	return n
}

func netInfo() {
	ifs, err := net.Interfaces()
	if err != nil {
		fail(4, err.Error())
	}
	for _, i := range ifs {
		fmt.Println("iface", i.Name)
	}
	routes := 0
	for _, f := range []string{"/proc/net/route", "/proc/net/ipv6_route"} {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			if len(fields) == 0 || fields[0] == "Iface" || fields[len(fields)-1] == "lo" {
				continue
			}
			routes++
		}
	}
	fmt.Println("routes", routes)
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil && bytes.Contains(b, []byte("nameserver")) {
		fmt.Println("dns configured")
	}
}

func connect(addr string) {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		fmt.Println("connect failed:", err)
		os.Exit(3)
	}
	c.Close()
	fmt.Println("connected")
}

func caps() {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		fail(4, err.Error())
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		l := s.Text()
		if strings.HasPrefix(l, "Cap") || strings.HasPrefix(l, "NoNewPrivs") || strings.HasPrefix(l, "Seccomp:") {
			fmt.Println(strings.Join(strings.Fields(l), " "))
		}
	}
}

func forkbomb(n int) {
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
	}()
	for i := 0; i < n; i++ {
		c := exec.Command("/agent", "sleep", "60")
		if err := c.Start(); err != nil {
			fmt.Printf("spawned %d\nfork failed: %v\n", i, err)
			return
		}
		procs = append(procs, c)
	}
	fmt.Printf("spawned %d\n", n)
}

func memhog() {
	var keep [][]byte
	for i := 0; ; i++ {
		b := make([]byte, 4<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		keep = append(keep, b)
		if i%16 == 0 {
			fmt.Fprintf(os.Stderr, "allocated %d MiB\n", (i+1)*4)
		}
	}
}

func flood(n int) {
	buf := bytes.Repeat([]byte("x"), 64<<10)
	w := bufio.NewWriter(os.Stdout)
	for n > 0 {
		k := min(n, len(buf))
		w.Write(buf[:k])
		n -= k
	}
	w.Flush()
}

// scan looks for secret in the environment, every process's environ and cmdline, the
// mount table, and every readable file outside /proc, /sys and /dev.
func scan(secret string) {
	hits := 0
	hit := func(where string) { hits++; fmt.Println("found in", where) }
	if strings.Contains(strings.Join(os.Environ(), "\n"), secret) {
		hit("env")
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		for _, f := range []string{"environ", "cmdline", "mountinfo"} {
			if b, err := os.ReadFile(filepath.Join(p, f)); err == nil && bytes.Contains(b, []byte(secret)) {
				hit(filepath.Join(p, f))
			}
		}
	}
	filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (p == "/proc" || p == "/sys" || p == "/dev") {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return nil
		}
		defer f.Close()
		b, _ := io.ReadAll(io.LimitReader(f, 64<<20))
		if bytes.Contains(b, []byte(secret)) {
			hit(p)
		}
		return nil
	})
	if hits == 0 {
		fmt.Println("clean")
		return
	}
	os.Exit(5)
}

// Spoofed attribution an agent might send; the proxy must drop every one of them.
var spoofed = map[string]string{
	"Authorization":                 "Bearer sk-agent-forged",
	"X-Litellm-End-User-Id":         "victim-account",
	"X-Litellm-Customer-Id":         "victim-account",
	"X-Litellm-Spend-Logs-Metadata": `{"run_id":"forged-run"}`,
	"X-Api-Key":                     "agent-forged-key",
	"Cookie":                        "session=forged",
}

func llmRequest(model, content string, streamed, spoof bool) *http.Request {
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"stream":%v,"stream_options":{"include_usage":%v}}`, model, content, streamed, streamed)
	req, err := http.NewRequest("POST", os.Getenv("OPENAI_API_BASE")+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		fail(2, err.Error())
	}
	req.Header.Set("Content-Type", "application/json")
	if spoof {
		for k, v := range spoofed {
			req.Header.Set(k, v)
		}
	}
	return req
}

// chat makes one non-streamed call and prints the status and body.
func chat(model, content string, spoof bool) {
	resp, err := http.DefaultClient.Do(llmRequest(model, content, false, spoof))
	if err != nil {
		fail(3, "llm call failed: "+err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("status %d\n%s\n", resp.StatusCode, bytes.TrimSpace(b))
}

// stream makes one streamed call. For each SSE event it prints a line and writes an
// acknowledgement file in ackDir, so a test's upstream can hold chunk k+1 until the
// agent has seen chunk k: proof that chunks arrive one by one, with no timing.
func stream(model, content, ackDir string) {
	resp, err := http.DefaultClient.Do(llmRequest(model, content, true, false))
	if err != nil {
		fail(3, "llm call failed: "+err.Error())
	}
	defer resp.Body.Close()
	fmt.Printf("status %d\n", resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		fmt.Println(line)
		if err := os.WriteFile(filepath.Join(ackDir, fmt.Sprintf("chunk-%d", n)), []byte(line), 0o644); err != nil {
			fail(4, "ack: "+err.Error())
		}
		n++
	}
	if err := sc.Err(); err != nil {
		fail(3, "stream broken: "+err.Error())
	}
	fmt.Printf("events %d\n", n)
}

// readRequests reads a JSON-lines file of requests ({"method","path","headers",
// "body"}) and returns each as written on the wire: no client normalises the path
// or the header names. A file it cannot read fails the probe (exit 4).
func readRequests(file string) [][]byte {
	b, err := os.ReadFile(file)
	if err != nil {
		fail(4, err.Error())
	}
	var reqs [][]byte
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r struct {
			Method, Path, Body string
			Headers            [][2]string
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			fail(4, "bad request line: "+err.Error())
		}
		var req bytes.Buffer
		fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: llm\r\nConnection: close\r\nContent-Length: %d\r\n", r.Method, r.Path, len(r.Body))
		for _, h := range r.Headers {
			fmt.Fprintf(&req, "%s: %s\r\n", h[0], h[1])
		}
		req.WriteString("\r\n" + r.Body)
		reqs = append(reqs, req.Bytes())
	}
	return reqs
}

// rawRequests sends each request of a JSON-lines file ({"method","path","headers",
// "body"}) to the bridge as written (no client normalises the path or the header
// names) and prints "req N status S" per request.
func rawRequests(file string) {
	for i, req := range readRequests(file) {
		status := "error"
		if c, err := net.DialTimeout("tcp", "127.0.0.1:8080", 5*time.Second); err == nil {
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := c.Write(req); err == nil {
				if l, err := bufio.NewReader(c).ReadString('\n'); err == nil {
					if f := strings.Fields(l); len(f) >= 2 {
						status = f[1]
					}
				}
			}
			c.Close()
		}
		fmt.Printf("req %d status %s\n", i, status)
	}
}

// rawDump sends each request of file (as rawRequests) and prints, one JSON line
// each, everything the bridge answered on the connection until it closed: every
// status line and header the agent's HTTP client could parse, informational and
// upgraded answers and what follows them included.
func rawDump(file string) {
	for i, req := range readRequests(file) {
		var out struct {
			I   int    `json:"i"`
			Raw string `json:"raw"`
			Err string `json:"err,omitempty"`
		}
		out.I = i
		if c, err := net.DialTimeout("tcp", "127.0.0.1:8080", 5*time.Second); err != nil {
			out.Err = err.Error()
		} else {
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := c.Write(req); err != nil {
				out.Err = err.Error()
			}
			raw, err := io.ReadAll(io.LimitReader(c, 1<<20))
			if err != nil {
				out.Err = err.Error()
			}
			out.Raw = string(raw)
			c.Close()
		}
		j, _ := json.Marshal(out)
		fmt.Println(string(j))
	}
}

// burst posts the bodies (in turn) to /v1/chat/completions n times at once
// and prints how many answers had each status ("status 200 x12").
func burst(n int, bodies ...string) {
	c := &http.Client{Timeout: 60 * time.Second}
	counts := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(body string) {
			defer wg.Done()
			st := "error"
			if resp, err := c.Post("http://127.0.0.1:8080/v1/chat/completions", "application/json", strings.NewReader(body)); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				st = strconv.Itoa(resp.StatusCode)
			}
			mu.Lock()
			counts[st]++
			mu.Unlock()
		}(bodies[i%len(bodies)])
	}
	wg.Wait()
	for st, k := range counts {
		fmt.Printf("status %s x%d\n", st, k)
	}
}

// trailers posts body to path as one chunk followed by the trailers given as
// name=value, then prints the status, every response trailer ("trailer K: V"),
// a trailer announcement ("announced V") and the body.
func trailers(path, body string, kv ...string) {
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST %s HTTP/1.1\r\nHost: llm\r\nConnection: close\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n", path)
	var names []string
	for _, p := range kv {
		n, _, _ := strings.Cut(p, "=")
		names = append(names, n)
	}
	fmt.Fprintf(&req, "Trailer: %s\r\n\r\n%x\r\n%s\r\n0\r\n", strings.Join(names, ", "), len(body), body)
	for _, p := range kv {
		n, v, _ := strings.Cut(p, "=")
		fmt.Fprintf(&req, "%s: %s\r\n", n, v)
	}
	req.WriteString("\r\n")
	c, err := net.DialTimeout("tcp", "127.0.0.1:8080", 5*time.Second)
	if err != nil {
		fail(3, "dial: "+err.Error())
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(req.Bytes()); err != nil {
		fail(3, "write: "+err.Error())
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		fail(3, "read: "+err.Error())
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		fail(3, "read body: "+err.Error())
	}
	fmt.Printf("status %d\n", resp.StatusCode)
	if a := resp.Header.Get("Trailer"); a != "" {
		fmt.Printf("announced %s\n", a)
	}
	for k, vs := range resp.Trailer {
		for _, v := range vs {
			fmt.Printf("trailer %s: %s\n", k, v)
		}
	}
	fmt.Printf("%s\n", b)
}

// httpPost posts a JSON body and prints the status and the answer.
func httpPost(url, body string) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		fail(3, "http failed: "+err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("status %d\n%s\n", resp.StatusCode, b)
}

func httpGet(url string) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fail(3, "http failed: "+err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("status %d\n%s\n", resp.StatusCode, b)
}

// plant leaves what a hostile agent would in dir for the host to clean up: links out
// (absolute and relative, to target: a canary directory of the host's test, never a
// real system path, since a host that follows them runs as root), a FIFO, and a tree
// it locks with mode 0.
func plant(dir, target string) {
	must := func(err error) {
		if err != nil {
			fail(4, "plant: "+err.Error())
		}
	}
	must(os.Symlink(target, filepath.Join(dir, "root-link")))
	must(os.Symlink("../../../../../../../../.."+target, filepath.Join(dir, "up-link")))
	must(syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o600))
	must(os.MkdirAll(filepath.Join(dir, "locked", "inner"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "locked", "inner", "f"), []byte("x"), 0o000))
	must(os.Chmod(filepath.Join(dir, "locked", "inner"), 0))
	must(os.Chmod(filepath.Join(dir, "locked"), 0))
	fmt.Println("planted")
}

// chatter writes n numbered 4 KiB lines to stdout, one every 20 ms, recording each
// line's number in the file progress once written (so a host can tell a blocked
// writer from a slow reader), then says so and stays alive.
func chatter(progress string, n int) {
	pad := strings.Repeat("x", 4096-len("line 000000 ")-1)
	for i := 0; i < n; i++ {
		fmt.Fprintf(os.Stdout, "line %06d %s\n", i, pad)
		_ = os.WriteFile(progress, []byte(strconv.Itoa(i+1)), 0o644)
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Fprintln(os.Stdout, "chatter done")
	for {
		time.Sleep(time.Hour)
	}
}

// fill writes 1 MiB chunks into a new file in dir until a write fails or max MiB are
// written, then prints "DIR filled N MiB" and the error, if any.
func fill(dir string, max int) {
	f, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		fmt.Printf("%s filled 0 MiB: %v\n", dir, err)
		return
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte("f"), 1<<20)
	n := 0
	for ; n < max; n++ {
		if _, err := f.Write(chunk); err != nil {
			fmt.Printf("%s filled %d MiB: %v\n", dir, n, err)
			return
		}
	}
	fmt.Printf("%s filled %d MiB\n", dir, n)
}
