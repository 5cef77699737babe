package egress

import (
	"maps"
	"slices"

	"github.com/agentsandbox/sandbox/port"
)

// Audit retention. The live OnAudit stream sees every record; what a run keeps for
// its result is bounded so that an agent cannot grow the host's memory, and shaped so
// that it cannot push what matters out either. Each record belongs to one class: its
// guard for a refusal of a security guard (ssrf, placeholder, reflection, encoding),
// else "credentialed" for a request that carried a credential, else "forwarded" for
// a request that was forwarded, else its guard. Every class keeps its own first and
// most recent records, so a flood of one class (cheap allowlist refusals) evicts
// nothing of another (the SSRF attempt in the middle of it), and a flood of one
// class keeps how it began and how it ended.
const (
	// keepFirstRefused and keepLastRefused bound each guard's class.
	keepFirstRefused = 1000
	keepLastRefused  = 1000
	// keepFirstCredentialed and keepLastCredentialed bound the requests that carried
	// a credential (about 1 KiB of heap each).
	keepFirstCredentialed = 5000
	keepLastCredentialed  = 5000
	// maxKeptForwarded forwarded requests without credentials are kept from the
	// start, keepLastForwarded from the end.
	maxKeptForwarded  = 100000
	keepLastForwarded = 1000
)

// Class keys of records without a security guard (their Guard may be empty).
const (
	forwardedKey    = "forwarded"
	credentialedKey = "credentialed"
)

// securityGuards are the refusals that say an agent tried something: they are
// classed by guard even when the request carried a credential.
var securityGuards = map[string]bool{
	port.GuardSSRF: true, port.GuardPlaceholder: true, port.GuardReflection: true, port.GuardEncoding: true,
}

// classOf is the retention class of a record.
func classOf(rec *port.EgressRecord) string {
	switch {
	case securityGuards[rec.Guard]:
		return rec.Guard
	case len(rec.Credentials) > 0:
		return credentialedKey
	case rec.Guard == "":
		return forwardedKey
	}
	return rec.Guard
}

// limits is how many records of a class are kept from the start and from the end.
func limits(class string) (first, last int) {
	switch class {
	case forwardedKey:
		return maxKeptForwarded, keepLastForwarded
	case credentialedKey:
		return keepFirstCredentialed, keepLastCredentialed
	}
	return keepFirstRefused, keepLastRefused
}

type seqRecord struct {
	seq uint64
	rec port.EgressRecord
}

// classLog keeps one class: its first records, and a ring of its most recent.
type classLog struct {
	first []seqRecord
	ring  []seqRecord
	next  int // the ring's oldest slot once full
}

// auditLog keeps a run's egress records under the rules above. Not safe for
// concurrent use: the proxy holds its lock.
type auditLog struct {
	seq        uint64
	classes    map[string]*classLog
	summarised map[string]int
}

func (a *auditLog) add(rec port.EgressRecord) {
	a.seq++
	sr := seqRecord{seq: a.seq, rec: rec}
	class := classOf(&rec)
	if a.classes == nil {
		a.classes = map[string]*classLog{}
	}
	c := a.classes[class]
	if c == nil {
		c = &classLog{}
		a.classes[class] = c
	}
	first, last := limits(class)
	switch {
	case len(c.first) < first:
		c.first = append(c.first, sr)
		return
	case len(c.ring) < last:
		c.ring = append(c.ring, sr)
		return
	}
	c.ring[c.next] = sr
	c.next = (c.next + 1) % last
	if a.summarised == nil {
		a.summarised = map[string]int{}
	}
	a.summarised[class]++
}

// records returns the kept records in the order they were written.
func (a *auditLog) records() []port.EgressRecord {
	var all []seqRecord
	for _, c := range a.classes {
		all = append(all, c.first...)
		all = append(all, c.ring...)
	}
	slices.SortFunc(all, func(x, y seqRecord) int {
		switch {
		case x.seq < y.seq:
			return -1
		case x.seq > y.seq:
			return 1
		}
		return 0
	})
	out := make([]port.EgressRecord, len(all))
	for i := range all {
		out[i] = all[i].rec
	}
	return out
}

func (a *auditLog) summary() port.EgressSummary {
	kept := 0
	for _, c := range a.classes {
		kept += len(c.first) + len(c.ring)
	}
	s := port.EgressSummary{Records: int(a.seq), Kept: kept}
	if len(a.summarised) > 0 {
		s.Summarised = maps.Clone(a.summarised)
	}
	return s
}
