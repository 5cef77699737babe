package main

import (
	"fmt"
	"strconv"
	"strings"
)

// exposeFlag collects repeated -expose PORT flags.
type exposeFlag []int

func (e *exposeFlag) String() string {
	s := make([]string, len(*e))
	for i, p := range *e {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

func (e *exposeFlag) Set(v string) error {
	p, err := strconv.Atoi(v)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q is not in [1, 65535]", v)
	}
	*e = append(*e, p)
	return nil
}
