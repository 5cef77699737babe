package egress

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"sync"
)

// The reflection guard. A credential value echoed back by the upstream in the
// response to the request that carried it is replaced by its placeholder before the
// agent sees it. The agent may control what that upstream returns (a stored note, an
// echo), so the guard must not become an oracle on the value:
//
//   - Nothing it holds back, nor when it releases it, depends on a value. It holds the
//     tail of the stream by a rule that reads the content only: everything up to the
//     last CR, LF or NUL byte (no value contains them: such values are refused) is
//     released; of the rest, the last runMax-1 bytes are held, or the last holdAny
//     bytes when the tail holds a byte that may begin an escape ('%', '\\', '&').
//     Held bytes go out when more bytes arrive or at the end. (The guard it replaces
//     held exactly the bytes that could begin a value, so the pause before they came
//     out told the agent which of its guesses was a prefix of the value.)
//   - What it redacts is any run of at least k consecutive characters of a value, in
//     any spelling the guard decodes, anywhere in the stream and also at its end
//     (k = runLen(len(value)): 8 to 16, at most half the value for long ones). A
//     reflection that stops short of the whole value shows at most k-1 characters,
//     and a guess tells the agent anything only when k characters of it are right.
//   - A response in which a run is redacted that is not a whole value (a partial
//     reflection: someone is guessing, or cutting the value) ends there, and the run's
//     later requests that carry a credential are refused (Proxy.withdrawn): an agent
//     learns at most one such run per run, whatever it streams.
//
// Spellings decoded per character: the byte itself; '+' for a space; %XX (either hex
// case); \uXXXX, \u{X...}, \xXX, octal \NNN, the single-letter escapes (\b \f \n \r
// \t \v) and identity escapes (\/, \", \g: the character itself); HTML numeric
// references (&#NN; &#xHH;, with or without ';', any leading zeros) and the named
// references of ASCII characters (with ';', and the legacy &amp &lt &gt &quot without
// it). Any mix within one value. Numeric escapes of more than maxDigits digits are
// refused (errOverlong): with them the guard's look-ahead would be unbounded.

// Run lengths and bounds.
const (
	// runMin is the shortest run of a value that is redacted (values shorter than it
	// are redacted whole): shorter runs are ordinary text too often.
	runMin = 8
	// runMax is the longest run needed: a longer value is redacted from any runMax
	// consecutive characters of it.
	runMax = 16
	// minSecret: shorter values are not redacted (they would mangle ordinary text).
	minSecret = 4
	// maxDigits bounds the digits of a numeric escape (&#..., \u{...}), leading
	// zeros included.
	maxDigits = 32
	// maxSpell is the longest spelling of one character ("&#x" + digits + ";").
	maxSpell = 3 + maxDigits + 1
	// holdAny is the tail held when it may hold escapes: any window of runMax
	// characters ending in it, plus one spelling of slack.
	holdAny = (runMax + 1) * maxSpell
	// ringSlots is how many positions ahead a spelling may end (path states wait
	// there).
	ringSlots = maxSpell + 1
)

// runLen is the run length k redacted for a value of n bytes.
func runLen(n int) int {
	if n <= runMin {
		return n
	}
	return min(runMax, max(runMin, (n+1)/2))
}

// Errors that end a response.
var (
	// errPartialReflection: a run of a value that is not the whole value was
	// redacted in the response.
	errPartialReflection = errors.New("the response reflected part of a credential (a run of its characters that is not the whole value): the response was cut and the run's credentials are withdrawn")
	// errOverlong: a numeric escape with more digits than the guard reads.
	errOverlong = errors.New("the response holds a numeric character escape longer than the reflection guard reads")
)

// Redactor replaces credential values by their placeholders in one response: its
// header names and values, and its body as a stream. It is not safe for concurrent
// use; a nil Redactor passes everything through.
type Redactor struct {
	secrets []*secret
	body    *scanner
	short   *scanner // reused for header names and values (each is read whole)
	// Count is the number of redacted runs so far.
	Count int
}

// secret is one compiled value.
type secret struct {
	repl []byte
	n, k int32
	sam  *automaton // of the value
	fsam *automaton // of the value lower-cased, for header names
}

// NewRedactor returns a Redactor for vals (name to value); nil when there is nothing
// to redact.
func NewRedactor(vals map[string]string) *Redactor { return (*Compiled)(nil).Redactor(vals) }

// Compiled keeps the compiled values of one run (a value's automaton costs most of a
// small response's guard, and a run's values rarely change), at most maxCompiled; a
// nil *Compiled compiles every time. Safe for concurrent use: a compiled value is
// only read.
type Compiled struct {
	mu   sync.Mutex
	secs map[[2]string]*secret
}

// maxCompiled bounds a run's compiled values: a credential source that hands out a
// new value per request makes the cache start over instead of growing.
const maxCompiled = 64

// compile returns name's value compiled, from the cache when it has it.
func (c *Compiled) compile(name, v string) *secret {
	if c != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		if s, ok := c.secs[[2]string{name, v}]; ok {
			return s
		}
	}
	s := &secret{repl: []byte("{{" + name + "}}"), n: int32(len(v)), k: int32(runLen(len(v))),
		sam: newAutomaton(v), fsam: newAutomaton(strings.ToLower(v))}
	if c != nil {
		if c.secs == nil || len(c.secs) >= maxCompiled {
			c.secs = make(map[[2]string]*secret)
		}
		c.secs[[2]string{name, v}] = s
	}
	return s
}

// Redactor returns a Redactor for vals (name to value) with the values compiled once
// per run; nil when there is nothing to redact.
func (c *Compiled) Redactor(vals map[string]string) *Redactor {
	r := &Redactor{}
	for name, v := range vals {
		if len(v) < minSecret {
			continue
		}
		r.secrets = append(r.secrets, c.compile(name, v))
	}
	if len(r.secrets) == 0 {
		return nil
	}
	// The longest value first: where runs of two values overlap, its placeholder is
	// shown; the order is fixed (length, then placeholder), so a stream redacts the
	// same however it is split and whatever order the map gave.
	slices.SortFunc(r.secrets, func(a, b *secret) int {
		if a.n != b.n {
			return int(b.n - a.n)
		}
		return bytes.Compare(a.repl, b.repl)
	})
	return r
}

// Feed takes the next chunk of the body and returns what may be released; final
// releases the rest. An error ends the response (errPartialReflection or
// errOverlong); nothing more is released after it.
func (r *Redactor) Feed(p []byte, final bool) ([]byte, error) {
	if r == nil {
		return p, nil
	}
	if r.body == nil {
		r.body = newScanner(r.secrets, false, true)
	}
	out, err := r.body.feed(p, final)
	r.Count += r.body.take()
	return out, err
}

// Header redacts a response header's value; an error refuses the response.
func (r *Redactor) Header(v string) (string, error) {
	if r == nil || v == "" {
		return v, nil
	}
	s := r.scanner(false, true)
	out, err := s.feed([]byte(v), true)
	r.Count += s.take()
	return string(out), err
}

// Name reports whether a response header's name spells a value or a run of one, in
// any case (names are case-folded when they are parsed): such a header is dropped.
// An error (a run that is not a whole value) refuses the response.
func (r *Redactor) Name(k string) (bool, error) {
	if r == nil {
		return false, nil
	}
	s := r.scanner(true, true)
	_, err := s.feed([]byte(k), true)
	n := s.take()
	r.Count += n
	return n > 0, err
}

// String redacts a whole string for the host's own records (an upstream error
// naming a URL): runs are redacted, nothing is refused.
func (r *Redactor) String(s string) string {
	if r == nil || s == "" {
		return s
	}
	sc := r.scanner(false, false)
	out, _ := sc.feed([]byte(s), true)
	r.Count += sc.take()
	return string(out)
}

// pstate is one way of reading the stream so far (a path through its spellings),
// matched against one value: the automaton state and the length of the longest
// suffix of the path that is a piece of the value, the offset where that piece
// begins (-1 when the path cannot tell), and where its last characters began.
type pstate struct {
	v, l   int32
	head   uint8
	from   int64
	starts [runMax]int64 // ring: offsets where the path's last characters begin
}

// span is a range of offsets.
type span struct{ from, to int64 }

// scanner runs the secrets' automatons over a stream, along every way of reading
// its spellings, marks the bytes of runs, and releases bytes by the hold rule.
type scanner struct {
	secs   []*secret
	fold   bool // header names: compared case-insensitively
	strict bool // partial reflections and overlong escapes are errors

	buf  []byte  // bytes from base not yet released
	mark []int16 // per byte of buf: 1 + the index of the secret whose run covers it
	base int64   // offset of buf[0]
	proc int64   // next offset to read spellings at
	// barrier is the offset after the last CR, LF or NUL read: nothing before it can
	// join a run any more.
	barrier int64
	// ring[s][slot] are the path states of secret s waiting at the offset that slot
	// stands for (offset % ringSlots).
	ring [][ringSlots][]pstate
	// pending[s] are runs of secret s not yet known to lie in a whole value;
	// wholes[s] are the whole values read (recent ones).
	pending, wholes [][]span
	npending        int // secrets with pending runs
	// live[s] counts the path states of secret s in the ring. When there is one path
	// per secret and the bytes are only themselves (most of a stream), the paths
	// live in cur instead and advance without the ring (fast).
	live    []int
	cur     []pstate
	fast    bool
	lastOut int16 // the mark of the last released byte (a run continues: no second placeholder)
	count   int
	late    int // bytes marked after they were released (a bug; tests check)
	err     error
	rs      []reading
}

func newScanner(secs []*secret, fold, strict bool) *scanner {
	return &scanner{secs: secs, fold: fold, strict: strict, ring: make([][ringSlots][]pstate, len(secs)),
		pending: make([][]span, len(secs)), wholes: make([][]span, len(secs)),
		live: make([]int, len(secs)), cur: make([]pstate, len(secs)), fast: true}
}

// scanner returns the Redactor's scanner for one whole string, reset: allocating the
// scanner's rings for every header was most of a small response's guard.
func (r *Redactor) scanner(fold, strict bool) *scanner {
	if r.short == nil {
		r.short = newScanner(r.secrets, fold, strict)
		return r.short
	}
	r.short.reset(fold, strict)
	return r.short
}

// reset makes s as newScanner made it, keeping what it allocated.
func (s *scanner) reset(fold, strict bool) {
	s.fold, s.strict = fold, strict
	s.buf, s.mark, s.rs = s.buf[:0], s.mark[:0], s.rs[:0]
	s.base, s.proc, s.barrier = 0, 0, 0
	for i := range s.ring {
		for j := range s.ring[i] {
			s.ring[i][j] = s.ring[i][j][:0]
		}
		s.pending[i], s.wholes[i] = s.pending[i][:0], s.wholes[i][:0]
	}
	s.npending = 0
	clear(s.live)
	clear(s.cur)
	s.fast, s.lastOut, s.count, s.late, s.err = true, 0, 0, 0, nil
}

// take returns the runs redacted since the last call.
func (s *scanner) take() int {
	n := s.count
	s.count = 0
	return n
}

// barrierByte reports the bytes no value holds (values with CR, LF or NUL are
// refused) and no spelling spans.
func barrierByte(c byte) bool { return c == '\n' || c == '\r' || c == 0 }

// introducer reports a byte that may begin a spelling longer than itself.
func introducer(c byte) bool { return c == '%' || c == '\\' || c == '&' }

func (s *scanner) feed(p []byte, final bool) ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	s.buf = append(s.buf, p...)
	if n := len(s.mark); n < len(s.buf) {
		s.mark = slices.Grow(s.mark, len(s.buf)-n)[:len(s.buf)]
		clear(s.mark[n:])
	}
	end := s.base + int64(len(s.buf))
	for s.proc < end {
		c := s.buf[s.proc-s.base]
		if s.fast && !introducer(c) && c != '+' {
			// One way of reading the stream and a byte that is only itself.
			s.stepFast(s.proc, c)
		} else {
			rs, more, err := readings(s.rs[:0], s.buf[s.proc-s.base:], final)
			s.rs = rs
			if err != nil {
				if s.strict {
					s.err = err
					return nil, err
				}
				// The host's own records: an overlong escape is read as bytes.
				rs, more = append(rs[:0], reading{c: c, n: 1}), false
			}
			if more {
				break
			}
			s.step(s.proc, rs)
		}
		if barrierByte(c) {
			s.barrier = s.proc + 1
		}
		s.proc++
		if s.npending > 0 {
			s.judge(false)
			if s.err != nil {
				return nil, s.err
			}
		}
	}
	if final {
		s.spill()
		s.judge(true) // runs still open at the end are judged there
		if s.err != nil {
			return nil, s.err
		}
		return s.release(end), nil
	}
	return s.release(s.releasable(end)), nil
}

// releasable is the offset up to which bytes may go out: it reads the content only,
// never the values (see the comment at the top of this file).
func (s *scanner) releasable(end int64) int64 {
	hold := int64(runMax - 1)
	for i := max(s.base, end-holdAny); i < end; i++ {
		if introducer(s.buf[i-s.base]) {
			hold = holdAny
			break
		}
	}
	r := max(end-hold, min(s.barrier, s.proc))
	return min(max(r, s.base), s.proc)
}

// release emits buf up to offset to: unmarked bytes as they are, each run as its
// secret's placeholder.
func (s *scanner) release(to int64) []byte {
	n := int(to - s.base)
	if n <= 0 {
		return nil
	}
	out := make([]byte, 0, n)
	for i := 0; i < n; i++ {
		m := s.mark[i]
		switch {
		case m == 0:
			out = append(out, s.buf[i])
		case m != s.lastOut:
			out = append(out, s.secs[m-1].repl...)
			s.count++
		}
		s.lastOut = m
	}
	s.buf = append(s.buf[:0], s.buf[n:]...)
	s.mark = append(s.mark[:0], s.mark[n:]...)
	s.base = to
	return out
}

// step extends every path waiting at offset q by every spelling read there.
func (s *scanner) step(q int64, rs []reading) {
	s.spill()
	slot := q % ringSlots
	one := true // after this step, one path per secret, all at q+1
	for i, sec := range s.secs {
		a := sec.sam
		if s.fold {
			a = sec.fsam
		}
		states := s.ring[i][slot]
		s.live[i] -= len(states)
		for _, st := range states {
			for _, rd := range rs {
				c := rd.c
				if s.fold {
					c = lower(c)
				}
				to := q + int64(rd.n)
				w := &s.ring[i][to%ringSlots]
				n := len(*w)
				if st.l == 0 && !a.starts(c) {
					// Outside the value and staying so (most bytes): only where a
					// piece begins matters, and none does.
					*w = mergeRoot(*w)
				} else {
					ns := st
					s.advance(&ns, i, sec, a, q, to, c)
					*w = merge(*w, ns)
				}
				s.live[i] += len(*w) - n
			}
		}
		s.ring[i][slot] = states[:0] // keeps its array for the offset ringSlots on
		one = one && s.live[i] == 1 && len(s.ring[i][(q+1)%ringSlots]) == 1
	}
	if one {
		// Back to one path per secret: the fast loop holds them.
		for i := range s.secs {
			w := &s.ring[i][(q+1)%ringSlots]
			s.cur[i] = (*w)[0]
			*w = (*w)[:0]
			s.live[i] = 0
		}
		s.fast = true
	}
}

// stepFast extends the one path of each secret by byte c, read as itself.
func (s *scanner) stepFast(q int64, c byte) {
	for i, sec := range s.secs {
		a := sec.sam
		if s.fold {
			a, c = sec.fsam, lower(c)
		}
		st := &s.cur[i]
		if st.l == 0 && !a.starts(c) {
			continue
		}
		s.advance(st, i, sec, a, q, q+1, c)
	}
}

// spill puts the fast loop's paths back into the ring, before a byte read more than
// one way.
func (s *scanner) spill() {
	if !s.fast {
		return
	}
	for i := range s.secs {
		w := &s.ring[i][s.proc%ringSlots]
		*w = append((*w)[:0], s.cur[i])
		s.live[i] = 1
	}
	s.fast = false
}

// advance extends path st of secret i (sec, automaton a) by character c, spelled by
// the bytes [q, to): the piece of the value it reads, and the run it marks.
func (s *scanner) advance(st *pstate, i int, sec *secret, a *automaton, q, to int64, c byte) {
	l0 := st.l
	st.v, st.l = a.step(st.v, st.l, c)
	st.head = (st.head + 1) % runMax
	st.starts[st.head] = q
	switch {
	case st.l == 0:
		st.from = -1
	case st.l == l0+1 && l0 > 0:
		// The same piece, one character longer: it begins where it began.
	case st.l <= runMax:
		st.from = st.starts[(int(st.head)+runMax-int(st.l)+1)%runMax]
	default:
		st.from = -1 // a shorter piece, further back than the ring reaches
	}
	if st.l >= sec.k {
		from := st.starts[(int(st.head)+runMax-int(sec.k)+1)%runMax]
		s.markRun(from, to, int16(i+1))
		if len(s.pending[i]) == 0 {
			s.npending++
		}
		s.pending[i] = addSpan(s.pending[i], span{from, to})
		if st.l == sec.n && st.from >= 0 {
			s.wholes[i] = append(s.wholes[i], span{st.from, to})
		}
	}
}

// addSpan adds a run to the pending ones, joining it to the last when they touch.
func addSpan(ss []span, sp span) []span {
	if n := len(ss); n > 0 && sp.from <= ss[n-1].to && sp.to >= ss[n-1].from {
		ss[n-1].from, ss[n-1].to = min(ss[n-1].from, sp.from), max(ss[n-1].to, sp.to)
		return ss
	}
	return append(ss, sp)
}

// judge settles the pending runs: one inside a whole value read is fine; one that no
// path still reading a piece of the value (begun at or before it) can make whole is
// a partial reflection. When final, every path has ended.
func (s *scanner) judge(final bool) {
	for i := range s.secs {
		if len(s.pending[i]) == 0 {
			continue
		}
		earliest := int64(-1) // the earliest begin of a piece still being read
		consider := func(st *pstate) {
			if st.l > 0 && st.from >= 0 && (earliest < 0 || st.from < earliest) {
				earliest = st.from
			}
		}
		switch {
		case final:
		case s.fast:
			consider(&s.cur[i])
		default:
			for _, states := range s.ring[i] {
				for j := range states {
					consider(&states[j])
				}
			}
		}
		keep := s.pending[i][:0]
		for _, sp := range s.pending[i] {
			covered := false
			for _, w := range s.wholes[i] {
				if w.from <= sp.from && sp.to <= w.to {
					covered = true
					break
				}
			}
			switch {
			case covered:
			case earliest >= 0 && earliest <= sp.from:
				keep = append(keep, sp) // a piece begun before it may still become whole
			case s.strict && s.err == nil:
				s.err = errPartialReflection
			}
		}
		s.pending[i] = keep
		if len(keep) == 0 {
			s.wholes[i] = s.wholes[i][:0]
			s.npending--
		}
	}
}

// markRun marks the bytes [from, to) as secret m's run (a byte keeps the first mark).
func (s *scanner) markRun(from, to int64, m int16) {
	if from < s.base {
		s.late++ // never: the hold rule keeps every byte a run may cover (tests check)
	}
	for o := max(from, s.base); o < to; o++ {
		if s.mark[o-s.base] == 0 {
			s.mark[o-s.base] = m
		}
	}
}

// mergeRoot adds the initial state (no piece of the value read) to the states
// waiting at one offset. Its ring does not matter: a run only reads the starts of
// characters of the piece it is in.
func mergeRoot(states []pstate) []pstate {
	for i := range states {
		if states[i].l == 0 {
			return states
		}
	}
	return append(states, pstate{from: -1})
}

// merge adds ns to the states waiting at one offset. Two paths in the same
// automaton state with the same match length have read the same piece of the value:
// they continue as one, with the earlier start of each character (the union of
// what they mark).
func merge(states []pstate, ns pstate) []pstate {
	for i := range states {
		st := &states[i]
		if st.v != ns.v || st.l != ns.l {
			continue
		}
		if ns.l == 0 {
			return states
		}
		for j := 0; j < min(runMax, int(ns.l)); j++ {
			// Align the rings by age: j characters back on each path.
			a, b := (int(st.head)+runMax-j)%runMax, (int(ns.head)+runMax-j)%runMax
			st.starts[a] = min(st.starts[a], ns.starts[b])
		}
		if st.from < 0 || ns.from >= 0 && ns.from < st.from {
			st.from = ns.from
		}
		return states
	}
	return append(states, ns)
}

// automaton is a suffix automaton of one value: it follows, character by character,
// the longest suffix of the text read that is a piece of the value. Its transitions
// are a dense table over the value's distinct bytes (class 0: any other byte).
type automaton struct {
	link, length []int32
	cls          [256]uint8
	ncls         int32
	next         []int32 // [state*ncls + class]: the next state, or -1
}

func newAutomaton(v string) *automaton {
	a := &automaton{ncls: 1}
	for i := 0; i < len(v); i++ {
		if a.cls[v[i]] == 0 {
			a.cls[v[i]] = uint8(a.ncls)
			a.ncls++
		}
	}
	a.add(0)
	last := int32(0)
	for i := 0; i < len(v); i++ {
		c := int32(a.cls[v[i]])
		cur := a.add(a.length[last] + 1)
		p := last
		for p != -1 && a.next[p*a.ncls+c] < 0 {
			a.next[p*a.ncls+c] = cur
			p = a.link[p]
		}
		if p == -1 {
			a.link[cur] = 0
		} else if q := a.next[p*a.ncls+c]; a.length[p]+1 == a.length[q] {
			a.link[cur] = q
		} else {
			clone := a.add(a.length[p] + 1)
			a.link[clone] = a.link[q]
			copy(a.next[clone*a.ncls:(clone+1)*a.ncls], a.next[q*a.ncls:(q+1)*a.ncls])
			for p != -1 && a.next[p*a.ncls+c] == q {
				a.next[p*a.ncls+c] = clone
				p = a.link[p]
			}
			a.link[q], a.link[cur] = clone, clone
		}
		last = cur
	}
	return a
}

func (a *automaton) add(length int32) int32 {
	a.link = append(a.link, -1)
	a.length = append(a.length, length)
	for i := int32(0); i < a.ncls; i++ {
		a.next = append(a.next, -1)
	}
	return int32(len(a.length) - 1)
}

// starts reports whether c begins a piece of the value.
func (a *automaton) starts(c byte) bool { return a.cls[c] != 0 }

// step reads c after a text whose longest suffix in the value is (v, l).
func (a *automaton) step(v, l int32, c byte) (int32, int32) {
	k := int32(a.cls[c])
	if k == 0 {
		return 0, 0
	}
	for {
		if t := a.next[v*a.ncls+k]; t >= 0 {
			return t, l + 1
		}
		if v == 0 {
			return 0, 0
		}
		v = a.link[v]
		l = a.length[v]
	}
}

// reading is one spelling of a character c, n bytes long.
type reading struct {
	c byte
	n int
}

// readings appends the spellings that start at b[0] (len(b) > 0): always the byte
// itself, and every escape that decodes to one byte. more reports that b ends
// before they can be told (never when final); an escape with more than maxDigits
// digits is errOverlong.
func readings(dst []reading, b []byte, final bool) (_ []reading, more bool, _ error) {
	dst = append(dst, reading{c: b[0], n: 1})
	switch b[0] {
	case '+':
		dst = append(dst, reading{c: ' ', n: 1})
	case '%':
		if len(b) < 3 {
			return dst, !final && hexPrefix(b[1:]), nil
		}
		if v, ok := hexVal(b[1:3]); ok {
			dst = append(dst, reading{c: byte(v), n: 3})
		}
	case '\\':
		return backslash(dst, b, final)
	case '&':
		return reference(dst, b, final)
	}
	return dst, false, nil
}

// backslash reads the JSON and JavaScript escapes at b (b[0] == '\\').
func backslash(dst []reading, b []byte, final bool) ([]reading, bool, error) {
	if len(b) < 2 {
		return dst, !final, nil
	}
	switch c := b[1]; {
	case c == 'u' && len(b) > 2 && b[2] == '{':
		d, end, more, err := digits(b, 3, final, isHex)
		if more || err != nil || d == 0 {
			return dst, more, err
		}
		if end == len(b) {
			return dst, !final, nil
		}
		if b[end] == '}' {
			if v, ok := bigVal(b[3:end], 16); ok {
				dst = append(dst, reading{c: v, n: end + 1})
			}
		}
	case c == 'u' && len(b) == 2:
		return dst, !final, nil
	case c == 'u' || c == 'U' || c == 'x' || c == 'X':
		// \uXXXX, \xXX (and the upper-case forms other languages use); in
		// JavaScript \U and \X are the letters themselves.
		n := 6
		if c == 'x' || c == 'X' {
			n = 4
		}
		if c == 'U' || c == 'X' {
			dst = append(dst, reading{c: c, n: 2})
		}
		if len(b) < n {
			return dst, !final && hexPrefix(b[2:]), nil
		}
		if v, ok := hexVal(b[2:n]); ok && v < 256 {
			dst = append(dst, reading{c: byte(v), n: n})
		}
	case c >= '0' && c <= '7':
		// Legacy octal: one to three digits, each prefix a reading.
		v := 0
		for i := 1; i < 4; i++ {
			if i >= len(b) {
				return dst, !final, nil
			}
			if b[i] < '0' || b[i] > '7' {
				break
			}
			v = v*8 + int(b[i]-'0')
			if v > 255 {
				break
			}
			dst = append(dst, reading{c: byte(v), n: i + 1})
		}
	case barrierByte(c):
	default:
		if e, ok := singleEscapes[c]; ok {
			c = e
		}
		dst = append(dst, reading{c: c, n: 2})
	}
	return dst, false, nil
}

// singleEscapes are the single-letter escapes that do not stand for the letter.
var singleEscapes = map[byte]byte{'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t', 'v': '\v'}

// reference reads the HTML character references at b (b[0] == '&').
func reference(dst []reading, b []byte, final bool) ([]reading, bool, error) {
	if len(b) < 2 {
		return dst, !final, nil
	}
	if b[1] == '#' {
		start, isD, base := 2, isDigit, 10
		if len(b) < 3 {
			return dst, !final, nil
		}
		if b[2] == 'x' || b[2] == 'X' {
			start, isD, base = 3, isHex, 16
		}
		d, end, more, err := digits(b, start, final, isD)
		if more || err != nil || d == 0 {
			return dst, more, err
		}
		n := end
		if end == len(b) {
			if !final {
				return dst, true, nil // a ';' may follow
			}
		} else if b[end] == ';' {
			n++
		}
		if v, ok := bigVal(b[start:end], base); ok {
			dst = append(dst, reading{c: v, n: n})
		}
		return dst, false, nil
	}
	// Named: letters and digits, then ';' (or a legacy name without it).
	i := 1
	for i < len(b) && i <= maxNamedRef && isAlnum(b[i]) {
		i++
	}
	if i == len(b) && i <= maxNamedRef && !final {
		return dst, true, nil
	}
	if i < len(b) && b[i] == ';' {
		if v, ok := namedRefs[string(b[1:i])]; ok {
			dst = append(dst, reading{c: v, n: i + 1})
		}
	}
	for name, v := range legacyRefs {
		if i-1 >= len(name) && string(b[1:1+len(name)]) == name {
			dst = append(dst, reading{c: v, n: 1 + len(name)})
		}
	}
	return dst, false, nil
}

// digits counts the digits of b from start: more when b ends among them (not final),
// errOverlong past maxDigits.
func digits(b []byte, start int, final bool, is func(byte) bool) (d, end int, more bool, err error) {
	end = start
	for end < len(b) && is(b[end]) {
		end++
		if end-start > maxDigits {
			return 0, 0, false, errOverlong
		}
	}
	if end == len(b) && !final {
		return 0, 0, true, nil
	}
	return end - start, end, false, nil
}

// bigVal parses digits of any length (leading zeros) in base; ok when the value is
// a byte.
func bigVal(d []byte, base int) (byte, bool) {
	v := 0
	for _, c := range d {
		var x int
		switch {
		case c >= '0' && c <= '9':
			x = int(c - '0')
		case c >= 'a' && c <= 'f':
			x = int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			x = int(c-'A') + 10
		}
		v = v*base + x
		if v > 255 {
			return 0, false
		}
	}
	return byte(v), true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isHex(c byte) bool   { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// maxNamedRef bounds the names of namedRefs ("DiacriticalGrave").
const maxNamedRef = 16

// namedRefs are the HTML named character references whose value is an ASCII
// character (the WHATWG list, as in Go's html package).
var namedRefs = map[string]byte{
	"Tab": '\t', "NewLine": '\n', "excl": '!', "quot": '"', "QUOT": '"', "num": '#', "dollar": '$', "percnt": '%',
	"amp": '&', "AMP": '&', "apos": '\'', "lpar": '(', "rpar": ')', "ast": '*', "midast": '*', "plus": '+',
	"comma": ',', "period": '.', "sol": '/', "colon": ':', "semi": ';', "lt": '<', "LT": '<', "equals": '=',
	"gt": '>', "GT": '>', "quest": '?', "commat": '@', "lbrack": '[', "lsqb": '[', "bsol": '\\', "rbrack": ']',
	"rsqb": ']', "Hat": '^', "UnderBar": '_', "lowbar": '_', "DiacriticalGrave": '`', "grave": '`',
	"lbrace": '{', "lcub": '{', "VerticalLine": '|', "verbar": '|', "vert": '|', "rbrace": '}', "rcub": '}',
}

// legacyRefs are the ASCII references HTML also reads without ';'.
var legacyRefs = map[string]byte{"amp": '&', "AMP": '&', "lt": '<', "LT": '<', "gt": '>', "GT": '>', "quot": '"', "QUOT": '"'}
