// Package suppress decides which leaked blocks a leak report leaves out:
// the C and C++ runtimes' own blocks, which live as long as the process
// (glibc's locale data, its NSS modules, stdio's buffers, libstdc++'s
// emergency pool), and whatever the user's suppression files name, in
// LeakSanitizer's format.
//
// A suppression file has a rule a line, "leak:PATTERN"; blank lines and
// lines starting with # are ignored. A block is suppressed when a frame
// of its allocation's backtrace matches a rule's pattern by its function
// (demangled, or as the file names it), its file (the library or
// program's path) or its source file. A pattern matches anywhere in the
// text, as LeakSanitizer's do: '*' stands for any run of characters, a
// leading '^' anchors it at the start, a trailing '$' at the end.
package suppress

import (
	"bufio"
	_ "embed"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Rule is one suppression.
type Rule struct {
	Pattern string
	// Origin is where the rule comes from: "FILE:LINE", or "default"
	// for the built-in list.
	Origin string
	re     *regexp.Regexp
	// caller, for a built-in rule, is what the frame after the one that
	// matches must match by its function; the rule then matches a frame
	// by its file alone.
	caller *regexp.Regexp
}

//go:embed default.supp
var defaultText string

// Default returns the built-in rules: the runtimes' own blocks.
func Default() []Rule {
	rules, err := Parse(strings.NewReader(defaultText), "default")
	if err != nil {
		panic("the built-in suppressions: " + err.Error())
	}
	for i := range rules {
		rules[i].Origin = "default"
	}
	// The blocks libstdc++ allocates in its own constructor, called by
	// the loader (its emergency pool for exceptions, 72,704 bytes): its
	// functions there have no symbols in Debian's build, so the rule is
	// the library's frame called from the loader's call_init.
	return append(rules, Rule{Pattern: "libstdc++.so (called by the loader's call_init)", Origin: "default",
		re: regexp.MustCompile(`/libstdc\+\+\.so[^/]*$`), caller: regexp.MustCompile(`^call_init$`)})
}

// DefaultText is the built-in list as a suppression file, its comments
// saying what each rule is for.
func DefaultText() string { return defaultText }

// Parse reads the rules of a suppression file named name.
func Parse(r io.Reader, name string) ([]Rule, error) {
	var rules []Rule
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kind, pattern, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%s:%d: %q is not a suppression (leak:PATTERN)", name, n, line)
		}
		if kind != "leak" {
			return nil, fmt.Errorf("%s:%d: suppression type %q: mdtrace reports leaks only (leak:PATTERN)", name, n, kind)
		}
		pattern = strings.TrimSpace(pattern)
		if pattern == "" || pattern == "^" || pattern == "$" || pattern == "^$" {
			return nil, fmt.Errorf("%s:%d: an empty pattern", name, n)
		}
		rules = append(rules, Rule{Pattern: pattern, Origin: fmt.Sprintf("%s:%d", name, n), re: compile(pattern)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return rules, nil
}

// ReadFile reads the rules of the suppression file at path.
func ReadFile(path string) ([]Rule, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("suppressions: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("suppressions: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("suppressions: %s is not a regular file", path)
	}
	return Parse(f, path)
}

// Frame is what a backtrace's frame offers the patterns: its function
// (demangled, and as the file names it), its file and its source file,
// each "" when unknown.
type Frame struct {
	Func, RawFunc, File, Source string
}

// Match returns the index of the first rule that one of frames matches,
// or -1.
func Match(rules []Rule, frames []Frame) int {
	ms := make([]Matches, len(frames))
	for k, f := range frames {
		ms[k] = Of(rules, f)
	}
	return First(ms)
}

// Matches is what one frame matches, by rule index: the rules it matches
// alone, the built-in rules that match its file and whose caller rule its
// callee's frame needs, and the built-in rules whose caller it is. A
// backtrace's frames repeat across a process's backtraces (a compiler's
// tens of thousands of them share most of theirs), so that a report finds
// each distinct frame's once and combines them with First.
type Matches struct {
	direct, file, caller []int
}

// Of returns what frame f matches among rules.
func Of(rules []Rule, f Frame) Matches {
	var m Matches
	for i, r := range rules {
		if r.caller != nil {
			if r.re.MatchString(f.File) {
				m.file = append(m.file, i)
			}
			if r.caller.MatchString(f.Func) {
				m.caller = append(m.caller, i)
			}
			continue
		}
		for _, text := range [...]string{f.Func, f.RawFunc, f.File, f.Source} {
			if text != "" && r.re.MatchString(text) {
				m.direct = append(m.direct, i)
				break
			}
		}
	}
	return m
}

// First returns the index of the first rule that a backtrace matches,
// given its frames' Matches in order (innermost first), or -1: a rule
// matches where one frame matches it alone, a built-in caller rule where a
// frame matches it by its file and the next frame is its caller.
func First(ms []Matches) int {
	first := -1
	better := func(i int) {
		if first < 0 || i < first {
			first = i
		}
	}
	for k, m := range ms {
		if len(m.direct) > 0 {
			better(m.direct[0])
		}
		if k+1 < len(ms) {
			for _, i := range m.file {
				if slices.Contains(ms[k+1].caller, i) {
					better(i)
				}
			}
		}
	}
	return first
}

// compile turns a pattern into the regular expression it stands for:
// '*' any run of characters, a leading '^' and a trailing '$' anchors,
// anywhere in the text otherwise.
func compile(pattern string) *regexp.Regexp {
	var b strings.Builder
	if strings.HasPrefix(pattern, "^") {
		b.WriteString("^")
		pattern = pattern[1:]
	}
	end := strings.HasSuffix(pattern, "$")
	if end {
		pattern = pattern[:len(pattern)-1]
	}
	for i, part := range strings.Split(pattern, "*") {
		if i > 0 {
			b.WriteString(".*")
		}
		b.WriteString(regexp.QuoteMeta(part))
	}
	if end {
		b.WriteString("$")
	}
	return regexp.MustCompile(b.String())
}
