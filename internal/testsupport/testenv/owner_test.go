package testenv

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func TestOwner(t *testing.T) {
	o := Owner("pool")
	if !strings.HasPrefix(o, "pool-t") || OwnerDead(o) {
		t.Fatalf("Owner = %q, dead %v", o, OwnerDead(o))
	}
	if Owner("x") == Owner("y") || !strings.HasSuffix(Owner("x"), strings.TrimPrefix(o, "pool")) {
		t.Errorf("owners of one process share one tag: %q %q", Owner("x"), o)
	}
	// A process that has ended: its owners are dead.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := "pool-t" + itoa(cmd.Process.Pid) + "-1"
	if !OwnerDead(dead) {
		t.Errorf("%s not dead", dead)
	}
	// This process with a wrong start time (a reused pid) is not this process.
	if !OwnerDead("pool-t" + itoa(os.Getpid()) + "-1") {
		t.Error("a reused pid counted as alive")
	}
	for _, o := range []string{"porttest", "my-service", "pool-tx-1", ""} {
		if OwnerDead(o) {
			t.Errorf("an untagged owner %q counted as a dead test's", o)
		}
	}
	if got := os.Getenv(tagEnv); !strings.HasSuffix(o, got) {
		t.Errorf("children inherit %q, owners end %q", got, o)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
