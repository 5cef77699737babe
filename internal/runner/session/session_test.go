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

// TestDialRefusesPlantedLink: the expose directory is the sandbox's to write; a link
// planted in place of a socket never takes the host's connection elsewhere.
func TestDialRefusesPlantedLink(t *testing.T) {
	root := t.TempDir()
	dir, err := CreateDir(root, "s1", "1001:1001", 1024)
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
	dir, err := CreateDir(root, "s2", "1001:1001", 1024)
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

// TestDirNameTakesLongestRunID: a session directory is named after its sandbox, which
// holds a run ID of port.MaxRunIDLen bytes between a prefix and a suffix; the name
// rule is not the run ID's.
func TestDirNameTakesLongestRunID(t *testing.T) {
	root := t.TempDir()
	name := "agentsandbox-" + strings.Repeat("r", port.MaxRunIDLen) + "-0123abcd"
	dir, err := CreateDir(root, name, "1001:1001", 1024)
	if err != nil {
		t.Fatalf("CreateDir with a %d-byte name: %v", len(name), err)
	}
	if OwnDir(root, dir) != dir {
		t.Errorf("OwnDir refuses %s", dir)
	}
	for _, bad := range []string{"", "..", ".x", "a/b", strings.Repeat("a", maxDirName+1)} {
		if _, err := CreateDir(root, bad, "1001:1001", 1024); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("CreateDir(%q): %v, want ErrInvalidSpec", bad, err)
		}
	}
}
