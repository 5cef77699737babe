package litellm_test

import (
	"context"
	"fmt"
	"time"

	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
)

// Page through a day of spend logs of one end user.
func ExampleClient_SpendLogsV2() {
	fake := litellmtest.NewServer()
	defer fake.Close()
	day := time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)
	fake.Synthesize(2500, day, time.Second, "acct-a", "acct-b")

	c, err := litellm.New(litellm.WithBaseURL(fake.URL), litellm.WithMasterKey(fake.MasterKey()))
	if err != nil {
		panic(err)
	}
	rows, err := c.SpendLogsV2(context.Background(), litellm.SpendLogsQuery{
		Start: day, End: day.Add(24*time.Hour - time.Second), EndUser: "acct-a"})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(rows), rows[0].RequestID, rows[0].EndUser)
	// Output: 1250 chatcmpl-synth-0002498 acct-a
}
