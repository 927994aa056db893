package options

import (
	"io"
	"strings"
	"testing"
)

func TestOptionStringFromFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--", "prog"}, "", "backtrace leak_track"},
		{[]string{"--", "prog"}, "bt=8", "bt=8"},
		{[]string{"-o", "backtrace=4", "--", "prog"}, "leak_track", "backtrace=4"},
		{[]string{"-o", "", "--leak-track", "--", "prog"}, "guard", "leak_track"},
		{[]string{"--backtrace", "--leak-track", "-p", "12"}, "", "backtrace leak_track"},
		{[]string{"--leak-track", "--backtrace=32", "--backtrace-dump-prefix=/tmp/h", "--", "p"}, "", "leak_track backtrace=32 backtrace_dump_prefix=/tmp/h"},
		{[]string{"-o", "bt", "--backtrace-size", "100", "--leak-track=false", "--", "p"}, "", "bt backtrace_size=100"},
		{[]string{"--", "prog", "--leak-track"}, "", "backtrace leak_track"},
	} {
		t.Setenv(EnvVar, tc.env)
		f, err := ParseFlags(tc.args, io.Discard)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if f.Options != tc.want {
			t.Errorf("%v (env %q): options %q, want %q", tc.args, tc.env, f.Options, tc.want)
		}
	}
}

func TestCommandKeepsItsFlags(t *testing.T) {
	f, err := ParseFlags([]string{"-o", "bt", "--", "prog", "-p", "3", "--backtrace"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.Command, " "); got != "prog -p 3 --backtrace" || f.PID != 0 {
		t.Errorf("command %q, pid %d", got, f.PID)
	}
}

func TestEveryOptionIsAFlag(t *testing.T) {
	for _, o := range Options {
		arg := "--" + strings.ReplaceAll(o.Name, "_", "-")
		if o.Value == ValueRequired {
			arg += "=5"
		}
		f, err := ParseFlags([]string{arg, "-p", "1"}, io.Discard)
		if err != nil {
			t.Errorf("%s: %v", arg, err)
			continue
		}
		want := o.Name
		if o.Value == ValueRequired {
			want += "=5"
		}
		if f.Options != want {
			t.Errorf("%s gives %q, want %q", arg, f.Options, want)
		}
		if _, err := ParseConfig(f.Options); err != nil {
			t.Errorf("%s: %v", arg, err)
		}
	}
}

func TestUnsupportedOptions(t *testing.T) {
	for _, o := range Options {
		s := o.Name
		if o.Value == ValueRequired {
			s += "=5"
		}
		_, err := ParseOptions(s, "")
		if supported[o.Name] || shimOptions[o.Name] {
			if err != nil {
				t.Errorf("%s: %v", s, err)
			}
		} else if err == nil || err.Error() != "option "+o.Name+" is not supported yet" {
			t.Errorf("%s: error %v", s, err)
		}
	}
	// Every option of Android's is implemented.
	if _, err := ParseOptions("front_guard check_unreachable_on_signal", ""); err != nil {
		t.Errorf("check_unreachable_on_signal: %v", err)
	}
	// Shim options need a launched command.
	if _, err := ParseOptions("backtrace guard=8", "-p"); err == nil || err.Error() != "option guard rewrites memory through the preloaded shim: it needs a command launched by mdtrace, not -p" {
		t.Errorf("guard with -p: %v", err)
	}
}
