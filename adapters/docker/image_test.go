package docker

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/port"
)

// LoadImage says what it loaded, as containerd's does (port.ImageLoader): the
// image's name, usable as a RunSpec.Image.
func TestLoadImageReturnsNames(t *testing.T) {
	cli, _ := dockerEnv(t)
	r, err := NewRunner(WithClient(cli))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	img := agentimage.Static("agentsandbox/loadnames", []byte("#!/bin/false\n"+time.Now().String()))
	img.Labels = map[string]string{agentimage.TestImageLabel: "docker"}
	ref, archive, err := img.Archive()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true}) })
	names, err := r.LoadImage(ctx, bytes.NewReader(archive))
	if err != nil || !slices.Contains(names, ref) {
		t.Fatalf("LoadImage = %v, %v; want the names to hold %s", names, err, ref)
	}
	if _, err := r.LoadImage(ctx, bytes.NewReader([]byte("not a tar"))); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("garbage: %v, want ErrInvalidSpec", err)
	}
}
