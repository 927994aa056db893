// Command gen writes mdtrace's man page (go generate ./options, or make
// generate) from the flag definitions: gen FILE.
package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/mdtrace/mdtrace/options"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen FILE")
		os.Exit(2)
	}
	var b bytes.Buffer
	if err := options.WriteManPage(&b); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[1], b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
