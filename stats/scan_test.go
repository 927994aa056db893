package stats

import "fmt"

// fmtSscan reads space-separated fields.
func fmtSscan(s string, args ...any) (int, error) { return fmt.Sscan(s, args...) }
