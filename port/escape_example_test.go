package port_test

import (
	"fmt"

	"github.com/agentsandbox/sandbox/port"
)

// An agent named a file so that it reads backwards in a terminal (U+202E) and hides
// a C1 control; the escaped name shows every byte.
func ExampleEscapeText() {
	fmt.Println(port.EscapeText("invoice\u202egpj.exe\u0085"))
	fmt.Println(port.EscapeText("plain café"))
	// Output:
	// invoice\u202egpj.exe\u0085
	// plain café
}
