// Command agent is the quickstart's example agent: it reads the run's messages from
// /workspace/.cogni/messages.json, asks the model in COGNI_MODEL through
// OPENAI_BASE_URL (the sandbox's bridge to its proxy, as the OpenAI SDKs read it),
// streams the answer and prints it, with its progress on stderr. It holds no key: the
// proxy adds it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
)

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func main() {
	raw, err := os.ReadFile("/workspace/.cogni/messages.json")
	if err != nil {
		die("reading messages: %v", err)
	}
	var msgs []message
	if err := json.Unmarshal(raw, &msgs); err != nil {
		die("parsing messages: %v", err)
	}
	body, _ := json.Marshal(map[string]any{
		"model": os.Getenv("COGNI_MODEL"), "messages": msgs, "stream": true,
		"stream_options": map[string]bool{"include_usage": true},
	})
	fmt.Fprintf(os.Stderr, "asking %s through %s\n", os.Getenv("COGNI_MODEL"), os.Getenv("OPENAI_BASE_URL"))
	resp, err := http.Post(os.Getenv("OPENAI_BASE_URL")+"/chat/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		die("calling the model: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		die("the model answered %s", resp.Status)
	}
	var answer strings.Builder
	chunks := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			die("bad chunk %q: %v", data, err)
		}
		if chunk.Error != nil {
			die("stream error: %s", chunk.Error.Message)
		}
		chunks++
		for _, c := range chunk.Choices {
			answer.WriteString(c.Delta.Content)
		}
	}
	if err := sc.Err(); err != nil {
		die("stream broken: %v", err)
	}
	fmt.Fprintf(os.Stderr, "received %d chunks\n", chunks)
	fmt.Println(answer.String())
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "agent: "+format+"\n", args...)
	os.Exit(1)
}
