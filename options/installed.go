package options

import (
	"os"
	"path/filepath"
)

// installDirs are where mdtrace looks for the files it ships beside it (the
// shim, mdreplay), relative to the folder of its executable: next to it,
// as make build leaves them, and where make install puts them
// (PREFIX/bin/mdtrace, PREFIX/lib/mdtrace/NAME).
var installDirs = []string{".", "../lib/mdtrace"}

// Installed returns the path of the file name shipped with mdtrace, the
// first regular file of that name in installDirs, or "" and the places
// it tried.
func Installed(name string) (path string, tried []string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	for _, dir := range installDirs {
		path := filepath.Join(filepath.Dir(exe), dir, name)
		if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
			return path, nil, nil
		}
		tried = append(tried, path)
	}
	return "", tried, nil
}
