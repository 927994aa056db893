package mdtrace

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGeneratedUpToDate regenerates the BPF objects with clang, as
// `make generate` does, and fails when the committed ones differ.
func TestGeneratedUpToDate(t *testing.T) {
	if _, err := exec.LookPath("clang"); err != nil {
		t.Skip("clang is not installed: cannot check that the committed BPF objects are up to date")
	}
	src, err := os.ReadFile("gen.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := regexp.MustCompile(`(?m)^//go:generate go tool bpf2go (.*)$`).FindAllSubmatch(src, -1)
	if len(lines) == 0 {
		t.Fatal("no bpf2go line in gen.go")
	}
	tmp := t.TempDir()
	for _, m := range lines {
		args := strings.Replace(string(m[1]), "-output-dir bpf", "-output-dir "+tmp, 1)
		if args == string(m[1]) {
			t.Fatal("gen.go does not write to -output-dir bpf")
		}
		cmd := exec.Command("sh", "-c", "go tool bpf2go "+args)
		cmd.Env = append(os.Environ(), "GOPACKAGE=mdtrace")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("bpf2go: %v\n%s", err, out)
		}
	}
	gen, _ := filepath.Glob(filepath.Join(tmp, "*_bpfel.*"))
	if len(gen) != 2*len(lines) {
		t.Fatalf("bpf2go wrote %v", gen)
	}
	for _, g := range gen {
		want, _ := os.ReadFile(g)
		got, err := os.ReadFile(filepath.Join("bpf", filepath.Base(g)))
		if err != nil {
			t.Fatalf("%s is not committed: %v", filepath.Base(g), err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("bpf/%s is stale: run make generate and commit the result", filepath.Base(g))
		}
	}
}
