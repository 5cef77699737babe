// Command agent is a test agent that commits in /workspace with go-git (the sandbox has
// no git). "commit N" makes N commits, each writing notes/N.txt; "commit N fail" then
// exits 3, as an agent that committed and then failed. It prints its environment
// first so tests can scan it for secrets.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
)

func main() {
	for _, e := range os.Environ() {
		fmt.Println("env", e)
	}
	if len(os.Args) < 3 || os.Args[1] != "commit" {
		fmt.Fprintln(os.Stderr, "usage: agent commit N")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fail(err)
	}
	repo, err := git.PlainOpen("/workspace")
	if err != nil {
		fail(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		fail(err)
	}
	when := time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)
	for i := 1; i <= n; i++ {
		name := filepath.Join("notes", strconv.Itoa(i)+".txt")
		if err := os.MkdirAll("/workspace/notes", 0o755); err != nil {
			fail(err)
		}
		if err := os.WriteFile(filepath.Join("/workspace", name), []byte(fmt.Sprintf("note %d\n", i)), 0o644); err != nil {
			fail(err)
		}
		if _, err := wt.Add(name); err != nil {
			fail(err)
		}
		sig := &object.Signature{Name: "Agent", Email: "agent@example.com", When: when.Add(time.Duration(i) * time.Minute)}
		h, err := wt.Commit(fmt.Sprintf("note %d", i), &git.CommitOptions{Author: sig, Committer: sig})
		if err != nil {
			fail(err)
		}
		fmt.Println("commit", h)
	}
	if len(os.Args) > 3 {
		switch os.Args[3] {
		case "fail":
			fmt.Fprintln(os.Stderr, "agent: failing after its commits")
			os.Exit(3)
		case "forge":
			// One more commit with a forged author, committer and signature header.
			forged := &object.Signature{Name: "Linus Torvalds", Email: "torvalds@linux-foundation.org", When: when}
			h, err := wt.Commit("forged", &git.CommitOptions{Author: forged, Committer: forged, AllowEmptyCommits: true, Signer: fakeSigner{}})
			if err != nil {
				fail(err)
			}
			fmt.Println("commit", h)
		case "fifo":
			// A FIFO where git keeps packed-refs: an exporter that opens it blocks.
			_ = os.Remove("/workspace/.git/packed-refs")
			if err := syscall.Mkfifo("/workspace/.git/packed-refs", 0o644); err != nil {
				fail(err)
			}
		}
	}
}

// fakeSigner signs with a signature no key made: what a forged gpgsig header looks like.
type fakeSigner struct{}

func (fakeSigner) Sign(io.Reader) ([]byte, error) {
	return []byte("-----BEGIN PGP SIGNATURE-----\n\niQEzBAABCAAdFiEEforgedforgedforgedforgedforgedAAoJEforged\n=AbCd\n-----END PGP SIGNATURE-----\n"), nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "agent:", err)
	os.Exit(1)
}
