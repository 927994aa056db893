package stacks

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestDemangle(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"_ZN3geo5ArenaIcE3rawEm", "geo::Arena<char>::raw(unsigned long)"},
		{"_Z3foov", "foo()"},
		{"_ZNSt6vectorIiSaIiEE9push_backERKi", "std::vector<int, std::allocator<int>>::push_back(int const&)"},
		{"_ZN12_GLOBAL__N_13fooEv", "(anonymous namespace)::foo()"},
		{"_ZNK3Foo3getEv", "Foo::get() const"},
		{"_ZL3bazPKc", "baz(char const*)"},
		{"_Z3foov.cold", "foo() (.cold)"},
		{"_ZdlPvm", "operator delete(void*, unsigned long)"},
		{"_Znwm", "operator new(unsigned long)"},
		// Not mangled: unchanged.
		{"", ""},
		{"main", "main"},
		{"malloc", "malloc"},
		{"_start", "_start"},
		{"__libc_start_main", "__libc_start_main"},
		{"_", "_"},
		// Invalid: unchanged.
		{"_Z", "_Z"},
		{"_ZN", "_ZN"},
		{"_ZN3geo", "_ZN3geo"},
		{"_Z9", "_Z9"},
		{"_ZN3geo5ArenaIcE3raw", "_ZN3geo5ArenaIcE3raw"},
		{"_Z1", "_Z1"},
		{"_ZN3geo5ArenaIcE3rawEm\xff", "_ZN3geo5ArenaIcE3rawEm\xff"},
		{"_R", "_R"},
		{"_Z" + strings.Repeat("N1a", 5000), "_Z" + strings.Repeat("N1a", 5000)},
	} {
		if got := Demangle(tc.in); got != tc.want {
			t.Errorf("Demangle(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestDemangleLLVM compares Demangle with llvm-cxxfilt, LLVM's demangler,
// which is what Android uses.
func TestDemangleLLVM(t *testing.T) {
	if _, err := exec.LookPath("llvm-cxxfilt"); err != nil {
		t.Skip("llvm-cxxfilt is not installed")
	}
	names := []string{
		"_ZN3geo5ArenaIcE3rawEm",
		"_ZNSt6vectorIiSaIiEE9push_backERKi",
		"_ZNSt3__16vectorIiNS_9allocatorIiEEE9push_backERKi",
		"_ZN12_GLOBAL__N_13fooEv",
		"_Z3foov.cold",
		"_ZNK3Foo3getEv",
		"_ZZ4mainE1x",
		"_ZN5Outer5InnerC2Ev",
		"_ZN5OuterD0Ev",
		"_Z1fIJidEEvDpT_",
		"_ZNSt8functionIFvvEEC2ERKS1_",
	}
	out := run(t, "llvm-cxxfilt", names...)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(names) {
		t.Fatalf("llvm-cxxfilt printed %d lines for %d names", len(lines), len(names))
	}
	for i, n := range names {
		// LLVM before 15 put a space between closing angle brackets;
		// Android's current LLVM does not.
		if got := Demangle(n); got != strings.ReplaceAll(lines[i], "> >", ">>") {
			t.Errorf("Demangle(%q) = %q, llvm-cxxfilt says %q", n, got, lines[i])
		}
	}
}

func TestDemangleLive(t *testing.T) {
	needTools(t, "g++")
	dir := t.TempDir()
	bin := filepath.Join(dir, "arena")
	src, err := filepath.Abs("testdata/arena.cc")
	if err != nil {
		t.Fatal(err)
	}
	run(t, "g++", "-O0", "-fPIE", "-pie", "-o", bin, src)
	pid, addrs := startFixture(t, bin)
	maps, err := ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	fr := NewSymbolizer().Symbolize(pid, maps, []uint64{addrs["raw"] + 4})[0]
	if fr.Func != "_ZN3geo5ArenaIcE3rawEm" || fr.FuncOff != 4 {
		t.Errorf("got %+v, want Func _ZN3geo5ArenaIcE3rawEm, FuncOff 4", fr)
	}
	if got, want := Demangle(fr.Func), "geo::Arena<char>::raw(unsigned long)"; got != want {
		t.Errorf("Demangle(%q) = %q, want %q", fr.Func, got, want)
	}
}

func FuzzDemangle(f *testing.F) {
	for _, s := range []string{"_ZN3geo5ArenaIcE3rawEm", "_Z3foov.cold", "_ZNSt6vectorIiSaIiEE9push_backERKi", "main", "_R"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		Demangle(s) // must not panic
	})
}
