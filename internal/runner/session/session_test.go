package session

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

func TestRingKeepsTail(t *testing.T) {
	r := NewRing(5)
	for _, s := range []string{"ab", "cd", "efg"} {
		_, _ = r.Write([]byte(s))
	}
	got, dropped := r.Bytes()
	if string(got) != "cdefg" || !dropped {
		t.Errorf("ring = %q dropped=%v", got, dropped)
	}
	r = NewRing(3)
	_, _ = r.Write([]byte("abc"))
	if got, dropped := r.Bytes(); string(got) != "abc" || dropped {
		t.Errorf("exact fit = %q %v", got, dropped)
	}
	_, _ = r.Write([]byte("0123456789"))
	if got, dropped := r.Bytes(); string(got) != "789" || !dropped {
		t.Errorf("big write = %q %v", got, dropped)
	}
}

// TestDialRefusesPlantedLink: the expose directory is the sandbox's to write; a link
// planted in place of a socket never takes the host's connection elsewhere.
func TestDialRefusesPlantedLink(t *testing.T) {
	root := t.TempDir()
	dir, err := CreateDir(root, "s1", "1001:1001")
	if err != nil {
		t.Fatal(err)
	}
	hostSock := filepath.Join(t.TempDir(), "host.sock")
	ln, err := net.Listen("unix", hostSock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Symlink(hostSock, filepath.Join(ExposeDir(dir), SocketName(80))); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(context.Background(), dir, 80); err == nil {
		t.Fatal("Dial followed a planted link to a host socket")
	}
	if err := os.WriteFile(filepath.Join(ExposeDir(dir), SocketName(81)), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(context.Background(), dir, 81); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("Dial of a regular file: %v", err)
	}
	real, err := net.Listen("unix", filepath.Join(ExposeDir(dir), SocketName(82)))
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	c, err := Dial(context.Background(), dir, 82)
	if err != nil {
		t.Fatalf("Dial of a real socket: %v", err)
	}
	c.Close()
}

func TestKeepByHeartbeat(t *testing.T) {
	root := t.TempDir()
	dir, err := CreateDir(root, "s2", "1001:1001")
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	lbls := map[string]string{port.LabelKind: port.KindSession, port.LabelSessionDir: dir, port.LabelCreatedAt: old}
	cutoff := time.Now().Add(-10 * time.Minute)
	if !Keep(root, lbls, cutoff) {
		t.Error("a session created an hour ago with a fresh heartbeat was not kept")
	}
	if err := AgeHeartbeat(dir, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if Keep(root, lbls, cutoff) {
		t.Error("a session whose heartbeat is an hour old was kept")
	}
	// A label pointing elsewhere is not trusted: creation time decides.
	lbls[port.LabelSessionDir] = "/etc"
	if Keep(root, lbls, cutoff) {
		t.Error("a foreign session dir label was used")
	}
	if OwnDir(root, filepath.Join(root, "..", "x")) != "" || OwnDir(root, "/etc") != "" {
		t.Error("OwnDir accepted a path outside the root")
	}
}

func TestParseLabelsRoundTrip(t *testing.T) {
	root := "/var/lib/s"
	spec := port.SessionSpec{RunSpec: port.RunSpec{RunID: "r1", User: "1001:1001", WorkspaceDir: "/w"}, Expose: []int{80, 7000}, LogLimit: 99}
	lbls := Labels(spec, root+"/agentsandbox-r1-00", time.Unix(100, 0))
	lbls[port.LabelOwner], lbls[port.LabelKind], lbls[port.LabelRunID] = "o", port.KindSession, "r1"
	m, err := ParseLabels("o", root, lbls)
	if err != nil || m.RunID != "r1" || len(m.Ports) != 2 || m.Ports[1] != 7000 || m.LogLimit != 99 || m.Workspace != "/w" || !m.Deadline.Equal(time.Unix(100, 0)) {
		t.Fatalf("ParseLabels = %+v, %v", m, err)
	}
	if _, err := ParseLabels("other", root, lbls); !errors.Is(err, port.ErrNotFound) {
		t.Errorf("another owner's session: %v", err)
	}
	lbls[port.LabelExpose] = "80,x"
	if _, err := ParseLabels("o", root, lbls); err == nil || !strings.Contains(err.Error(), "expose") {
		t.Errorf("bad expose label: %v", err)
	}
}
