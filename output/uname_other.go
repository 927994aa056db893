//go:build !linux

package output

// uname reports no kernel release or machine outside Linux, where mdtrace
// does not trace; the fingerprint shows them as "unknown".
func uname() (release, machine string) { return "", "" }
