package github_test

import (
	"context"
	"fmt"
	"os"

	"github.com/agentsandbox/sandbox/adapters/github"
	"github.com/agentsandbox/sandbox/port"
)

// A pull request is opened only when the host asks, after the relay pushed the branch.
func ExampleNewPullRequester() {
	prs, err := github.NewPullRequester(github.WithToken(func(ctx context.Context, repo string) (string, error) {
		return os.Getenv("GITHUB_TOKEN"), nil // a host-side secret; never given to the sandbox
	}))
	if err != nil {
		panic(err)
	}
	var _ port.PullRequester = prs
	repo, _ := github.RepoFromURL("https://github.com/acme/widgets.git")
	fmt.Println(repo)
	// Output: acme/widgets
}
