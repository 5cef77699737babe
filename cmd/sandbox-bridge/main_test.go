package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentsandbox/sandbox/internal/bridge"
)

func TestRunFlags(t *testing.T) {
	var stderr strings.Builder
	assert.Equal(t, bridge.ExitBridgeFailed, run([]string{"-bogus"}, &stderr))
	assert.Contains(t, stderr.String(), "usage: sandbox-bridge")

	stderr.Reset()
	assert.Equal(t, bridge.ExitBridgeFailed, run([]string{"-listen", "0.0.0.0:8080", "--", "true"}, &stderr))
	assert.Contains(t, stderr.String(), "not loopback")

	stderr.Reset()
	assert.Equal(t, bridge.ExitBridgeFailed, run([]string{"-listen", "127.0.0.1:0"}, &stderr))
	assert.Contains(t, stderr.String(), "no command given")

	stderr.Reset()
	assert.Equal(t, 4, run([]string{"-listen", "127.0.0.1:0", "--", "sh", "-c", "exit 4"}, &stderr))
	assert.Empty(t, stderr.String())
}
