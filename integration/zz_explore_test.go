package integration

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/litellm/litellmtest"
)

func TestZZExploreSlotMemory(t *testing.T) {
	ctx := context.Background()
	_ = ctx
	fake := litellmtest.NewServer(litellmtest.WithReply(conversationReply))
	defer fake.Close()
	runner, image, appDir := openClawRunner(t, dockerRunnerFor)
	c := newOpenClawConversation(t, runner, image, appDir, fake, os.Getenv("ZZ_WARM") != "")
	c.waitReady(t)
	out, _ := exec.Command("sh", "-c", `for c in $(docker ps -q --filter label=dev.agentsandbox.pool); do pid=$(docker inspect -f '{{.State.Pid}}' $c); cg=$(grep memory /proc/$pid/cgroup | cut -d: -f3); echo "== $c $cg"; grep -E '^(total_)?(rss|cache|mapped_file|shmem|active_anon|inactive_anon|active_file|inactive_file) ' /sys/fs/cgroup/memory$cg/memory.stat; cat /sys/fs/cgroup/memory$cg/memory.usage_in_bytes; ps -o pid,rss,vsz,cmd --ppid $pid; for p in $(pgrep -P $pid); do grep -E 'VmRSS|RssAnon|RssFile|Threads' /proc/$p/status; done; done`).CombinedOutput()
	t.Log(strings.TrimSpace(string(out)))
}
