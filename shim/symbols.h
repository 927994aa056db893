// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Function names for backtrace frames (symbols.c). */
#ifndef MD_SYMBOLS_H
#define MD_SYMBOLS_H

#include <stdbool.h>
#include <stdint.h>

/* Longest function name md_symbolize gives, with its NUL; longer ones are cut. */
#define MD_SYM_NAME_MAX 512

/* md_sym is what md_symbolize finds out about a pc. */
#define MD_SYM_PATH_MAX 512

struct md_sym {
	/*
	 * The object's file: its path as the kernel names the mapping (as in
	 * /proc/PID/maps), else as dladdr gives it; may be "".
	 */
	const char *path;
	char path_buf[MD_SYM_PATH_MAX];
	uintptr_t rel_pc; /* pc minus dladdr's base of the object */
	bool named;       /* name and offset are known */
	char name[MD_SYM_NAME_MAX]; /* the function, as in the symbol table (not demangled) */
	uintptr_t offset; /* pc minus the function's start */
};

/*
 * md_symbolize names the function holding pc from the full symbol table of
 * its object (.symtab, then .dynsym; symbols.c), falling back to dladdr's
 * answer, which it keeps when dladdr names a function at the same start.
 * It returns false if no loaded object holds pc. It never calls malloc,
 * keeps errno, and must not be called from a signal handler.
 */
bool md_symbolize(uintptr_t pc, struct md_sym *out);

#endif
