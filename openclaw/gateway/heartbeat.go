package gateway

import "strings"

// HeartbeatToken is the text an OpenClaw agent answers heartbeat polls with.
// Heartbeat runs are broadcast like any other, so the token once leaked into
// other users' answers; the client never lets it into answer text.
const HeartbeatToken = "HEARTBEAT_OK"

// textFilter removes heartbeat tokens from streamed text. A token may be split
// across deltas, so a tail that could be the start of one is held back until the
// next delta (or the end of the run) decides.
type textFilter struct {
	held string
}

// push takes the next delta and returns the text that can be shown now.
func (f *textFilter) push(delta string) string {
	s := delta
	if f.held != "" {
		s = f.held + delta
	}
	if strings.Contains(s, HeartbeatToken) {
		s = strings.ReplaceAll(s, HeartbeatToken, "")
	}
	n := partialTokenSuffix(s)
	f.held = s[len(s)-n:]
	return s[:len(s)-n]
}

// flush returns what is held back; called when the text is complete.
func (f *textFilter) flush() string {
	h := f.held
	f.held = ""
	return h
}

func (f *textFilter) reset() { f.held = "" }

// partialTokenSuffix returns the length of the longest suffix of s that is a
// proper, non-empty prefix of HeartbeatToken.
func partialTokenSuffix(s string) int {
	for n := min(len(s), len(HeartbeatToken)-1); n > 0; n-- {
		if s[len(s)-n:] == HeartbeatToken[:n] {
			return n
		}
	}
	return 0
}

// stripHeartbeat removes heartbeat tokens from a complete text; a text that was
// nothing but a heartbeat acknowledgement becomes "".
func stripHeartbeat(s string) string {
	if !strings.Contains(s, HeartbeatToken) {
		return s
	}
	s = strings.TrimSpace(strings.ReplaceAll(s, HeartbeatToken, ""))
	return s
}
