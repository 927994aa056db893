// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The file of a loaded object and the index of its functions (symfile.c),
 * for md_symbolize's cache (symbols.c).
 */
#ifndef MD_SYMFILE_H
#define MD_SYMFILE_H

#include <dlfcn.h>
#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "symbols.h"

/* PT_LOAD headers kept to recognize an object's file; real objects have 2-5. */
#define MD_MAX_LOADS 16
#define MD_BUILD_ID_MAX 64

/* md_object is what identifies the loaded object holding a pc, read from memory. */
struct md_object {
	uintptr_t bias;
	uintptr_t base;
	const char *name; /* l_name: "" for the program */
	uint64_t key;     /* hash of its name, PT_LOAD headers and build-id */
	size_t nloads;
	ElfW(Phdr) loads[MD_MAX_LOADS];
	size_t build_id_len;
	unsigned char build_id[MD_BUILD_ID_MAX];
};

/*
 * md_object_read copies what identifies the object dladdr1 found holding a
 * pc (info, lm); false if it cannot be read (the vdso has no file).
 */
bool md_object_read(struct md_object *o, const Dl_info *info, const struct link_map *lm)
	__attribute__((visibility("hidden")));

/* md_symindex is the index of the functions of an object's file; nsyms 0: it has no names. */
struct md_symindex {
	struct md_symindex_sym *syms;
	size_t nsyms;
	size_t syms_len; /* mapped bytes */
	char *pool;
	size_t pool_len;
	/* The file's path as the kernel names its mapping; "" if not opened. */
	char path[MD_SYM_PATH_MAX];
};

/*
 * md_symindex_load finds and opens the file of o (dl_name being the name
 * dladdr gives) and indexes its functions into ix, all zero on entry.
 */
void md_symindex_load(struct md_symindex *ix, const struct md_object *o, const char *dl_name)
	__attribute__((visibility("hidden")));

/* md_symindex_free unmaps what md_symindex_load mapped. */
void md_symindex_free(struct md_symindex *ix) __attribute__((visibility("hidden")));

/*
 * md_symindex_lookup names vaddr, an address in the file's terms, from ix
 * into buf; returns the function's start.
 */
bool md_symindex_lookup(const struct md_symindex *ix, uintptr_t vaddr, char *buf, size_t len,
			uintptr_t *start) __attribute__((visibility("hidden")));

#endif
