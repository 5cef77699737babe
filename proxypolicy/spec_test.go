package proxypolicy

import (
	"errors"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

func TestValidateSpec(t *testing.T) {
	good := port.ProxySpec{RunID: "run-1", Upstream: "http://127.0.0.1:4000", APIKey: "sk-1", Attribution: port.Attribution{BillingAccountID: "acct"}}
	if p, u, err := ValidateSpec(good); err != nil || p == nil || u.Host != "127.0.0.1:4000" {
		t.Fatalf("good spec: %v %v %v", p, u, err)
	}
	for name, mut := range map[string]func(*port.ProxySpec){
		"no account":     func(s *port.ProxySpec) { s.Attribution.BillingAccountID = "" },
		"not a url":      func(s *port.ProxySpec) { s.Upstream = "::" },
		"ftp":            func(s *port.ProxySpec) { s.Upstream = "ftp://h/" },
		"no host":        func(s *port.ProxySpec) { s.Upstream = "http:///x" },
		"user info":      func(s *port.ProxySpec) { s.Upstream = "http://u:p@h/" },
		"query":          func(s *port.ProxySpec) { s.Upstream = "http://h/?a=1" },
		"negative calls": func(s *port.ProxySpec) { s.Budget.MaxCalls = -1 },
		"reserved label": func(s *port.ProxySpec) { s.Labels = map[string]string{port.LabelPrefix + "x": "y"} },
	} {
		s := good
		mut(&s)
		if _, _, err := ValidateSpec(s); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", name, err)
		}
	}
}
