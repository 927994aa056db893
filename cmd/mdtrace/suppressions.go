package main

import (
	"fmt"
	"io"

	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/session"
	"github.com/mdtrace/mdtrace/suppress"
)

// printSuppressions prints the rules a leak report would apply: the
// built-in list as the file it is, with what each rule is for, unless
// --no-default-suppressions, then each rule of --suppressions with where
// it comes from.
func printSuppressions(f *options.Flags, w io.Writer) error {
	rules, err := session.Suppressions(f)
	if err != nil {
		return err
	}
	if !f.NoDefaultSuppressions {
		fmt.Fprint(w, suppress.DefaultText())
	}
	for _, r := range rules {
		if r.Origin != "default" {
			fmt.Fprintf(w, "leak:%s  # %s\n", r.Pattern, r.Origin)
		}
	}
	return nil
}
