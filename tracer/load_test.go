package tracer

import (
	"reflect"
	"slices"
	"testing"

	"github.com/mdtrace/mdtrace/bpf"
)

// TestCoreObjects: every BPF program is loaded by every mode (coreObjects)
// or by program mode alone (programMode), and coreObjects names programs
// that exist.
func TestCoreObjects(t *testing.T) {
	tags := func(typ reflect.Type) []string {
		var out []string
		for i := range typ.NumField() {
			if tag := typ.Field(i).Tag.Get("ebpf"); tag != "" {
				out = append(out, tag)
			}
		}
		return out
	}
	all, core := tags(reflect.TypeFor[bpf.MdtracePrograms]()), tags(reflect.TypeFor[coreObjects]())
	for _, name := range all {
		if slices.Contains(core, name) == slices.Contains(programMode, name) {
			t.Errorf("program %s: in coreObjects %v, in programMode %v; want exactly one", name,
				slices.Contains(core, name), slices.Contains(programMode, name))
		}
	}
	for _, name := range append(core, programMode...) {
		if !slices.Contains(all, name) {
			t.Errorf("%s is not a BPF program", name)
		}
	}
}
