package openclaw_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
)

func ExampleNewConfig() {
	flash, err := openclaw.NewModel("gemini-2.5-flash", "Gemini 2.5 Flash", 1048576, 65536)
	if err != nil {
		panic(err)
	}
	cfg, err := openclaw.NewConfig(
		openclaw.WithModels(flash),
		openclaw.WithSetting("agents.defaults.thinkingDefault", "low"),
	)
	if err != nil {
		panic(err)
	}
	for _, p := range []string{"agents.defaults.sandbox.mode", "cron.enabled", "agents.defaults.heartbeat.every", "models.mode", "models.providers.litellm.baseUrl"} {
		v, _ := cfg.Lookup(p)
		fmt.Printf("%s = %v\n", p, v)
	}
	fmt.Println("model:", cfg.ModelRef())

	// A setting that would break an invariant is refused, naming the setting.
	_, err = openclaw.NewConfig(openclaw.WithModels(flash), openclaw.WithSetting("cron.enabled", true))
	var se *openclaw.SettingError
	if errors.As(err, &se) {
		fmt.Println("refused:", se.Setting, se.Invariant, errors.Is(err, port.ErrInvalidSpec))
	}
	// Output:
	// agents.defaults.sandbox.mode = off
	// cron.enabled = false
	// agents.defaults.heartbeat.every = 0m
	// models.mode = replace
	// models.providers.litellm.baseUrl = http://127.0.0.1:8080/v1
	// model: litellm/gemini-2.5-flash
	// refused: cron.enabled cron-off true
}

func ExampleOneShot() {
	flash, _ := openclaw.NewModel("gemini-2.5-flash", "", 1048576, 65536)
	cfg, err := openclaw.NewConfig(openclaw.WithModels(flash))
	if err != nil {
		panic(err)
	}
	ws, err := os.MkdirTemp("", "workspace")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(ws)

	o := openclaw.OneShot{SessionID: "run-42"}
	// The host writes config, workspace files and prompt into the workspace...
	if err := o.Prepare(ws, cfg, openclaw.Files{Agents: "You fix bugs."}, "Fix the failing test."); err != nil {
		panic(err)
	}
	// ...and the run spec gets the argv and environment. The prompt is not in argv.
	spec := port.RunSpec{RunID: "run-42", Image: "openclaw-agent", WorkspaceDir: ws}
	if err := o.Apply(&spec); err != nil {
		panic(err)
	}
	fmt.Println(spec.Argv)
	fmt.Println(spec.Env["OPENCLAW_CONFIG_PATH"])
	// Output:
	// [openclaw agent --local --agent main --session-id run-42 --message-file /workspace/.openclaw/prompt.txt --json --timeout 540]
	// /workspace/.openclaw/openclaw.json
}

func ExampleParseResult() {
	stdout := []byte(`{"payloads":[{"text":"Done: the test passes.","mediaUrl":null}],
	  "meta":{"durationMs":12450,"agentMeta":{"sessionId":"run-42","provider":"litellm","model":"gemini-2.5-flash",
	  "usage":{"input":3200,"output":890,"total":4090}},"aborted":false,"stopReason":"stop"}}`)
	res, err := openclaw.ParseResult(0, stdout, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Text())
	fmt.Println(res.Meta.Duration(), res.Meta.AgentMeta.Usage.Total)

	_, err = openclaw.ParseResult(143, nil, []byte("terminated"))
	fmt.Println(errors.Is(err, openclaw.ErrInterrupted), err)
	// Output:
	// Done: the test passes.
	// 12.45s 4090
	// true openclaw exited 143 (SIGTERM) without a JSON envelope: ended by a signal; stderr: terminated
}
