package egress

import (
	"maps"

	"github.com/agentsandbox/sandbox/port"
)

// Audit retention. The live OnAudit stream sees every record; what a run keeps for
// its result is bounded so that an agent cannot grow the host's memory, and shaped so
// that it cannot push what matters out either: a flood of cheap refusals must not hide
// the credentialed request or the SSRF attempt that follows it.
const (
	// keepFirstRefused refusals are kept from the start of the run (how it began).
	keepFirstRefused = 1000
	// keepLastRefused refusals are kept from the end (a ring): the most recent.
	keepLastRefused = 4000
	// maxKeptForwarded forwarded requests without credentials are kept in full;
	// beyond, they share the ring with refusals. Credentialed ones are always kept.
	maxKeptForwarded = 100000
)

// forwardedKey is the summary key of forwarded requests (their Guard is empty).
const forwardedKey = "forwarded"

type seqRecord struct {
	seq uint64
	rec port.EgressRecord
}

// auditLog keeps a run's egress records under the rules above. Not safe for
// concurrent use: the proxy holds its lock.
type auditLog struct {
	seq           uint64
	kept          []seqRecord // always-kept, in order
	ring          []seqRecord // most recent of the rest
	next          int         // the ring's oldest slot once full
	firstRefused  int
	keptForwarded int
	summarised    map[string]int
}

func (a *auditLog) add(rec port.EgressRecord) {
	a.seq++
	sr := seqRecord{seq: a.seq, rec: rec}
	switch {
	case len(rec.Credentials) > 0:
		a.kept = append(a.kept, sr)
		return
	case rec.Guard == "" && a.keptForwarded < maxKeptForwarded:
		a.keptForwarded++
		a.kept = append(a.kept, sr)
		return
	case rec.Guard != "" && a.firstRefused < keepFirstRefused:
		a.firstRefused++
		a.kept = append(a.kept, sr)
		return
	}
	if len(a.ring) < keepLastRefused {
		a.ring = append(a.ring, sr)
		return
	}
	old := a.ring[a.next]
	a.ring[a.next] = sr
	a.next = (a.next + 1) % keepLastRefused
	if a.summarised == nil {
		a.summarised = map[string]int{}
	}
	key := old.rec.Guard
	if key == "" {
		key = forwardedKey
	}
	a.summarised[key]++
}

// records returns the kept records in the order they were written.
func (a *auditLog) records() []port.EgressRecord {
	out := make([]port.EgressRecord, 0, len(a.kept)+len(a.ring))
	ring := append(append([]seqRecord(nil), a.ring[a.next:]...), a.ring[:a.next]...)
	i, j := 0, 0
	for i < len(a.kept) || j < len(ring) {
		if j == len(ring) || i < len(a.kept) && a.kept[i].seq < ring[j].seq {
			out = append(out, a.kept[i].rec)
			i++
		} else {
			out = append(out, ring[j].rec)
			j++
		}
	}
	return out
}

func (a *auditLog) summary() port.EgressSummary {
	s := port.EgressSummary{Records: int(a.seq), Kept: len(a.kept) + len(a.ring)}
	if len(a.summarised) > 0 {
		s.Summarised = maps.Clone(a.summarised)
	}
	return s
}
