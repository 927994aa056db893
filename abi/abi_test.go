package abi

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const header = "mdtrace_abi.h"

// generated runs the generator as go generate does, into a temporary
// folder: it returns the Go file and the C program that prints the values
// C gives the constants.
func generated(t *testing.T) (goFile, checkC string) {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^//go:generate go run ./gen (\S+) abi\.go$`).FindSubmatch(src)
	if m == nil || string(m[1]) != header {
		t.Fatalf("doc.go has no line //go:generate go run ./gen %s abi.go", header)
	}
	dir := t.TempDir()
	goFile, checkC = filepath.Join(dir, "abi.go"), filepath.Join(dir, "check.c")
	if out, err := exec.Command("go", "run", "./gen", "-c", checkC, header, goFile).CombinedOutput(); err != nil {
		t.Fatalf("go run ./gen: %v\n%s", err, out)
	}
	return goFile, checkC
}

// TestGeneratedUpToDate regenerates abi.go from the header, as make
// generate does, and fails when the committed one differs.
func TestGeneratedUpToDate(t *testing.T) {
	goFile, _ := generated(t)
	want, err := os.ReadFile(goFile)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("abi.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("abi/abi.go is stale: run make generate (or go generate ./abi) and commit the result")
	}
}

// cc compiles C sources with the host's compiler, the header's folder on
// the include path, and returns the program.
func cc(t *testing.T, srcs ...string) string {
	t.Helper()
	compiler := os.Getenv("CC")
	if compiler == "" {
		compiler = "cc"
	}
	if _, err := exec.LookPath(compiler); err != nil {
		t.Skipf("no C compiler (%s): cannot compare the header with Go", compiler)
	}
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "prog")
	args := append([]string{"-O2", "-Wall", "-Wextra", "-Werror", "-I", here, "-o", bin}, srcs...)
	if out, err := exec.Command(compiler, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler, strings.Join(args, " "), err, out)
	}
	return bin
}

// goConstants are the constants of abi.go, with the values Go gives them.
func goConstants(t *testing.T) map[string]constant.Value {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "abi.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := new(types.Config).Check("abi", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]constant.Value{}
	for _, name := range pkg.Scope().Names() {
		if c, ok := pkg.Scope().Lookup(name).(*types.Const); ok {
			out[name] = c.Val()
		}
	}
	return out
}

// TestValues compiles the header with the host's C compiler and compares
// the value of every constant, size and offset with Go's.
func TestValues(t *testing.T) {
	_, checkC := generated(t)
	out, err := exec.Command(cc(t, checkC)).Output()
	if err != nil {
		t.Fatal(err)
	}
	consts := goConstants(t)
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, cValue, _ := strings.Cut(sc.Text(), " ")
		v, ok := consts[name]
		seen[name] = true
		switch {
		case !ok:
			t.Errorf("%s: not in abi.go", name)
		case v.Kind() == constant.String:
			if constant.StringVal(v) != cValue {
				t.Errorf("%s: C has %q, Go %q", name, cValue, constant.StringVal(v))
			}
		default:
			u, exact := constant.Uint64Val(v)
			if !exact || strconv.FormatUint(u, 10) != cValue {
				t.Errorf("%s: C has %s, Go %v", name, cValue, v)
			}
		}
	}
	for name := range consts {
		if !seen[name] {
			t.Errorf("%s: C printed no value for it", name)
		}
	}
	if got := string(rune(CtlMagic&0xff)) + string(rune(CtlMagic>>8&0xff)) + string(rune(CtlMagic>>16&0xff)) + string(rune(CtlMagic>>24)); got != "mdt1" {
		t.Errorf("the control channel's magic is %q, not \"mdt1\" little endian", got)
	}
}

// TestFuncs compares the header's functions, compiled with the host's C
// compiler, with their Go versions on test vectors.
func TestFuncs(t *testing.T) {
	src := filepath.Join(t.TempDir(), "funcs.c")
	err := os.WriteFile(src, []byte(`#include <stdio.h>

#include "`+header+`"

/*
 * Reads "x tgid n" lines; prints mix64(x), table_buckets(x, tgid, n),
 * occ_mult(n) and occ_bit of bucket x % n.
 */
int main(void)
{
	unsigned long long x;
	unsigned tgid, n;
	md_u32 b[2];

	while (scanf("%llu %u %u", &x, &tgid, &n) == 3) {
		table_buckets(x, tgid, n, b);
		printf("%llu %u %u %llu %u\n", (unsigned long long)mix64(x), b[0], b[1],
		       (unsigned long long)occ_mult(n), occ_bit(x % n, occ_mult(n)));
	}
	return 0;
}
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	type vector struct {
		x       uint64
		tgid, n uint32
	}
	vectors := []vector{{0, 0, 2}, {1, 1, 2}, {1 << 63, 0, 3}, {^uint64(0), ^uint32(0), ^uint32(0)}, {0x7f0000001000, 4242, 4096}}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		x := rng.Uint64()
		if rng.IntN(2) == 0 {
			x = 0x7f0000000000 + rng.Uint64N(1<<32)&^15 // a heap address
		}
		vectors = append(vectors, vector{x, rng.Uint32N(1 << 22), 2 + rng.Uint32N(1<<rng.IntN(32))})
	}
	var in bytes.Buffer
	for _, v := range vectors {
		fmt.Fprintf(&in, "%d %d %d\n", v.x, v.tgid, v.n)
	}
	cmd := exec.Command(cc(t, src))
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(vectors) {
		t.Fatalf("%d answers from C for %d vectors", len(lines), len(vectors))
	}
	bad := 0
	for i, v := range vectors {
		b0, b1 := TableBuckets(v.x, v.tgid, v.n)
		mult := OccMult(v.n)
		want := fmt.Sprintf("%d %d %d %d %d", Mix64(v.x), b0, b1, mult, OccBit(uint32(v.x%uint64(v.n)), mult))
		if lines[i] != want {
			t.Errorf("x %#x tgid %d n %d: C gives mix64, buckets, occupancy multiplier and bit %s; Go %s", v.x, v.tgid, v.n, lines[i], want)
			if bad++; bad == 5 {
				t.Fatalf("and more")
			}
		}
	}
}

// TestOccBit: a tier's buckets map to bits below OccBits, in order, a bit
// each when the tier has OccBits buckets or fewer, and in runs of at most
// one more than their share when it has more: a walk reads a bit's run
// whole.
func TestOccBit(t *testing.T) {
	for _, n := range []uint32{1, 2, 3, 100, OccBits - 1, OccBits, OccBits + 1, 4916, 19661, 78644, 1 << 22, 5<<20 + 3} {
		mult := OccMult(n)
		longest := (n + OccBits - 1) / OccBits
		prev, run := OccBit(0, mult), uint32(1)
		if prev != 0 {
			t.Errorf("n %d: bucket 0 has bit %d", n, prev)
		}
		for b := uint32(1); b < n; b++ {
			bit := OccBit(b, mult)
			switch {
			case bit >= OccBits:
				t.Fatalf("n %d: bucket %d has bit %d, past %d", n, b, bit, OccBits)
			case bit < prev:
				t.Fatalf("n %d: bucket %d has bit %d, bucket %d bit %d", n, b, bit, b-1, prev)
			case bit == prev && n <= OccBits:
				t.Fatalf("n %d: buckets %d and %d share bit %d", n, b-1, b, bit)
			case bit == prev:
				if run++; run > longest+1 {
					t.Fatalf("n %d: bit %d has %d buckets or more, %d at most expected", n, bit, run, longest+1)
				}
			default:
				run = 1
			}
			prev = bit
		}
	}
}

// TestBPF compiles the header as the BPF programs do, when clang is there.
func TestBPF(t *testing.T) {
	if _, err := exec.LookPath("clang"); err != nil {
		t.Skip("clang is not installed")
	}
	src := filepath.Join(t.TempDir(), "bpf.c")
	if err := os.WriteFile(src, []byte("#include \""+header+"\"\nint x;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	here, _ := os.Getwd()
	cmd := exec.Command("clang", "-target", "bpf", "-O2", "-Wall", "-Werror", "-I", here, "-c", "-o", os.DevNull, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, out)
	}
}

// headerNames are what the header defines: macros, enumerators, enum and
// struct tags, typedefs and functions.
func headerNames(t *testing.T) map[string]string {
	t.Helper()
	src, err := os.ReadFile(header)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	add := func(kind string, re string) {
		for _, m := range regexp.MustCompile(re).FindAllSubmatch(src, -1) {
			names[string(m[1])] = kind
		}
	}
	add("macro", `(?m)^#\s*define\s+(\w+)`)
	add("enum", `\benum\s+(\w+)\s*\{`)
	add("struct", `\bstruct\s+(\w+)\s*\{`)
	add("typedef", `(?m)^typedef\s+\w+\s+(\w+)\s*;`)
	add("function", `(?m)^static inline\b.*\b(\w+)\([^()]*\)$`)
	for _, body := range regexp.MustCompile(`\benum\s+\w+\s*\{([^}]*)\}`).FindAllSubmatch(src, -1) {
		for _, m := range regexp.MustCompile(`(?m)^\s*([A-Z_][A-Z0-9_]*)\b`).FindAllSubmatch(body[1], -1) {
			names[string(m[1])] = "enumerator"
		}
	}
	delete(names, "MDTRACE_ABI_H")
	if len(names) < 50 {
		t.Fatalf("read %d names from %s", len(names), header)
	}
	return names
}

// definitions finds, in C source, the names a file defines itself.
var definitions = []*regexp.Regexp{
	regexp.MustCompile(`(?m)^\s*#\s*define\s+(\w+)`),
	regexp.MustCompile(`\b(?:enum|struct)\s+(\w+)\s*\{`),
	regexp.MustCompile(`(?m)^typedef\s[^;]*?\b(\w+)\s*;`),
	// A function's definition: name, parameters, then its body.
	regexp.MustCompile(`(?m)^\w[^;{}()]*?\b(\w+)\s*\([^;{}()]*\)\s*\{`),
}

var (
	enumBody   = regexp.MustCompile(`\benum\s*\w*\s*\{([^}]*)\}`)
	enumerator = regexp.MustCompile(`^\s*(\w+)`)
	comments   = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
)

// TestNoCopies fails when the BPF programs or the shim define one of the
// header's names themselves, rather than include it.
func TestNoCopies(t *testing.T) {
	names := headerNames(t)
	var files []string
	for _, pattern := range []string{"../bpf/*.[ch]", "../shim/*.[ch]", "../shim/tests/*.[ch]"} {
		m, _ := filepath.Glob(pattern)
		files = append(files, m...)
	}
	if len(files) < 20 {
		t.Fatalf("found %d C files in bpf/ and shim/", len(files))
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = comments.ReplaceAllFunc(src, func(c []byte) []byte { return bytes.Repeat([]byte(" "), len(c)) })
		var found [][]byte
		for _, re := range definitions {
			for _, m := range re.FindAllSubmatch(src, -1) {
				found = append(found, m[1])
			}
		}
		for _, body := range enumBody.FindAllSubmatch(src, -1) {
			for _, e := range bytes.Split(body[1], []byte(",")) {
				if m := enumerator.FindSubmatch(e); m != nil {
					found = append(found, m[1])
				}
			}
		}
		for _, name := range found {
			if kind, ok := names[string(name)]; ok {
				t.Errorf("%s defines %s, the %s of abi/%s: include the header instead", strings.TrimPrefix(f, "../"), name, kind, header)
			}
		}
	}
}
