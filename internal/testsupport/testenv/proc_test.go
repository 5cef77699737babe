package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
)

// childFromAThreadEnv makes this test binary start a child from a thread other than its
// main one, print the child's pid and wait.
const childFromAThreadEnv = "AGENTSANDBOX_TESTENV_CHILD_FROM_A_THREAD"

func init() {
	if os.Getenv(childFromAThreadEnv) != "1" {
		return
	}
	started := make(chan int)
	for {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread stays the child's parent
			if syscall.Gettid() == os.Getpid() {
				started <- 0
				return
			}
			cmd := exec.Command("sleep", "60")
			if err := cmd.Start(); err != nil {
				panic(err)
			}
			started <- cmd.Process.Pid
			select {}
		}()
		if pid := <-started; pid != 0 {
			os.Stdout.WriteString(strconv.Itoa(pid) + "\n")
			select {}
		}
	}
}

// TestChildrenOfEveryThread: a child started from a thread other than the process's main
// one is its child too (Linux lists it under that thread only).
func TestChildrenOfEveryThread(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childFromAThreadEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(line[:len(line)-1])
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(child, syscall.SIGKILL)
	if got := Children(cmd.Process.Pid); !slices.Contains(got, child) {
		t.Errorf("Children(%d) = %v, want %d among them", cmd.Process.Pid, got, child)
	}
}
