package stacks

import "github.com/ianlancetaylor/demangle"

// maxDemangledLog2 bounds a demangled name to 2^18 bytes; a name that would
// be longer is returned mangled.
const maxDemangledLog2 = 18

// Demangle returns the demangled form of an Itanium C++ ABI (or Rust)
// symbol name as Android's malloc debug prints it, with the parameter
// types: "_ZN3geo5ArenaIcE3rawEm" becomes "geo::Arena<char>::raw(unsigned
// long)". Android demangles with LLVM's demangler, so the LLVM spelling is
// used ("std::vector<int, std::allocator<int>>", "f() (.cold)"). A name that is not mangled, or that does not demangle, is
// returned unchanged. Demangle never panics and is safe for concurrent use.
func Demangle(name string) (out string) {
	if len(name) < 2 || name[0] != '_' || (name[1] != 'Z' && name[1] != 'R') {
		return name
	}
	defer func() {
		if recover() != nil {
			out = name
		}
	}()
	d, err := demangle.ToString(name, demangle.LLVMStyle, demangle.MaxLength(maxDemangledLog2))
	if err != nil || d == "" {
		return name
	}
	return d
}
