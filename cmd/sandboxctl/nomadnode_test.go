package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestSweepNomadNode: sweep --runtime nomad-node (a cron job's command line on a Nomad
// client machine) removes from this host's Docker the owner's container whose Nomad
// allocation is gone, and spares the one whose allocation Nomad still runs and
// another owner's. Nomad is a fake API answering for the two allocations; the
// containers are real. About 3 s.
func TestSweepNomadNode(t *testing.T) {
	needRuntimes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref, archive, err := sandboxtest.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := dockerClient("")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
		t.Fatal(err)
	}
	const live, gone = "0b1c4a6e-1111-4c2b-9d1e-000000000001", "0b1c4a6e-2222-4c2b-9d1e-000000000002"
	nomadAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/allocation/"+live {
			_ = json.NewEncoder(w).Encode(map[string]string{"ID": live, "ClientStatus": "running", "DesiredStatus": "run"})
			return
		}
		http.Error(w, "alloc not found", http.StatusNotFound)
	}))
	defer nomadAPI.Close()
	owner, other := testenv.Owner("ctl-nomadnode"), testenv.Owner("ctl-nomadnode-other")
	created := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	start := func(owner, alloc string) string {
		t.Helper()
		out, err := exec.Command("docker", "run", "-d", "--network", "none", "--entrypoint", "/agent",
			"--label", port.LabelOwner+"="+owner, "--label", port.LabelCreatedAt+"="+created,
			"--label", "com.hashicorp.nomad.alloc_id="+alloc, ref, "sleep", "120").Output()
		if err != nil {
			t.Fatalf("docker run: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	containers := func(owner string) []string {
		out, err := exec.Command("docker", "ps", "-aq", "--no-trunc", "--filter", "label="+port.LabelOwner+"="+owner).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(out))
	}
	t.Cleanup(func() {
		for _, id := range append(containers(owner), containers(other)...) {
			_ = exec.Command("docker", "rm", "-f", id).Run()
		}
	})
	liveID, goneID, otherID := start(owner, live), start(owner, gone), start(other, gone)
	code, out, errs := ctl(t, "sweep", "--owner", owner, "--runtime", "nomad-node", "--nomad-addr", nomadAPI.URL, "--older-than", "1m", "--json")
	var reps []sweepReport
	if code != exitOK || json.Unmarshal([]byte(out), &reps) != nil || len(reps) != 1 {
		t.Fatalf("sweep: exit %d %s %s", code, out, errs)
	}
	if got := reps[0]; got.Runtime != "nomad-node" || len(got.Removed) != 1 || got.Removed[0] != "container:"+goneID || len(got.Errors) > 0 {
		t.Errorf("sweep report %+v, want container:%s removed", got, goneID)
	}
	if left := containers(owner); len(left) != 1 || left[0] != liveID {
		t.Errorf("the owner's containers after the sweep: %v, want only %s (its allocation runs)", left, liveID)
	}
	if left := containers(other); len(left) != 1 || left[0] != otherID {
		t.Errorf("another owner's container was touched: %v", left)
	}
	if code, _, errs := ctl(t, "sweep", "--owner", owner, "--runtime", "nomad-node", "--nomad-addr", ""); code != exitUsage || !strings.Contains(errs, "nomad-addr") {
		t.Errorf("without a Nomad address: exit %d %q", code, errs)
	}
}
