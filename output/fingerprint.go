package output

import (
	"bufio"
	"bytes"
	"os"
	"strings"
)

// osReleasePaths are the files that describe the operating system, in the
// order os-release(5) says to try them.
var osReleasePaths = []string{"/etc/os-release", "/usr/lib/os-release"}

// BuildFingerprint returns the text mdtrace writes in the "Build
// fingerprint" line of a heap dump, where Android writes the
// ro.build.fingerprint property (brand/product/device:release/id/
// incremental:type/tags). It has the shape
//
//	ID/VERSION_CODENAME/MACHINE:VERSION_ID/RELEASE:user/release-keys
//
// where ID, VERSION_CODENAME and VERSION_ID come from os-release(5)
// (/etc/os-release, or else /usr/lib/os-release), and RELEASE and MACHINE
// are the kernel release and machine of uname(2); for example
// "debian/bookworm/x86_64:12/6.1.0-18-amd64:user/release-keys". A field
// that is missing or empty is "unknown", and slashes, colons, single
// quotes, backslashes, white space, control and non-ASCII characters in a
// field become underscores, so that the fingerprint keeps its shape and the
// quoted header line stays on one line. It never fails.
func BuildFingerprint() string {
	var osRelease []byte
	for _, p := range osReleasePaths {
		if b, err := os.ReadFile(p); err == nil {
			osRelease = b
			break
		}
	}
	release, machine := uname()
	return buildFingerprint(osRelease, release, machine)
}

// buildFingerprint builds the fingerprint from the text of os-release and
// the uname fields.
func buildFingerprint(osRelease []byte, release, machine string) string {
	vars := parseOSRelease(osRelease)
	f := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return strings.Map(func(r rune) rune {
			if r <= ' ' || r >= 0x7f || strings.ContainsRune(`/:'\`, r) {
				return '_'
			}
			return r
		}, s)
	}
	return f(vars["ID"]) + "/" + f(vars["VERSION_CODENAME"]) + "/" + f(machine) + ":" +
		f(vars["VERSION_ID"]) + "/" + f(release) + ":user/release-keys"
}

// parseOSRelease reads the KEY=VALUE assignments of an os-release file.
// Values may be quoted with double quotes (with backslash escapes) or single
// quotes; comments and malformed lines are skipped.
func parseOSRelease(b []byte) map[string]string {
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok || key == "" {
			continue
		}
		vars[key] = unquoteOSRelease(val)
	}
	return vars
}

func unquoteOSRelease(v string) string {
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
		return v[1 : len(v)-1]
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
		var sb strings.Builder
		for i := 0; i < len(v); i++ {
			if v[i] == '\\' && i+1 < len(v) {
				i++
			}
			sb.WriteByte(v[i])
		}
		return sb.String()
	}
	return v
}
