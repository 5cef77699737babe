package sandboxbridge

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestExposeForwardsUnixToLoopback: a connection to PORT.sock in the expose directory
// reaches what listens on 127.0.0.1:PORT, both ways, while the child runs; the sockets
// go with the bridge.
func TestExposeForwardsUnixToLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte("echo:" + line))
			}()
		}
	}()
	p := ln.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		code, _ := Run(ctx, Config{NoForward: true, Expose: []int{p}, ExposeDir: dir, Argv: []string{"sleep", "30"}, KillGrace: time.Second})
		done <- code
	}()
	sock := filepath.Join(dir, strconv.Itoa(p)+".sock")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("socket never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("hello\n"))
	got, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || got != "echo:hello\n" {
		t.Fatalf("got %q, %v", got, err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("bridge did not end")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

func TestExposeRefusesBadConfig(t *testing.T) {
	if _, err := exposeAll(Config{Expose: []int{80}}, nil); err == nil {
		t.Error("no expose dir accepted")
	}
	if _, err := exposeAll(Config{Expose: []int{70000}, ExposeDir: t.TempDir()}, nil); err == nil {
		t.Error("port 70000 accepted")
	}
}
