package gitcli

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

const fuzzBase = "0123456789abcdef0123456789abcdef01234567"

// FuzzScanBundle: whatever the artefact holds, the scan ends without panicking, either
// accepting it within its caps or refusing it with a RejectError.
func FuzzScanBundle(f *testing.F) {
	head := "# v2 git bundle\n-" + fuzzBase + "\n" + "89abcdef0123456789abcdef0123456789abcdef refs/heads/main\n\n"
	f.Add([]byte(head + string(pack(entry(3, 4, nil, []byte("abcd"))))))
	f.Add([]byte(head + string(pack(entry(7, 12, make([]byte, 20), binary.AppendUvarint(binary.AppendUvarint(nil, 10), 1<<40))))))
	f.Add([]byte(head + string(pack(entry(6, 3, []byte{0x05}, []byte{1, 2, 0}), entry(1, 2, nil, []byte("hi"))))))
	f.Add([]byte(head + "PACK"))
	f.Add([]byte("# v2 git bundle\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const maxObject, maxTotal = 1 << 16, 1 << 18
		info, err := scanBundle(bytes.NewReader(data), "main", fuzzBase, maxObject, maxTotal)
		if err != nil {
			var re *port.RejectError
			if !errors.As(err, &re) {
				t.Fatalf("not a RejectError: %v", err)
			}
			return
		}
		if info.bytes > maxTotal || !isHex40(info.tip) || info.tip == fuzzBase || info.tip == "0000000000000000000000000000000000000000" {
			t.Fatalf("accepted %+v", info)
		}
	})
}
