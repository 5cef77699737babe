package sandboxbridge

import (
	"errors"
	"log/slog"
	"os"
	"syscall"
)

// reapUntil reaps every exited child (orphans included) until the one with pid exits,
// and returns its exit code. It waits for SIGCHLD on chld between rounds.
func reapUntil(pid int, chld <-chan os.Signal, log *slog.Logger) int {
	for {
		for {
			var ws syscall.WaitStatus
			wpid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil || wpid <= 0 {
				break // nothing (more) has exited
			}
			if wpid == pid {
				return waitStatusCode(ws)
			}
			log.Debug("bridge: reaped an orphan", slog.Int("pid", wpid))
		}
		<-chld
	}
}
