package warmpool

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// TestExitWatch: the output before each stream's record passes whole, whatever the
// writes' boundaries; the record and what follows do not; Done waits for both
// streams; records with another nonce are output.
func TestExitWatch(t *testing.T) {
	nonce := bridgeapi.NewExitNonce()
	forged := bridgeapi.ExitRecordPrefix + bridgeapi.NewExitNonce() + " 0\n" + bridgeapi.ExitRecordPrefix + nonce[:8]
	outText := "hello " + forged + "\x1e\x1eagentsandbox-exi"
	out := outText + string(bridgeapi.ExitRecord(nonce, 42)) + "after"
	errText := "warn\n"
	errs := errText + string(bridgeapi.ExitRecord(nonce, 42))
	for size := 1; size <= len(out); size++ {
		var o, e bytes.Buffer
		w := NewExitWatch(nonce, &o, &e)
		for i := 0; i < len(out); i += size {
			n, err := w.Stdout().Write([]byte(out[i:min(i+size, len(out))]))
			require.NoError(t, err)
			require.Equal(t, min(size, len(out)-i), n)
		}
		select {
		case <-w.Done():
			t.Fatal("done before stderr's record")
		default:
		}
		for i := 0; i < len(errs); i += size {
			_, _ = w.Stderr().Write([]byte(errs[i:min(i+size, len(errs))]))
		}
		select {
		case <-w.Done():
		default:
			t.Fatalf("size %d: not done after both records", size)
		}
		assert.Equal(t, 42, w.Code())
		w.Flush()
		require.Equal(t, outText, o.String(), "size %d", size)
		require.Equal(t, errText, e.String(), "size %d", size)
	}
}

// TestExitWatchNoRecord: a run that ends without records (killed) loses nothing,
// not even an end that looked like a record's start; records that disagree end
// nothing.
func TestExitWatchNoRecord(t *testing.T) {
	nonce := bridgeapi.NewExitNonce()
	var o, e bytes.Buffer
	w := NewExitWatch(nonce, &o, &e)
	_, _ = w.Stdout().Write([]byte("partial " + bridgeapi.ExitRecordPrefix + nonce[:5]))
	assert.Equal(t, "partial ", o.String())
	w.Flush()
	assert.Equal(t, "partial "+bridgeapi.ExitRecordPrefix+nonce[:5], o.String())

	w = NewExitWatch(nonce, &o, &e)
	_, _ = w.Stdout().Write(bridgeapi.ExitRecord(nonce, 1))
	_, _ = w.Stderr().Write(bridgeapi.ExitRecord(nonce, 2))
	select {
	case <-w.Done():
		t.Fatal("done with records that disagree")
	default:
	}
	w = NewExitWatch(nonce, &o, &e)
	_, _ = w.Stdout().Write([]byte(bridgeapi.ExitRecordPrefix + nonce + " x\n"))
	_, _ = w.Stderr().Write(bridgeapi.ExitRecord(nonce, 0))
	select {
	case <-w.Done():
		t.Fatal("done with a malformed record")
	default:
	}
}
