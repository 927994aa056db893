// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The file of a loaded object and the index of its functions, for
 * md_symbolize's cache (symbols.c).
 *
 * dladdr1 finds the object, its name and load bias, and a copy is made of
 * what identifies it, read from its mapped image: its PT_LOAD program
 * headers and GNU build-id. The file is then opened by its name
 * ("/proc/self/exe" for the program), else by the name dladdr gives, else
 * through /proc/self/map_files (which still reaches a deleted or replaced
 * file when the process may open it there), and it is used only if its
 * program headers and build-id are the loaded ones.
 *
 * The first lookup in an object reads its section headers and symbol tables
 * with pread and builds a sorted index of its function symbols (STT_FUNC
 * and STT_GNU_IFUNC), one per address, with the names copied, unversioned,
 * into a pool: heapsort, so the build is O(n log n) with no recursion and
 * no worst case, and every later lookup is a binary search. At one address
 * the name chosen is mdtrace's: .symtab before .dynsym, a known size
 * before none, fewer leading underscores, global before weak before local,
 * then file order. A symbol of size 0 ends at the next one, or at the end
 * of its segment. A table of more than MAX_SYMBOLS symbols or a string
 * table over MAX_STRTAB bytes is left out (the other table, or dladdr,
 * still names the frame), which bounds the time and memory one object can
 * cost; real programs are far below both.
 *
 * Everything comes from mmap and the stack, never from malloc or stdio:
 * this runs inside the allocator. Every offset, size and index read from a
 * file is checked against the file's size and the buffers, so a malformed
 * or truncated file yields no names, never a fault. The file is copied
 * with pread rather than mapped, so a file truncated later cannot fault
 * either.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "format.h"
#include "symbols.h"
#include "symfile.h"

#define MAX_PHDRS 256
/* Largest PT_NOTE segment read from a file. */
#define MAX_NOTES (64 * 1024)
#define MAX_SECTIONS (1 << 16)
#define MAX_SYMBOLS (1 << 22)
#define MAX_STRTAB ((uint64_t)256 << 20)
/* Most bytes of names one object keeps. */
#define MAX_POOL ((size_t)1 << 30)
/* Symbols read from a file at a time. */
#define SYM_CHUNK 256

#if UINTPTR_MAX == UINT64_MAX
#define NATIVE_CLASS ELFCLASS64
#else
#define NATIVE_CLASS ELFCLASS32
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NATIVE_DATA ELFDATA2LSB
#else
#define NATIVE_DATA ELFDATA2MSB
#endif

/* md_symindex_sym is one function of an index: [value, end) in the file's addresses. */
struct md_symindex_sym {
	uintptr_t value;
	uintptr_t end;
	size_t name; /* offset of its NUL-terminated name in the pool */
};

/* What the kernel appends to the path of a deleted file. */
#define DELETED " (deleted)"
#define DELETED_LEN (sizeof(DELETED) - 1)

static void *map_anon(size_t len)
{
	void *p;

	if (len == 0)
		return NULL;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
		 0);
	return p == MAP_FAILED ? NULL : p;
}

static void unmap(void *p, size_t len)
{
	if (p != NULL && len > 0)
		munmap(p, len);
}

/* in_range reports whether [off, off+len) lies within [0, size). */
static bool in_range(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

/* read_at reads exactly len bytes at off. */
static bool read_at(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;

	while (len > 0) {
		ssize_t r = pread(fd, p, len, (off_t)off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		p += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return true;
}

/*
 * find_build_id looks through the notes in buf[0..len) for the GNU
 * build-id and copies it to id; returns its length, 0 if there is none.
 */
static size_t find_build_id(const unsigned char *buf, size_t len, size_t align,
			    unsigned char *id)
{
	size_t off = 0;

	if (align != 8)
		align = 4;
	while (len - off >= sizeof(ElfW(Nhdr))) {
		ElfW(Nhdr) nh;
		size_t namesz, descsz, name_off, desc_off;

		memcpy(&nh, buf + off, sizeof(nh));
		namesz = nh.n_namesz;
		descsz = nh.n_descsz;
		name_off = off + sizeof(nh);
		if (namesz > len - name_off)
			return 0;
		desc_off = name_off + ((namesz + align - 1) & ~(align - 1));
		if (desc_off > len || descsz > len - desc_off)
			return 0;
		if (nh.n_type == NT_GNU_BUILD_ID && namesz == 4 &&
		    memcmp(buf + name_off, "GNU", 4) == 0) {
			if (descsz == 0 || descsz > MD_BUILD_ID_MAX)
				return 0;
			memcpy(id, buf + desc_off, descsz);
			return descsz;
		}
		off = desc_off + ((descsz + align - 1) & ~(align - 1));
		if (off > len)
			return 0;
	}
	return 0;
}

/* fnv adds len bytes to an FNV-1a hash. */
static uint64_t fnv(uint64_t h, const void *p, size_t len)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return h;
}

/*
 * md_object_read copies what identifies the object dladdr found mapped at
 * info->dli_fbase: its PT_LOAD headers and build-id. The page at dli_fbase
 * is mapped, since the loader mapped the object there, so the ELF header is
 * read there, and the program headers too if they lie in that page and the
 * segment at file offset 0 is the one mapped there. The vdso has no file.
 */
bool md_object_read(struct md_object *o, const Dl_info *info, const struct link_map *lm)
{
	uintptr_t page = (uintptr_t)getauxval(AT_PAGESZ), base = (uintptr_t)info->dli_fbase;
	const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)base;
	const ElfW(Phdr) *ph;
	bool header_mapped = false;
	size_t i;

	if (page < 4096 || (page & (page - 1)) != 0)
		page = 4096;
	if (base == 0 || (base & (page - 1)) != 0 || base == (uintptr_t)getauxval(AT_SYSINFO_EHDR))
		return false;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != NATIVE_CLASS ||
	    eh->e_ident[EI_DATA] != NATIVE_DATA || eh->e_phentsize != sizeof(ElfW(Phdr)) ||
	    eh->e_phnum == 0 || eh->e_phoff > page ||
	    (size_t)eh->e_phnum * sizeof(ElfW(Phdr)) > page - eh->e_phoff)
		return false;
	ph = (const ElfW(Phdr) *)(base + eh->e_phoff);
	o->bias = lm->l_addr;
	o->base = base;
	o->name = lm->l_name != NULL ? lm->l_name : "";
	o->nloads = 0;
	o->build_id_len = 0;
	for (i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		if (o->nloads == MD_MAX_LOADS)
			return false;
		if (ph[i].p_offset == 0 && ph[i].p_filesz > 0 &&
		    ((o->bias + ph[i].p_vaddr) & ~(page - 1)) == base)
			header_mapped = true;
		o->loads[o->nloads++] = ph[i];
	}
	if (!header_mapped)
		return false;
	/* The build-id, read in place when its note lies in a readable loaded part. */
	for (i = 0; i < eh->e_phnum && o->build_id_len == 0; i++) {
		if (ph[i].p_type != PT_NOTE || ph[i].p_memsz > MAX_NOTES)
			continue;
		for (size_t j = 0; j < o->nloads; j++) {
			const ElfW(Phdr) *ld = &o->loads[j];
			const unsigned char *note = (const unsigned char *)(o->bias + ph[i].p_vaddr);

			if ((ld->p_flags & PF_R) && ph[i].p_vaddr >= ld->p_vaddr &&
			    in_range(ph[i].p_vaddr - ld->p_vaddr, ph[i].p_memsz, ld->p_filesz)) {
				o->build_id_len =
					find_build_id(note, ph[i].p_memsz, ph[i].p_align, o->build_id);
				break;
			}
		}
	}
	o->key = fnv(0xcbf29ce484222325ULL, o->name, strnlen(o->name, MD_PATH_MAX));
	o->key = fnv(o->key, o->loads, o->nloads * sizeof(o->loads[0]));
	o->key = fnv(o->key, o->build_id, o->build_id_len);
	return true;
}

/* ---- reading a file ---- */

/* elf_file is an open file being indexed, with scratch space for its headers. */
struct elf_file {
	int fd;
	uint64_t size;
	ElfW(Ehdr) eh;
	unsigned char *scratch; /* SCRATCH_BYTES */
};

#define SCRATCH_BYTES                                       \
	(MAX_NOTES > MAX_PHDRS * sizeof(ElfW(Phdr)) ? MAX_NOTES \
						    : MAX_PHDRS * sizeof(ElfW(Phdr)))

/* same_load compares two PT_LOAD headers in the fields the loader uses. */
static bool same_load(const ElfW(Phdr) *a, const ElfW(Phdr) *b)
{
	return a->p_offset == b->p_offset && a->p_vaddr == b->p_vaddr &&
	       a->p_filesz == b->p_filesz && a->p_memsz == b->p_memsz && a->p_flags == b->p_flags;
}

/*
 * check_file reads the ELF and program headers of f and reports whether it
 * is the loaded object o: the same PT_LOAD headers and, when o has one, the
 * same build-id.
 */
static bool check_file(struct elf_file *f, const struct md_object *o)
{
	const ElfW(Ehdr) *eh = &f->eh;
	ElfW(Phdr) *ph = (ElfW(Phdr) *)f->scratch;
	unsigned char id[MD_BUILD_ID_MAX];
	size_t i, nloads = 0, id_len = 0;
	ElfW(Phdr) notes[8];
	size_t nnotes = 0;

	if (!read_at(f->fd, &f->eh, sizeof(f->eh), 0))
		return false;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != NATIVE_CLASS ||
	    eh->e_ident[EI_DATA] != NATIVE_DATA || (eh->e_type != ET_EXEC && eh->e_type != ET_DYN))
		return false;
	if (eh->e_phentsize != sizeof(ElfW(Phdr)) || eh->e_phnum == 0 || eh->e_phnum > MAX_PHDRS ||
	    !in_range(eh->e_phoff, (uint64_t)eh->e_phnum * sizeof(ElfW(Phdr)), f->size))
		return false;
	if (!read_at(f->fd, ph, eh->e_phnum * sizeof(ElfW(Phdr)), eh->e_phoff))
		return false;
	for (i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type == PT_NOTE && nnotes < sizeof(notes) / sizeof(notes[0]))
			notes[nnotes++] = ph[i];
		if (ph[i].p_type != PT_LOAD)
			continue;
		if (nloads == o->nloads || !same_load(&ph[i], &o->loads[nloads]))
			return false;
		nloads++;
	}
	if (nloads != o->nloads)
		return false;
	if (o->build_id_len == 0)
		return true;
	/* The program headers are no longer needed: the scratch space takes the notes. */
	for (i = 0; i < nnotes && id_len == 0; i++) {
		if (notes[i].p_filesz == 0 || notes[i].p_filesz > SCRATCH_BYTES ||
		    !in_range(notes[i].p_offset, notes[i].p_filesz, f->size) ||
		    !read_at(f->fd, f->scratch, notes[i].p_filesz, notes[i].p_offset))
			continue;
		id_len = find_build_id(f->scratch, notes[i].p_filesz, notes[i].p_align, id);
	}
	return id_len == o->build_id_len && memcmp(id, o->build_id, id_len) == 0;
}

/* open_checked opens path and keeps it if it is the loaded object o. */
static bool open_checked(struct elf_file *f, const char *path, const struct md_object *o)
{
	struct stat st;

	if (path == NULL || path[0] == '\0')
		return false;
	f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (f->fd < 0)
		return false;
	if (fstat(f->fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
		f->size = (uint64_t)st.st_size;
		if (check_file(f, o))
			return true;
	}
	close(f->fd);
	f->fd = -1;
	return false;
}

/* open_object finds and opens the file of o: by its name, by dladdr's, by /proc/self/map_files. */
static bool open_object(struct elf_file *f, const struct md_object *o, const char *dl_name)
{
	const char *own = o->name[0] != '\0' ? o->name : "/proc/self/exe";
	char path[64];

	if (open_checked(f, own, o))
		return true;
	if (dl_name != NULL && strcmp(dl_name, own) != 0 &&
	    open_checked(f, dl_name, o))
		return true;
	/* A mapping of the file, reached even when it has been deleted or replaced. */
	for (size_t i = 0; i < o->nloads; i++) {
		const ElfW(Phdr) *ld = &o->loads[i];
		uintptr_t page = (uintptr_t)getauxval(AT_PAGESZ);
		uintptr_t start, end;

		if (ld->p_filesz == 0 || page == 0 || (page & (page - 1)) != 0)
			continue;
		start = (o->bias + ld->p_vaddr) & ~(page - 1);
		end = (o->bias + ld->p_vaddr + ld->p_filesz + page - 1) & ~(page - 1);
		md_format(path, sizeof(path), "/proc/self/map_files/%lx-%lx", (unsigned long)start,
			  (unsigned long)end);
		if (open_checked(f, path, o))
			return true;
	}
	return false;
}

/* ---- building the index ---- */

/* cand is a function symbol before the ones at the same address are merged. */
struct cand {
	uintptr_t value;
	uintptr_t size;
	uint32_t name;  /* offset in its string table */
	uint32_t len;   /* length without the version */
	uint32_t index; /* file order, .symtab's first */
	uint8_t dynamic;
	uint8_t underscores;
	uint8_t bind;
};

/* table is one symbol table of the file and its string table, copied. */
struct table {
	uint64_t sym_off;
	size_t nsyms;
	char *str;
	size_t str_len;
};

/* cand_less orders by address and puts the preferred name first at one address. */
static bool cand_less(const struct cand *a, const struct cand *b)
{
	if (a->value != b->value)
		return a->value < b->value;
	if (a->dynamic != b->dynamic)
		return a->dynamic < b->dynamic;
	if ((a->size > 0) != (b->size > 0))
		return a->size > 0;
	if (a->underscores != b->underscores)
		return a->underscores < b->underscores;
	if (a->bind != b->bind)
		return a->bind < b->bind;
	return a->index < b->index;
}

static void sift_down(struct cand *c, size_t root, size_t n)
{
	for (;;) {
		size_t child = 2 * root + 1;
		struct cand t;

		if (child >= n)
			return;
		if (child + 1 < n && cand_less(&c[child], &c[child + 1]))
			child++;
		if (!cand_less(&c[root], &c[child]))
			return;
		t = c[root];
		c[root] = c[child];
		c[child] = t;
		root = child;
	}
}

static void heap_sort(struct cand *c, size_t n)
{
	for (size_t i = n / 2; i-- > 0;)
		sift_down(c, i, n);
	for (size_t i = n; i-- > 1;) {
		struct cand t = c[0];

		c[0] = c[i];
		c[i] = t;
		sift_down(c, 0, i);
	}
}

/*
 * find_table locates the first section of type (SHT_SYMTAB or SHT_DYNSYM)
 * in shdrs[0..n) and its string table, checked against the file.
 */
static bool find_table(const struct elf_file *f, const ElfW(Shdr) *sh, size_t n, uint32_t type,
		       struct table *t)
{
	for (size_t i = 0; i < n; i++) {
		const ElfW(Shdr) *s = &sh[i], *str;

		if (s->sh_type != type)
			continue;
		if (s->sh_entsize != sizeof(ElfW(Sym)) ||
		    !in_range(s->sh_offset, s->sh_size, f->size) ||
		    s->sh_size / sizeof(ElfW(Sym)) > MAX_SYMBOLS || s->sh_link == 0 ||
		    s->sh_link >= n)
			return false;
		str = &sh[s->sh_link];
		if (str->sh_type != SHT_STRTAB || str->sh_size == 0 || str->sh_size > MAX_STRTAB ||
		    !in_range(str->sh_offset, str->sh_size, f->size))
			return false;
		t->sym_off = s->sh_offset;
		t->nsyms = s->sh_size / sizeof(ElfW(Sym));
		t->str_len = str->sh_size;
		t->str = map_anon(t->str_len);
		if (t->str == NULL)
			return false;
		if (!read_at(f->fd, t->str, t->str_len, str->sh_offset)) {
			unmap(t->str, t->str_len);
			t->str = NULL;
			return false;
		}
		return true;
	}
	return false;
}

/* add_table appends the function symbols of t to c[*n...]; room was made for all of t's symbols. */
static void add_table(struct elf_file *f, const struct table *t, bool dynamic, struct cand *c,
		      size_t *n)
{
	ElfW(Sym) *buf = (ElfW(Sym) *)f->scratch;
	size_t chunk = SCRATCH_BYTES / sizeof(ElfW(Sym));

	if (chunk > SYM_CHUNK)
		chunk = SYM_CHUNK;
	for (size_t first = 0; first < t->nsyms; first += chunk) {
		size_t k = t->nsyms - first < chunk ? t->nsyms - first : chunk;

		if (!read_at(f->fd, buf, k * sizeof(ElfW(Sym)),
			     t->sym_off + first * sizeof(ElfW(Sym))))
			return;
		for (size_t j = 0; j < k; j++) {
			const ElfW(Sym) *s = &buf[j];
			/* ELF32_ST_TYPE and ELF64_ST_TYPE are the same. */
			unsigned type = ELF64_ST_TYPE(s->st_info), bind = ELF64_ST_BIND(s->st_info);
			uintptr_t value = s->st_value;
			const char *name;
			size_t max, len, u;

			if ((type != STT_FUNC && type != STT_GNU_IFUNC) || s->st_shndx == SHN_UNDEF)
				continue;
#if defined(__arm__)
			value &= ~(uintptr_t)1; /* the Thumb bit */
#endif
			if (value == 0 || s->st_name == 0 || s->st_name >= t->str_len)
				continue;
			name = t->str + s->st_name;
			max = t->str_len - s->st_name;
			len = strnlen(name, max);
			if (len == max)
				continue; /* not terminated inside the table */
			/* Drop a version: "memcpy@@GLIBC_2.14". */
			for (u = 1; u < len; u++)
				if (name[u] == '@') {
					len = u;
					break;
				}
			if (len == 0)
				continue;
			if (len > MD_SYM_NAME_MAX - 1)
				len = MD_SYM_NAME_MAX - 1;
			for (u = 0; u < len && u < 255 && name[u] == '_'; u++)
				;
			c[*n] = (struct cand){
				.value = value,
				.size = s->st_size,
				.name = s->st_name,
				.len = (uint32_t)len,
				.index = (uint32_t)*n,
				.dynamic = dynamic,
				.underscores = (uint8_t)u,
				.bind = bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2,
			};
			(*n)++;
		}
	}
}

/* segment_end returns the end of the PT_LOAD segment that holds vaddr, or 0. */
static uintptr_t segment_end(const struct md_object *o, uintptr_t vaddr)
{
	for (size_t i = 0; i < o->nloads; i++) {
		const ElfW(Phdr) *ld = &o->loads[i];

		if (vaddr >= ld->p_vaddr && vaddr - ld->p_vaddr < ld->p_memsz) {
			uintptr_t end = ld->p_vaddr + ld->p_memsz;

			return end < ld->p_vaddr ? UINTPTR_MAX : end;
		}
	}
	return 0;
}

/* build_index reads the symbol tables of f, the file of o, into ix. */
static void build_index(struct elf_file *f, const struct md_object *o, struct md_symindex *ix)
{
	const ElfW(Ehdr) *eh = &f->eh;
	struct table tabs[2] = { { 0 }, { 0 } };
	bool have[2] = { false, false };
	ElfW(Shdr) *sh = NULL;
	size_t shnum = eh->e_shnum, sh_len = 0, ncand = 0, cap = 0, cand_len = 0;
	size_t nout = 0, pool = 0;
	struct cand *c = NULL;

	if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(ElfW(Shdr)))
		return;
	if (shnum == 0) {
		/* Extended numbering: the count is in the first header's sh_size. */
		ElfW(Shdr) first;

		if (!in_range(eh->e_shoff, sizeof(first), f->size) ||
		    !read_at(f->fd, &first, sizeof(first), eh->e_shoff))
			return;
		shnum = first.sh_size < MAX_SECTIONS ? (size_t)first.sh_size : MAX_SECTIONS;
	}
	if (shnum == 0 || !in_range(eh->e_shoff, (uint64_t)shnum * sizeof(ElfW(Shdr)), f->size))
		return;
	sh_len = shnum * sizeof(ElfW(Shdr));
	sh = map_anon(sh_len);
	if (sh == NULL || !read_at(f->fd, sh, sh_len, eh->e_shoff))
		goto out;
	have[0] = find_table(f, sh, shnum, SHT_SYMTAB, &tabs[0]);
	have[1] = find_table(f, sh, shnum, SHT_DYNSYM, &tabs[1]);
	for (int i = 0; i < 2; i++)
		if (have[i])
			cap += tabs[i].nsyms;
	if (cap == 0)
		goto out;
	cand_len = cap * sizeof(struct cand);
	c = map_anon(cand_len);
	if (c == NULL)
		goto out;
	for (int i = 0; i < 2; i++)
		if (have[i])
			add_table(f, &tabs[i], i == 1, c, &ncand);
	if (ncand == 0)
		goto out;
	heap_sort(c, ncand);

	/* One candidate per address, the preferred one; the names' room in the pool. */
	for (size_t i = 0; i < ncand; i++) {
		if (nout > 0 && c[nout - 1].value == c[i].value)
			continue;
		c[nout++] = c[i];
		pool += (size_t)c[i].len + 1;
		if (pool > MAX_POOL)
			goto out;
	}
	ix->syms_len = nout * sizeof(struct md_symindex_sym);
	ix->syms = map_anon(ix->syms_len);
	ix->pool_len = pool;
	ix->pool = map_anon(pool);
	if (ix->syms == NULL || ix->pool == NULL) {
		unmap(ix->syms, ix->syms_len);
		unmap(ix->pool, ix->pool_len);
		ix->syms = NULL;
		ix->pool = NULL;
		goto out;
	}
	pool = 0;
	for (size_t i = 0; i < nout; i++) {
		const struct cand *k = &c[i];
		struct md_symindex_sym *s = &ix->syms[i];
		uintptr_t seg;

		s->value = k->value;
		if (k->size > 0) {
			s->end = k->value + k->size;
			if (s->end < k->value)
				s->end = UINTPTR_MAX;
		} else {
			/* Unknown size: up to the next symbol, within its segment. */
			s->end = k->value + 1 != 0 ? k->value + 1 : UINTPTR_MAX;
			if (i + 1 < nout)
				s->end = c[i + 1].value;
			seg = segment_end(o, k->value);
			if (seg != 0 && (i + 1 == nout || seg < s->end))
				s->end = seg;
		}
		s->name = pool;
		memcpy(ix->pool + pool, tabs[k->dynamic].str + k->name, k->len);
		ix->pool[pool + k->len] = '\0';
		pool += (size_t)k->len + 1;
	}
	ix->nsyms = nout;
out:
	unmap(c, cand_len);
	for (int i = 0; i < 2; i++)
		if (have[i])
			unmap(tabs[i].str, tabs[i].str_len);
	unmap(sh, sh_len);
}

/* ---- loading and lookups ---- */

void md_symindex_load(struct md_symindex *ix, const struct md_object *o, const char *dl_name)
{
	struct elf_file f = { .fd = -1 };

	f.scratch = map_anon(SCRATCH_BYTES);
	ix->path[0] = '\0';
	if (f.scratch != NULL && open_object(&f, o, dl_name)) {
		char link[32];
		ssize_t n;

		md_format(link, sizeof(link), "/proc/self/fd/%d", f.fd);
		n = readlink(link, ix->path, sizeof(ix->path) - 1);
		if (n <= 0 || ix->path[0] != '/')
			n = 0;
		/* As in mdtrace's reports, a deleted file keeps its name. */
		if (n > (ssize_t)DELETED_LEN && memcmp(ix->path + n - DELETED_LEN, DELETED, DELETED_LEN) == 0)
			n -= (ssize_t)DELETED_LEN;
		ix->path[n] = '\0';
		build_index(&f, o, ix);
		close(f.fd);
	}
	unmap(f.scratch, SCRATCH_BYTES);
}

void md_symindex_free(struct md_symindex *ix)
{
	unmap(ix->syms, ix->syms_len);
	unmap(ix->pool, ix->pool_len);
}

bool md_symindex_lookup(const struct md_symindex *ix, uintptr_t vaddr, char *buf, size_t len,
			uintptr_t *start)
{
	size_t lo = 0, hi = ix->nsyms;
	const struct md_symindex_sym *s;
	const char *name;
	size_t n;

	/* The first symbol above vaddr is at lo. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ix->syms[mid].value <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return false;
	s = &ix->syms[lo - 1];
	if (vaddr >= s->end)
		return false;
	name = ix->pool + s->name;
	n = strnlen(name, len - 1);
	memcpy(buf, name, n);
	buf[n] = '\0';
	*start = s->value;
	return true;
}
