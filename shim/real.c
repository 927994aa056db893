// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The real allocator's entry points (real.h), and the loader's dlsym and
 * dlvsym and the C library's longjmp, which the shim also defines, found
 * in the loader's list of
 * objects (_r_debug) by their dynamic symbol tables: the first definition
 * in the loader's order that is not the shim's own, as the shim's calls
 * bound before it defined the same names. Nothing here calls a function:
 * the first allocation can come from the loader itself, holding its locks.
 */
#ifndef MD_STATIC_REAL
#define _GNU_SOURCE
#include <elf.h>
#include <link.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "hooks.h"
#include "real.h"

extern void *md_dlsym_entry(void *, const char *) __attribute__((visibility("hidden")));
extern void *md_dlvsym_entry(void *, const char *, const char *) __attribute__((visibility("hidden")));
extern void md_siglongjmp_entry(void *, int) __attribute__((visibility("hidden")));
extern void md_longjmp_chk_entry(void *, int) __attribute__((visibility("hidden")));

static void *stub_malloc(size_t n)
{
	md_real_resolve();
	return md_real_malloc(n);
}

static void stub_free(void *p)
{
	md_real_resolve();
	md_real_free(p);
}

static void *stub_calloc(size_t n, size_t size)
{
	md_real_resolve();
	return md_real_calloc(n, size);
}

static void *stub_realloc(void *p, size_t n)
{
	md_real_resolve();
	return md_real_realloc(p, n);
}

static void *stub_memalign(size_t a, size_t n)
{
	md_real_resolve();
	return md_real_memalign(a, n);
}

static void *stub_dlsym(void *handle, const char *name)
{
	md_real_resolve();
	return md_real_dlsym(handle, name);
}

static void *stub_dlvsym(void *handle, const char *name, const char *version)
{
	md_real_resolve();
	return md_real_dlvsym(handle, name, version);
}

static void stub_siglongjmp(void *env, int val)
{
	md_real_resolve();
	md_real_siglongjmp(env, val);
}

static void stub_longjmp_chk(void *env, int val)
{
	md_real_resolve();
	md_real_longjmp_chk(env, val);
}

void (*md_real_siglongjmp)(void *, int) = stub_siglongjmp;
void (*md_real_longjmp_chk)(void *, int) = stub_longjmp_chk;
void *(*md_real_malloc)(size_t) = stub_malloc;
void (*md_real_free)(void *) = stub_free;
void *(*md_real_calloc)(size_t, size_t) = stub_calloc;
void *(*md_real_realloc)(void *, size_t) = stub_realloc;
void *(*md_real_memalign)(size_t, size_t) = stub_memalign;
void *(*md_real_dlsym)(void *, const char *) = stub_dlsym;
void *(*md_real_dlvsym)(void *, const char *, const char *) = stub_dlvsym;

/*
 * The allocator's functions that the shim replaces, by name, with the
 * shim's own: what dlsym gives for the first is the second (libc[] holds
 * the allocator's addresses once resolved).
 */
static const struct {
	const char *name;
	void *shim;
} entries[] = {
	{ "malloc", (void *)md_hook_malloc },
	{ "free", (void *)md_hook_free },
	{ "calloc", (void *)md_hook_calloc },
	{ "realloc", (void *)md_hook_realloc },
	{ "reallocarray", (void *)md_hook_reallocarray },
	{ "memalign", (void *)md_hook_memalign },
	{ "aligned_alloc", (void *)md_hook_aligned_alloc },
	{ "posix_memalign", (void *)md_hook_posix_memalign },
	{ "valloc", (void *)md_hook_valloc },
	{ "pvalloc", (void *)md_hook_pvalloc },
	{ "malloc_usable_size", (void *)md_hook_malloc_usable_size },
	{ "__libc_malloc", (void *)md_hook_malloc },
	{ "__libc_free", (void *)md_hook_free },
	{ "__libc_calloc", (void *)md_hook_calloc },
	{ "__libc_realloc", (void *)md_hook_realloc },
	{ "__libc_memalign", (void *)md_hook_memalign },
	{ "__libc_valloc", (void *)md_hook_valloc },
	{ "__libc_pvalloc", (void *)md_hook_pvalloc },
};
#define N_ENTRIES (sizeof(entries) / sizeof(entries[0]))
static void *libc[N_ENTRIES];

/* An object's dynamic symbol table, by its GNU hash table. */
struct dso {
	ElfW(Addr) base;
	const ElfW(Sym) *symtab;
	const char *strtab;
	const uint32_t *gnu_hash;
	const ElfW(Half) *versym;
};

/* The loader relocates the dynamic section's addresses in place, mostly: either way. */
static const void *dyn_ptr(ElfW(Addr) base, ElfW(Addr) p)
{
	return (const void *)(p < base ? p + base : p);
}

static bool dso_of(const struct link_map *l, struct dso *d)
{
	const ElfW(Dyn) *dyn;

	*d = (struct dso){ .base = l->l_addr };
	for (dyn = l->l_ld; dyn != NULL && dyn->d_tag != DT_NULL; dyn++) {
		switch (dyn->d_tag) {
		case DT_SYMTAB:
			d->symtab = dyn_ptr(d->base, dyn->d_un.d_ptr);
			break;
		case DT_STRTAB:
			d->strtab = dyn_ptr(d->base, dyn->d_un.d_ptr);
			break;
		case DT_GNU_HASH:
			d->gnu_hash = dyn_ptr(d->base, dyn->d_un.d_ptr);
			break;
		case DT_VERSYM:
			d->versym = dyn_ptr(d->base, dyn->d_un.d_ptr);
			break;
		}
	}
	return d->symtab != NULL && d->strtab != NULL && d->gnu_hash != NULL;
}

static bool same_name(const char *a, const char *b)
{
	while (*a != '\0' && *a == *b)
		a++, b++;
	return *a == *b;
}

/* dso_lookup returns the address of the function name that d defines (its default version), or NULL. */
static void *dso_lookup(const struct dso *d, const char *name)
{
	const uint32_t *gh = d->gnu_hash, *buckets, *chain;
	uint32_t h = 5381, nbuckets = gh[0], symoffset = gh[1], i;
	const unsigned char *p;

	for (p = (const unsigned char *)name; *p != '\0'; p++)
		h = h * 33 + *p;
	if (nbuckets == 0)
		return NULL;
	buckets = (const uint32_t *)((const ElfW(Addr) *)&gh[4] + gh[2]);
	chain = buckets + nbuckets;
	i = buckets[h % nbuckets];
	if (i < symoffset)
		return NULL;
	for (;; i++) {
		uint32_t h2 = chain[i - symoffset];
		const ElfW(Sym) *s = &d->symtab[i];

		if ((h | 1) == (h2 | 1) && s->st_shndx != SHN_UNDEF && s->st_value != 0 &&
		    (ELF64_ST_TYPE(s->st_info) == STT_FUNC || ELF64_ST_TYPE(s->st_info) == STT_GNU_IFUNC) &&
		    (d->versym == NULL || !(d->versym[i] & 0x8000)) && same_name(d->strtab + s->st_name, name))
			return ELF64_ST_TYPE(s->st_info) == STT_FUNC ? (void *)(d->base + s->st_value) : NULL;
		if (h2 & 1)
			return NULL;
	}
}

/*
 * find returns the first definition of name in the loader's order that is
 * not mine, and its object in *where.
 */
static void *find(const char *name, void *mine, const struct link_map **where)
{
	const struct link_map *l;
	struct dso d;
	void *f;

	for (l = _r_debug.r_map; l != NULL; l = l->l_next) {
		if (!dso_of(l, &d))
			continue;
		f = dso_lookup(&d, name);
		if (f != NULL && f != mine) {
			if (where != NULL)
				*where = l;
			return f;
		}
	}
	return NULL;
}

static void fatal(const char *what)
{
	static const char prefix[] = "libmdshim.so: cannot find the allocator's ";

	if (write(2, prefix, sizeof(prefix) - 1) < 0 || write(2, what, __builtin_strlen(what)) < 0 ||
	    write(2, "\n", 1) < 0)
		_exit(127);
	_exit(127);
}

void md_real_resolve(void)
{
	static int done;
	const struct link_map *alloc = NULL;
	struct dso d;
	void *f;

	if (__atomic_load_n(&done, __ATOMIC_ACQUIRE))
		return;
	f = find("__libc_malloc", (void *)md_hook_malloc, &alloc);
	if (f == NULL || !dso_of(alloc, &d))
		fatal("__libc_malloc");
	__atomic_store_n(&md_real_malloc, (void *(*)(size_t))f, __ATOMIC_RELEASE);
#define ENTRY(ptr, name, hook)                                      \
	do {                                                        \
		f = dso_lookup(&d, name);                           \
		if (f == NULL || f == (void *)(hook))               \
			fatal(name);                                \
		__atomic_store_n(&(ptr), (__typeof__(ptr))f, __ATOMIC_RELEASE); \
	} while (0)
	ENTRY(md_real_free, "__libc_free", md_hook_free);
	ENTRY(md_real_calloc, "__libc_calloc", md_hook_calloc);
	ENTRY(md_real_realloc, "__libc_realloc", md_hook_realloc);
	ENTRY(md_real_memalign, "__libc_memalign", md_hook_memalign);
#undef ENTRY
	for (size_t i = 0; i < N_ENTRIES; i++) {
		f = dso_lookup(&d, entries[i].name);
		__atomic_store_n(&libc[i], f == entries[i].shim ? NULL : f, __ATOMIC_RELEASE);
	}
	f = find("dlsym", (void *)md_dlsym_entry, NULL);
	if (f == NULL)
		fatal("dlsym");
	__atomic_store_n(&md_real_dlsym, (void *(*)(void *, const char *))f, __ATOMIC_RELEASE);
	f = find("dlvsym", (void *)md_dlvsym_entry, NULL);
	if (f == NULL)
		fatal("dlvsym");
	__atomic_store_n(&md_real_dlvsym, (void *(*)(void *, const char *, const char *))f, __ATOMIC_RELEASE);
	f = find("siglongjmp", (void *)md_siglongjmp_entry, NULL);
	if (f == NULL)
		fatal("siglongjmp");
	__atomic_store_n(&md_real_siglongjmp, (void (*)(void *, int))f, __ATOMIC_RELEASE);
	f = find("__longjmp_chk", (void *)md_longjmp_chk_entry, NULL);
	if (f == NULL)
		fatal("__longjmp_chk");
	__atomic_store_n(&md_real_longjmp_chk, (void (*)(void *, int))f, __ATOMIC_RELEASE);
	__atomic_store_n(&done, 1, __ATOMIC_RELEASE);
}

void *md_real_entry(void *addr)
{
	if (addr == NULL)
		return NULL;
	for (size_t i = 0; i < N_ENTRIES; i++)
		if (addr == __atomic_load_n(&libc[i], __ATOMIC_ACQUIRE))
			return entries[i].shim;
	return NULL;
}
#endif
