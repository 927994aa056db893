package output

import (
	"strings"
	"testing"
)

func TestBuildFingerprintShape(t *testing.T) {
	tests := []struct {
		name, osRelease, release, machine, want string
	}{
		{
			name: "debian",
			osRelease: `PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
`,
			release: "6.1.0-18-amd64", machine: "x86_64",
			want: "debian/bookworm/x86_64:12/6.1.0-18-amd64:user/release-keys",
		},
		{
			name:      "single quotes, comments, escapes",
			osRelease: "# comment\nID='fedora'\nVERSION_ID=\"4\\\"0\"\nbogus line\n",
			release:   "6.8.5-301.fc40.x86_64", machine: "x86_64",
			want: "fedora/unknown/x86_64:4\"0/6.8.5-301.fc40.x86_64:user/release-keys",
		},
		{
			name:    "nothing known",
			release: "", machine: "",
			want: "unknown/unknown/unknown:unknown/unknown:user/release-keys",
		},
		{
			name:      "unsafe characters",
			osRelease: "ID=\"a/b:c d\"\nVERSION_CODENAME=x\\y\nVERSION_ID=é\n",
			release:   "r'1\n", machine: "m\t",
			want: "a_b_c_d/x_y/m_:_/r_1_:user/release-keys",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := buildFingerprint([]byte(tt.osRelease), tt.release, tt.machine); got != tt.want {
				t.Errorf("buildFingerprint = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBuildFingerprintHost(t *testing.T) {
	fp := BuildFingerprint()
	t.Logf("fingerprint: %s", fp)
	if strings.ContainsAny(fp, "'\n ") || !strings.HasSuffix(fp, ":user/release-keys") || strings.Count(fp, "/") != 4 ||
		strings.Count(fp, ":") != 2 {
		t.Errorf("BuildFingerprint() = %q, not ID/CODENAME/MACHINE:VERSION_ID/RELEASE:user/release-keys", fp)
	}
}
