package kubernetes

import (
	"context"
	"testing"
	"time"
)

// TestStreamEndWaitsForThePid: an exec its caller ends before the init's pid frame
// arrived keeps its stream until the frame comes, so the kill that follows knows the
// process (the race left a cancelled exec running to its bridge's deadline).
func TestStreamEndWaitsForThePid(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	seen := make(chan struct{})
	sctx, ended, streamed := streamEnd(ctx, time.Hour, seen)
	defer streamed()
	cancel()
	select {
	case <-sctx.Done():
		t.Fatal("the stream ended before the pid frame arrived")
	case <-time.After(300 * time.Millisecond):
	}
	close(seen)
	select {
	case <-sctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end once the pid frame arrived")
	}
	if !ended() {
		t.Error("ended() = false for a stream its caller ended")
	}
}

// TestStreamEndAtTheLimit: the limit ends the stream (the pid already seen) and says so;
// a stream that is over by itself was not ended.
func TestStreamEndAtTheLimit(t *testing.T) {
	seen := make(chan struct{})
	close(seen)
	sctx, ended, streamed := streamEnd(context.Background(), 50*time.Millisecond, seen)
	select {
	case <-sctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the limit did not end the stream")
	}
	streamed()
	if !ended() {
		t.Error("ended() = false at the limit")
	}

	_, ended, streamed = streamEnd(context.Background(), time.Hour, make(chan struct{}))
	streamed()
	if ended() {
		t.Error("ended() = true for a stream over by itself")
	}
}
