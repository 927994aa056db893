//go:build linux

package session

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// runAs is the user a launched command runs as (-u USER).
type runAs struct {
	name, home string
	cred       *syscall.Credential
}

// lookupUser finds USER, a name or a numeric uid, in the user and group
// files (/etc/passwd, /etc/group: mdtrace is built without cgo, so the
// name service's other sources are not asked).
func lookupUser(name string) (*runAs, error) {
	u, err := user.Lookup(name)
	if _, isID := strconv.ParseUint(name, 10, 32); err != nil && isID == nil {
		u, err = user.LookupId(name)
	}
	if err != nil {
		var unknown user.UnknownUserError
		var unknownID user.UnknownUserIdError
		if errors.As(err, &unknown) || errors.As(err, &unknownID) {
			return nil, fmt.Errorf("--user %s: no such user in /etc/passwd", name)
		}
		return nil, fmt.Errorf("--user %s: %w", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("--user %s: uid %q, gid %q are not numbers", name, u.Uid, u.Gid)
	}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("--user %s: its groups: %w", name, err)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	for _, id := range ids {
		g, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("--user %s: group id %q is not a number", name, id)
		}
		if !slices.Contains(cred.Groups, uint32(g)) {
			cred.Groups = append(cred.Groups, uint32(g))
		}
	}
	return &runAs{name: u.Username, home: u.HomeDir, cred: cred}, nil
}

// env is the command's environment (nil: mdtrace's) with the user's HOME,
// USER and LOGNAME, as a login as the user has them.
func (u *runAs) env(env []string) []string {
	if env == nil {
		env = os.Environ()
	}
	set := []string{"HOME=" + u.home, "USER=" + u.name, "LOGNAME=" + u.name}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		key, _, _ := strings.Cut(kv, "=")
		if key != "HOME" && key != "USER" && key != "LOGNAME" {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}

// canRead reports why the user cannot read the file at path, by the
// permission bits of the file and of each folder on its way (access
// control lists are not read): the loader, running as the user, must open
// the shim.
func (u *runAs) canRead(path string) error {
	if u.cred.Uid == 0 {
		return nil
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	var dirs []string
	for d := filepath.Dir(real); ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == "/" {
			break
		}
	}
	slices.Reverse(dirs)
	for _, d := range dirs {
		if !u.allowed(d, 1) {
			return fmt.Errorf("user %s cannot enter %s, on the way to %s", u.name, d, real)
		}
	}
	if !u.allowed(real, 4) {
		return fmt.Errorf("user %s cannot read %s", u.name, real)
	}
	return nil
}

// allowed reports whether the permission bits of path give the user the
// access of bit (4 read, 1 search or execute).
func (u *runAs) allowed(path string, bit uint32) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return false
	}
	switch {
	case st.Uid == u.cred.Uid:
		return st.Mode&(bit<<6) != 0
	case st.Gid == u.cred.Gid || slices.Contains(u.cred.Groups, st.Gid):
		return st.Mode&(bit<<3) != 0
	}
	return st.Mode&bit != 0
}
