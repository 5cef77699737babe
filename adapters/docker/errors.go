package docker

import (
	"context"
	"errors"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/runner/engineerr"
	"github.com/agentsandbox/sandbox/internal/runner/imagepull"
	"github.com/agentsandbox/sandbox/port"
)

// classify maps an SDK error to the port sentinels, keeping the original as the cause
// (engineerr.Classify, with the client's connection failures as unavailable).
func classify(err error) error {
	return engineerr.Classify("docker daemon (is it running, and is this the address? WithHost or DOCKER_HOST sets it; Runner.Ping checks it before any run)", err, client.IsErrConnectionFailed)
}

// createError classifies a failed ContainerCreate of image: a missing image is
// port.ErrImageNotFound saying how to get it (nothing was created), anything else
// the engine's classified error.
func (r *Runner) createError(ctx context.Context, image string, err error) error {
	cerr := classify(err)
	if errors.Is(cerr, port.ErrNotFound) {
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, ierr := r.cfg.api.ImageInspect(ictx, image); errors.Is(classify(ierr), port.ErrNotFound) {
			return imagepull.Missing(image, "Docker", r.cfg.pullPolicy, nil)
		}
	}
	return cerr
}

func opErr(op, runID string, err error) error {
	if err == nil {
		return nil
	}
	return &port.OpError{Op: "docker." + op, RunID: runID, Err: err}
}
