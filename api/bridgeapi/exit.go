package bridgeapi

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
)

// ExitRecordPrefix starts an exit record: a claimed stub's last line on each of its
// output streams (stdout and stderr), written once everything the command and its
// descendants wrote there has been passed on, so a host that reads the record has
// the stream whole:
//
//	ExitRecordPrefix NONCE " " CODE "\n"
//
// NONCE is the claim's ExitNonce and CODE the stub's exit code (the command's, or
// the bridge's own for a failure), in decimal. The record follows the command's last
// byte directly (no newline of the stub's before it): a host finds it by its prefix
// and nonce wherever it starts. A record with another nonce is the command's output
// like any other. A stub that cannot prove a stream complete
// (a descendant it cannot end holds it) writes no record; the host then waits for
// the runtime's exit report.
const ExitRecordPrefix = "\x1eagentsandbox-exit "

// ExitNonceBytes is the entropy of an exit nonce (hex-encoded on the wire).
const ExitNonceBytes = 16

// NewExitNonce returns a fresh random exit nonce for one claim.
func NewExitNonce() string {
	b := make([]byte, ExitNonceBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// ExitRecord returns the exit record of nonce and code.
func ExitRecord(nonce string, code int) []byte {
	b := append([]byte(nil), ExitRecordPrefix...)
	b = append(b, nonce...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(code), 10)
	return append(b, '\n')
}

// Exit codes of the bridge itself, following the shell's and docker run's
// conventions. Any other code is the command's (128+n when signal n killed it).
const (
	// ExitBridgeFailed: the bridge could not start (bad configuration, cannot
	// listen), or a pooled stub's preloaded runtime was gone at the claim.
	ExitBridgeFailed = 125
	// ExitCannotExec: the command was found but could not be executed.
	ExitCannotExec = 126
	// ExitNotFound: the command was not found.
	ExitNotFound = 127
)
