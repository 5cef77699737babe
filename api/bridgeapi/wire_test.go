package bridgeapi

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/wire.golden.json from the values in TestWireGolden")

// wireSamples are one fully filled value of every message on the bridge's wire: the
// claim line, the preload protocol's lines, the stub's status line (with the
// attestation it carries), and the command lines the runners build.
func wireSamples() map[string]any {
	now := time.UnixMilli(1_700_000_000_000).UTC()
	att := Attestation{
		Time: now, UID: 1001, GID: 1001, Interfaces: []string{"lo"}, Routes: 0,
		Nameservers: []string{"10.0.0.2"}, CapEff: "0000000000000000", CapPrm: "0000000000000000",
		CapBnd: "0000000000000000", NoNewPrivs: true, Seccomp: 2, ReadOnlyRoot: true,
		EngineSockets: []string{"/var/run/docker.sock"}, OpenFiles: 1024, PIDsMax: "256", Mounts: 12,
		Kernel: KernelGVisor, KernelVersion: "Linux version 4.4.0", Runtime: "runsc",
	}
	return map[string]any{
		"claim": Claim{Argv: []string{"/agent", "a b"}, Env: []string{"PATH=/bin"}, Dir: "/workspace", Forward: true,
			DeadlineMS: 1_700_000_062_000, GraceMS: 2000, Egress: true, ExitNonce: "00112233445566778899aabbccddeeff"},
		"preload_ready":   PreloadReady{Ready: true, Protocol: PreloadProtocol},
		"preload_claim":   PreloadClaim{Argv: []string{"/agent"}, Env: []string{"X=1"}, Dir: "/workspace", DeadlineMS: 1_700_000_062_000},
		"preload_answer":  PreloadAnswer{Started: false, Error: &PreloadError{Code: PreloadErrEntryNotFound, Entry: "/app/main.js", Message: "no such module"}},
		"preload_status":  PreloadStatus{Preload: PreloadStatusReady, Reason: "", Attestation: &att, BootMS: 1234},
		"argv_prefix":     Prefix("/.agentsandbox/bridge", true, time.Minute, now),
		"argv_no_forward": Prefix("/.agentsandbox/bridge", false, 0, now),
		"argv_egress":     WithEgress(Prefix("/.agentsandbox/bridge", true, 0, now)),
		"argv_preload":    PreloadArgs("/.agentsandbox/bridge", []string{"node", "/preload.mjs"}, "2m0s"),
		"exit_codes":      []int{ExitBridgeFailed, ExitCannotExec, ExitNotFound},
		"notices": []string{OOMNotice, ExecFailedPrefix, PreloadGone, DroppedNotice, OutputMark, ExitRecordPrefix,
			ErrCommandNotFound.Error(), ErrCannotExec.Error(), ErrDeadline.Error()},
	}
}

// TestWireGolden pins the bridge's wire: every message encodes to the bytes recorded
// in testdata/wire.golden.json, and those bytes decode back to the same value. A
// change here is a change of what a bridge built from an older source (in a host's
// cache, in an image) and a newer host say to each other: make it on purpose, then
// run the test with -update.
func TestWireGolden(t *testing.T) {
	samples := wireSamples()
	got, err := json.MarshalIndent(samples, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	golden := filepath.Join("testdata", "wire.golden.json")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the wire changed:\n got %s\nwant %s", got, want)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(want, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) != len(samples) {
		t.Errorf("golden has %d messages, the test %d", len(raw), len(samples))
	}
	for name, v := range samples {
		back := reflect.New(reflect.TypeOf(v))
		if err := json.Unmarshal(raw[name], back.Interface()); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !reflect.DeepEqual(back.Elem().Interface(), v) {
			t.Errorf("%s decodes to %+v, want %+v", name, back.Elem().Interface(), v)
		}
	}
}
