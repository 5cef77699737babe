package gateway

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTextFilter(t *testing.T) {
	for name, tc := range map[string]struct {
		deltas []string
		shown  []string // what each push returns
		flush  string
	}{
		"plain":            {[]string{"hello ", "world"}, []string{"hello ", "world"}, ""},
		"whole token":      {[]string{"HEARTBEAT_OK"}, []string{""}, ""},
		"split token":      {[]string{"HEART", "BEAT", "_OK"}, []string{"", "", ""}, ""},
		"token mid text":   {[]string{"a HEARTBEAT_OK b"}, []string{"a  b"}, ""},
		"prefix released":  {[]string{"HEAR", "ING"}, []string{"", "HEARING"}, ""},
		"tail held":        {[]string{"go H"}, []string{"go "}, "H"},
		"split after text": {[]string{"done HEARTBE", "AT_OK"}, []string{"done ", ""}, ""},
		"two tokens":       {[]string{"HEARTBEAT_OKHEARTBEAT_OK", "x"}, []string{"", "x"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			var f textFilter
			var shown []string
			for _, d := range tc.deltas {
				shown = append(shown, f.push(d))
			}
			assert.Equal(t, tc.shown, shown)
			assert.Equal(t, tc.flush, f.flush())
			assert.NotContains(t, strings.Join(shown, ""), HeartbeatToken)
		})
	}
}

func TestStripHeartbeat(t *testing.T) {
	assert.Equal(t, "", stripHeartbeat(" HEARTBEAT_OK\n"))
	assert.Equal(t, "answer", stripHeartbeat("answer HEARTBEAT_OK"))
	assert.Equal(t, "  keep spacing ", stripHeartbeat("  keep spacing "))
}

func TestSameSessionKey(t *testing.T) {
	assert.True(t, sameSessionKey("", "agent:main:x", "agent:main:x"))
	assert.True(t, sameSessionKey("", "AGENT:Main:X ", "agent:main:x"))
	assert.True(t, sameSessionKey("", "x", "agent:main:x"), "an unprefixed key names the same session")
	assert.False(t, sameSessionKey("ops", "x", "agent:main:x"))
	assert.False(t, sameSessionKey("", "", "agent:main:x"))
	assert.False(t, sameSessionKey("", "agent:main:x", ""))
	assert.False(t, sameSessionKey("", "agent:main:xy", "agent:main:x"))
}
