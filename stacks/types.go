package stacks

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64 // [Start, End) in the process's address space
	Perms      string // for example "r-xp"
	Offset     uint64 // file offset of Start
	Dev        string // "major:minor", for example "fd:01"
	Inode      uint64
	Path       string // "" for anonymous memory; "[heap]", "[vdso]"; may end in " (deleted)"
}

// Frame is one resolved backtrace frame.
type Frame struct {
	// PC is the absolute address of the frame.
	PC uint64
	// RelPC is the pc relative to the start of the ELF file that maps it
	// (the ELF virtual address for an executable or shared object), as
	// Android prints it. It equals PC when no mapping holds the pc.
	RelPC uint64
	// MapName is the path of the mapping that holds PC, "" when none does.
	MapName string
	// ElfOffset is the file offset at which the ELF image starts when it is
	// not at the start of the file (an ELF embedded in another file); 0
	// otherwise.
	ElfOffset uint64
	// Func is the (possibly mangled) name of the function holding PC, ""
	// when unknown.
	Func string
	// FuncOff is PC's offset from the start of Func; 0 when Func is "".
	FuncOff uint64
}
