package suppress

import (
	"strings"
	"testing"
)

func TestPatterns(t *testing.T) {
	for _, tc := range []struct {
		pattern, text string
		want          bool
	}{
		{"setlocale", "setlocale", true},
		{"setlocale", "my_setlocale_wrapper", true},
		{"^setlocale$", "my_setlocale", false},
		{"^setlocale$", "setlocale", true},
		{"^_nl_load_locale", "_nl_load_locale_from_archive", true},
		{"^_nl_load_locale", "x_nl_load_locale", false},
		{"libfoo*.so", "/usr/lib/libfoo-2.so.1", true},
		{"a$", "aba", true},
		{"^a*c$", "abbbc", true},
		{"^a*c$", "abbbcd", false},
		{"(anonymous namespace)::pool::pool", "(anonymous namespace)::pool::pool()", true},
		{"x.y", "xzy", false},
		{"*", "anything", true},
	} {
		if got := compile(tc.pattern).MatchString(tc.text); got != tc.want {
			t.Errorf("%q on %q: %v, want %v", tc.pattern, tc.text, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	rules, err := Parse(strings.NewReader("# comment\n\nleak:foo\n  leak: bar*baz  \n"), "f.supp")
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 2 || rules[0].Pattern != "foo" || rules[0].Origin != "f.supp:3" || rules[1].Pattern != "bar*baz" || rules[1].Origin != "f.supp:4" {
		t.Errorf("rules %+v", rules)
	}
	for text, want := range map[string]string{
		"leak:foo\nrace:bar\n": `f.supp:2: suppression type "race": mdtrace reports leaks only (leak:PATTERN)`,
		"foo\n":                `f.supp:1: "foo" is not a suppression (leak:PATTERN)`,
		"leak:\n":              "f.supp:1: an empty pattern",
		"leak:^$\n":            "f.supp:1: an empty pattern",
	} {
		if _, err := Parse(strings.NewReader(text), "f.supp"); err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}

func TestMatch(t *testing.T) {
	rules, _ := Parse(strings.NewReader("leak:^setlocale$\nleak:libplugin.so\nleak:leaky.c\n"), "f")
	for _, tc := range []struct {
		frames []Frame
		want   int
	}{
		{[]Frame{{Func: "malloc"}, {Func: "setlocale"}, {Func: "main"}}, 0},
		{[]Frame{{Func: "plugin_init", File: "/opt/x/libplugin.so"}}, 1},
		{[]Frame{{Func: "main", Source: "/src/leaky.c"}}, 2},
		{[]Frame{{Func: "main", File: "/usr/bin/prog"}}, -1},
		{nil, -1},
	} {
		if got := Match(rules, tc.frames); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.frames, got, tc.want)
		}
	}
	d := Default()
	if len(d) < 20 || d[0].Origin != "default" {
		t.Errorf("default rules: %d, first %+v", len(d), d[0])
	}
	pool := []Frame{{File: "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30"}, {Func: "call_init", File: "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"}, {Func: "_dl_init"}}
	if Match(d, pool) != len(d)-1 {
		t.Errorf("libstdc++'s constructor's block is not suppressed")
	}
	// operator new in libstdc++, called by the program: not the runtime's own.
	if got := Match(d, []Frame{{Func: "operator new(unsigned long)", File: "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30"}, {Func: "main", File: "/usr/bin/prog"}}); got >= 0 {
		t.Errorf("a program's new is suppressed by %+v", d[got])
	}
}

// TestFirst: the matches of each frame, found apart and combined, give
// the rule a backtrace matches first, the built-in caller rule included
// only where its caller is the next frame.
func TestFirst(t *testing.T) {
	rules := append(mustParse(t, "leak:^main$\nleak:libplugin.so\n"), Default()[len(Default())-1])
	lib := Frame{File: "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30"}
	loader := Frame{Func: "call_init", File: "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"}
	plugin := Frame{Func: "init", File: "/opt/libplugin.so"}
	for _, tc := range []struct {
		frames []Frame
		want   int
	}{
		{[]Frame{lib, loader}, 2},
		{[]Frame{loader, lib}, -1},
		{[]Frame{lib, {Func: "other"}, loader}, -1},
		{[]Frame{lib, loader, plugin}, 1},
		{[]Frame{plugin, {Func: "main"}}, 0},
		{[]Frame{{Func: "main"}, plugin}, 0},
	} {
		ms := make([]Matches, len(tc.frames))
		for k, f := range tc.frames {
			ms[k] = Of(rules, f)
		}
		if got, m := First(ms), Match(rules, tc.frames); got != tc.want || m != tc.want {
			t.Errorf("%+v: First %d, Match %d, want %d", tc.frames, got, m, tc.want)
		}
	}
}

func mustParse(t *testing.T, text string) []Rule {
	t.Helper()
	rules, err := Parse(strings.NewReader(text), "f")
	if err != nil {
		t.Fatal(err)
	}
	return rules
}
