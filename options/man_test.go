package options

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestManPageUpToDate: the committed man page is the one the flag
// definitions give (make generate writes it), and it has an entry for
// every flag, under its own name and with its value's name.
func TestManPageUpToDate(t *testing.T) {
	var want bytes.Buffer
	if err := WriteManPage(&want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", ManPage))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("%s is stale: run make generate and commit the result", ManPage)
	}
	page := want.String()
	n := 0
	newFlagSet(&Flags{}).VisitAll(func(fl *pflag.Flag) {
		n++
		entry := `\fB\-\-` + roff(fl.Name) + `\fR`
		if fl.Shorthand != "" {
			entry = `\fB\-` + fl.Shorthand + `\fR, ` + entry
		}
		if !strings.Contains(page, ".TP\n"+entry) {
			t.Errorf("no entry for --%s", fl.Name)
		}
	})
	if got := strings.Count(page, "\n.TP\n"); got != n+len(helpUsage) {
		t.Errorf("%d entries for %d flags and %d forms of the command line", got, n, len(helpUsage))
	}
	for _, want := range []string{
		`\fB\-\-log\fR \fIFILE\fR` + "\nWrite the malloc_debug log to FILE (default: standard error).\n",
		`\fB\-\-backtrace\fR[=\fIN\fR]` + "\nRecord the backtrace of every allocation, up to this many frames (default 16, max 256). In the option string: backtrace, or bt.\n",
		`\fB\-\-max\-allocs\fR \fIN\fR` + "\n",
		"(default 4194304).\n",
		"\n.SH EXIT STATUS\n",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page has no %q", want)
		}
	}
}

// TestManPageFormats: groff reads the page without a warning.
func TestManPageFormats(t *testing.T) {
	if _, err := exec.LookPath("groff"); err != nil {
		t.Skip("groff is not installed: cannot check the man page's markup")
	}
	cmd := exec.Command("groff", "-man", "-ww", "-z", filepath.Join("..", ManPage))
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("groff: %v\n%s", err, out)
	}
}
