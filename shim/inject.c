// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The shim loaded into a running process (mdtrace -p PID --inject).
 *
 * No loader preloaded the shim there: the program's calls of malloc and
 * the others are bound to the allocator already, through each module's
 * GOT (its JUMP_SLOT and GLOB_DAT relocations; glibc calls its own malloc
 * through its GOT too). mdtrace makes one of the process's threads call
 * dlopen on the shim and then mdshim_inject_start, which turns batches on
 * and lists the GOT slots that hold the allocator's functions (and
 * dlopen, so that a module loaded later is routed as well), without
 * writing them; then, with every other thread stopped, mdshim_inject_route,
 * which points each slot at the shim's hook. The hooks add no header to a
 * block: a block moves freely between the hooks and the allocator, and a
 * free of a block from before is an unknown free, as in attach mode.
 * mdshim_inject_stop puts every slot back as it was, and so does the shim
 * itself when it finds its probe sites unprobed (mdtrace gone, or a fork
 * child that mdtrace does not follow): the hooks then pass every call to
 * the allocator and hold nothing.
 *
 * Nothing here allocates: the slot list is in pages of its own, and the
 * loader's list of modules is read with dl_iterate_phdr, whose lock no
 * frozen thread can hold while mdtrace calls mdshim_inject_route (it
 * picks a moment when none is in the loader).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../abi/mdtrace_abi.h"
#include "batch.h"
#include "ctl.h"
#include "debug.h"
#include "hooks.h"
#include "real.h"
#include "sample.h"
#include "spin.h"

__attribute__((visibility("default"))) unsigned long mdshim_inject_routed;

#ifdef MD_STATIC_REAL
void md_inject_abandon(void)
{
}

/* A program linked with the shim is never injected: nothing to adopt. */
void md_inject_adopt(void)
{
	__atomic_fetch_and(&md_ctl_pending, ~ADOPT_PENDING, __ATOMIC_RELEASE);
}
#else

static void *inject_dlopen(const char *file, int mode);

/*
 * The functions routed, by name, with the shim's hook for each, and (set
 * at start) the allocator's function and the function's address as the
 * program sees it: they differ in an executable built without -fPIE that
 * takes the function's address, whose PLT entry is then the function's
 * address for every module (a "canonical" PLT entry), and which calls the
 * allocator's through its own slot.
 */
static struct {
	const char *name;
	void *hook;
	uintptr_t real, canon;
} g_funcs[] = {
	{ "malloc", (void *)md_hook_malloc, 0, 0 },
	{ "free", (void *)md_hook_free, 0, 0 },
	{ "calloc", (void *)md_hook_calloc, 0, 0 },
	{ "realloc", (void *)md_hook_realloc, 0, 0 },
	{ "reallocarray", (void *)md_hook_reallocarray, 0, 0 },
	{ "memalign", (void *)md_hook_memalign, 0, 0 },
	{ "aligned_alloc", (void *)md_hook_aligned_alloc, 0, 0 },
	{ "posix_memalign", (void *)md_hook_posix_memalign, 0, 0 },
	{ "valloc", (void *)md_hook_valloc, 0, 0 },
	{ "pvalloc", (void *)md_hook_pvalloc, 0, 0 },
	{ "dlopen", (void *)inject_dlopen, 0, 0 },
};
#define N_FUNCS (sizeof(g_funcs) / sizeof(g_funcs[0]))
#define FUNC_DLOPEN (N_FUNCS - 1)

/*
 * A GOT slot routed or to route: its address, the value it held (the
 * allocator's function, or its PLT entry before lazy binding), the hook's
 * and the allocator's function; the bounds of the module's
 * PT_GNU_RELRO, read-only after the loader relocated it, which must be
 * made writable for the write.
 */
struct slot {
	uintptr_t *addr;
	uintptr_t old, hook, real;
	uintptr_t relro_lo, relro_hi;
};

_Static_assert(sizeof(struct slot) == INJECT_SLOT_WORDS * 8, "struct slot is INJECT_SLOT_WORDS words");
_Static_assert(offsetof(struct slot, addr) == INJECT_SLOT_ADDR * 8 && offsetof(struct slot, old) == INJECT_SLOT_OLD * 8 &&
		       offsetof(struct slot, hook) == INJECT_SLOT_HOOK * 8 && offsetof(struct slot, real) == INJECT_SLOT_REAL * 8,
	       "struct slot's words as mdtrace reads them");

#define MAX_SLOTS 32768
static struct slot *g_slots;
static size_t g_nslots;
/* Slots that could not be written (mprotect refused), and those past MAX_SLOTS. */
static unsigned long g_failed, g_dropped;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t g_self_base;
/* inject_fork_* are registered (once, by mdshim_inject_start). */
static bool g_atfork;

/*
 * Published for mdtrace, which reads them from the process's memory: the
 * slots routed, and those left to the allocator (failed or dropped).
 */
__attribute__((visibility("default"))) volatile unsigned long mdshim_inject_slots;
__attribute__((visibility("default"))) volatile unsigned long mdshim_inject_unrouted;
/* The list, for mdtrace to route the slots itself, and the slots past its room (SYMBOL_INJECT_LIST). */
__attribute__((visibility("default"))) struct slot *volatile mdshim_inject_list;
__attribute__((visibility("default"))) volatile unsigned long mdshim_inject_dropped;
/* And where the counts of md_batch_pending are. */
__attribute__((visibility("default"))) volatile unsigned long mdshim_inject_pending;
/*
 * The blocks the probes sampled before the route, left by mdtrace for the
 * hooks' first call (SYMBOL_ADOPT_AREA, md_inject_adopt), and those the
 * shim had no memory to take.
 */
__attribute__((visibility("default"))) volatile uintptr_t mdshim_adopt_area;
__attribute__((visibility("default"))) volatile unsigned long mdshim_adopt_count;
__attribute__((visibility("default"))) volatile unsigned long mdshim_adopt_failed;
/* Held while a thread takes them (md_spin_lock). */
static int g_adopt_lock;

/* The loader relocates most of the dynamic section's addresses in place: either way. */
static uintptr_t dyn_addr(uintptr_t base, uintptr_t p)
{
	return p < base ? p + base : p;
}

static bool known_slot(const uintptr_t *addr)
{
	for (size_t i = 0; i < g_nslots; i++)
		if (g_slots[i].addr == addr)
			return true;
	return false;
}

/* add_slot lists addr, which holds old for function f, unless it is listed already. */
static void add_slot(uintptr_t *addr, size_t f, uintptr_t old, uintptr_t lo, uintptr_t hi)
{
	if (known_slot(addr))
		return;
	if (g_nslots == MAX_SLOTS) {
		g_dropped++;
		return;
	}
	g_slots[g_nslots++] = (struct slot){ addr, old, (uintptr_t)g_funcs[f].hook, g_funcs[f].real, lo, hi };
}

/* The extent of the module being scanned, which holds its PLT. */
static uintptr_t g_mod_lo, g_mod_hi;

/*
 * scan_relocs lists the slots among n relocations at r that hold a routed
 * function, or, for a JUMP_SLOT not bound yet (lazy binding: the slot
 * holds an address in its own module's PLT), that will: the loader would
 * bind it to the allocator's function on its first call.
 */
static void scan_relocs(uintptr_t base, const ElfW(Rela) * r, size_t n, const ElfW(Sym) * symtab, const char *strtab,
			uintptr_t lo, uintptr_t hi)
{
	for (size_t i = 0; i < n; i++) {
		unsigned type = ELF64_R_TYPE(r[i].r_info);
		const char *name;
		uintptr_t *addr;

		if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT && type != R_X86_64_64)
			continue;
		if (ELF64_R_SYM(r[i].r_info) == 0)
			continue;
		name = strtab + symtab[ELF64_R_SYM(r[i].r_info)].st_name;
		addr = (uintptr_t *)(base + r[i].r_offset);
		for (size_t f = 0; f < N_FUNCS; f++) {
			uintptr_t v;

			if (g_funcs[f].real == 0 || strcmp(name, g_funcs[f].name) != 0)
				continue;
			/*
			 * Only a slot bound to the allocator's own function (or
			 * to the executable's canonical PLT entry of it), or to
			 * be: a module that brings or binds to another keeps it.
			 */
			v = __atomic_load_n(addr, __ATOMIC_RELAXED);
			if (v == g_funcs[f].real || v == g_funcs[f].canon)
				add_slot(addr, f, v, lo, hi);
			else if (type == R_X86_64_JUMP_SLOT && v >= g_mod_lo && v < g_mod_hi &&
				 (symtab[ELF64_R_SYM(r[i].r_info)].st_shndx == SHN_UNDEF ||
				  (g_funcs[f].real >= g_mod_lo && g_funcs[f].real < g_mod_hi)))
				/*
				 * Not bound yet, to the allocator, or within the
				 * allocator's own object (glibc calls its calloc
				 * and realloc through slots bound lazily).
				 */
				add_slot(addr, f, v, lo, hi);
			break;
		}
	}
}

static int scan_module(struct dl_phdr_info *info, size_t size, void *data)
{
	const ElfW(Dyn) *dyn = NULL;
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	const ElfW(Rela) *rela = NULL, *jmprel = NULL;
	size_t relasz = 0, pltrelsz = 0;
	uintptr_t base = info->dlpi_addr, lo = 0, hi = 0;

	(void)size;
	(void)data;
	/* The shim's own calls stay the allocator's; the vDSO has none. */
	if (base == g_self_base || (info->dlpi_name != NULL && strncmp(info->dlpi_name, "linux-vdso", 10) == 0))
		return 0;
	g_mod_lo = UINTPTR_MAX;
	g_mod_hi = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_LOAD) {
			if (base + ph->p_vaddr < g_mod_lo)
				g_mod_lo = base + ph->p_vaddr;
			if (base + ph->p_vaddr + ph->p_memsz > g_mod_hi)
				g_mod_hi = base + ph->p_vaddr + ph->p_memsz;
		}
		if (ph->p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
		else if (ph->p_type == PT_GNU_RELRO) {
			lo = base + ph->p_vaddr;
			hi = lo + ph->p_memsz;
		}
	}
	if (dyn == NULL)
		return 0;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		switch (dyn->d_tag) {
		case DT_SYMTAB:
			symtab = (const ElfW(Sym) *)dyn_addr(base, dyn->d_un.d_ptr);
			break;
		case DT_STRTAB:
			strtab = (const char *)dyn_addr(base, dyn->d_un.d_ptr);
			break;
		case DT_RELA:
			rela = (const ElfW(Rela) *)dyn_addr(base, dyn->d_un.d_ptr);
			break;
		case DT_RELASZ:
			relasz = dyn->d_un.d_val;
			break;
		case DT_JMPREL:
			jmprel = (const ElfW(Rela) *)dyn_addr(base, dyn->d_un.d_ptr);
			break;
		case DT_PLTRELSZ:
			pltrelsz = dyn->d_un.d_val;
			break;
		}
	}
	if (symtab == NULL || strtab == NULL)
		return 0;
	if (rela != NULL)
		scan_relocs(base, rela, relasz / sizeof(ElfW(Rela)), symtab, strtab, lo, hi);
	if (jmprel != NULL)
		scan_relocs(base, jmprel, pltrelsz / sizeof(ElfW(Rela)), symtab, strtab, lo, hi);
	return 0;
}

/*
 * g_open_page is a RELRO page write_slot left writable for the next slots
 * on it, 0 for none: the slots of a module's GOT share a few pages, and
 * each mprotect costs the thread making mdtrace's calls a stop.
 */
static uintptr_t g_open_page;

/* close_page makes the page write_slot left writable read-only again. */
static void close_page(void)
{
	if (g_open_page != 0) {
		mprotect((void *)g_open_page, (size_t)sysconf(_SC_PAGESIZE), PROT_READ);
		g_open_page = 0;
	}
}

/*
 * write_slot stores v in slot s, making a RELRO page writable for the
 * store (and the next ones on that page, until close_page). A slot's store
 * is one aligned word: a thread calling through it meanwhile takes the old
 * function or the new.
 */
static bool write_slot(const struct slot *s, uintptr_t v)
{
	uintptr_t a = (uintptr_t)s->addr, page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = a & ~(page - 1);
	bool relro = a >= s->relro_lo && a < s->relro_hi;

	if (relro && start != g_open_page) {
		close_page();
		if (mprotect((void *)start, page, PROT_READ | PROT_WRITE) != 0)
			return false;
		g_open_page = start;
	}
	__atomic_store_n(s->addr, v, __ATOMIC_RELEASE);
	return true;
}

/*
 * slot_gone says whether slot s is in a module unloaded since it was
 * listed (dlclose): its page is no longer mapped, and reading it would
 * fault. The slot is then dropped from the list (its address cleared, so
 * that a module loaded there later is listed anew). *last is the last page
 * found mapped, which is not asked again.
 */
static bool slot_gone(struct slot *s, uintptr_t *last)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)s->addr & ~(page - 1);
	unsigned char vec;
	int saved = errno;
	bool gone;

	if (s->addr == NULL)
		return true;
	if (start == *last)
		return false;
	gone = mincore((void *)start, page, &vec) != 0 && errno == ENOMEM;
	errno = saved;
	if (gone) {
		s->addr = NULL;
		return true;
	}
	*last = start;
	return false;
}

/* route_from points the slots from index i on at the hooks; g_lock held. */
static void route_from(size_t i)
{
	uintptr_t last = 0;

	for (; i < g_nslots; i++) {
		if (slot_gone(&g_slots[i], &last))
			continue;
		uintptr_t v = __atomic_load_n(g_slots[i].addr, __ATOMIC_RELAXED);

		/* A lazy slot may have been bound meanwhile. */
		if (v != g_slots[i].old && v != g_slots[i].real)
			continue;
		if (!write_slot(&g_slots[i], g_slots[i].hook))
			g_failed++;
	}
	close_page();
	mdshim_inject_slots = g_nslots - g_failed;
	mdshim_inject_unrouted = g_failed + g_dropped;
}

/* restore puts every routed slot back; g_lock held (or every other thread stopped). */
static unsigned long restore(void)
{
	unsigned long n = 0;
	uintptr_t last = 0;

	for (size_t i = 0; i < g_nslots; i++) {
		if (slot_gone(&g_slots[i], &last))
			continue;
		if (__atomic_load_n(g_slots[i].addr, __ATOMIC_RELAXED) != g_slots[i].hook)
			continue;
		if (write_slot(&g_slots[i], g_slots[i].old))
			n++;
	}
	close_page();
	return n;
}

/*
 * inject_dlopen is dlopen while the calls are routed: the modules it
 * loads (and those they need) get their slots routed too.
 */
static void *inject_dlopen(const char *file, int mode)
{
	void *h = ((void *(*)(const char *, int))g_funcs[FUNC_DLOPEN].real)(file, mode);
	size_t first;

	if (h == NULL || !__atomic_load_n(&mdshim_inject_routed, __ATOMIC_ACQUIRE))
		return h;
	pthread_mutex_lock(&g_lock);
	if (__atomic_load_n(&mdshim_inject_routed, __ATOMIC_ACQUIRE)) {
		first = g_nslots;
		dl_iterate_phdr(scan_module, NULL);
		route_from(first);
	}
	pthread_mutex_unlock(&g_lock);
	return h;
}

/*
 * A fork child of a process --all --inject gave the shim to (the shim
 * samples and batches at once only there) gives its calls back to the
 * allocator at once, where mdtrace's probes see them from its first call:
 * mdtrace takes it anew, as any process, if it gets busy. Through the
 * shim, its calls went unseen until its first sampled one found the
 * probes were its parent's. (-p --inject follows its children with their
 * shim.) g_lock is held across the fork, so that the child's copy of the
 * slots is whole.
 */
static void inject_fork_prepare(void)
{
	pthread_mutex_lock(&g_lock);
}

static void inject_fork_parent(void)
{
	pthread_mutex_unlock(&g_lock);
}

static void inject_fork_child(void)
{
	pthread_mutex_unlock(&g_lock);
	if (__atomic_load_n(&mdshim_inject_routed, __ATOMIC_ACQUIRE) && md_batch_on && md_sample_bytes != 0)
		md_inject_abandon();
}

/*
 * mdshim_inject_return is where mdtrace's calls of the shim's functions
 * return: it keeps the function's result in the slot its return address
 * was taken from, where mdtrace reads it, and makes rt_sigreturn, whose
 * frame mdtrace wrote above that slot: the thread's registers, signal
 * mask and vector state as they were before the call. The thread so goes
 * back to where it was stopped by itself, should mdtrace be gone.
 *
 * Before that, when mdtrace put a signal's number in r12 (which the call
 * keeps), the thread sends itself that signal: one the process neither
 * catches nor blocks and whose default is to ignore it. Traced, the
 * thread stops there for mdtrace, which then needs no stop at each
 * system call of the call; should mdtrace be gone, the signal is
 * discarded. mdtrace checks these bytes before it relies on them
 * (tracer/remotecall.go, shimStub).
 */
__asm__(".text\n"
	".globl mdshim_inject_return\n"
	".type mdshim_inject_return, @function\n"
	".p2align 4\n"
	"mdshim_inject_return:\n"
	"\tmovq %rax, -8(%rsp)\n"
	"\ttestl %r12d, %r12d\n"
	"\tjz 1f\n"
	"\tmovl $186, %eax\n" /* gettid */
	"\tsyscall\n"
	"\tmovl %eax, %edi\n"
	"\tmovl %r12d, %esi\n"
	"\tmovl $200, %eax\n" /* tkill */
	"\tsyscall\n"
	"1:\n"
	"\tmovl $15, %eax\n" /* rt_sigreturn */
	"\tsyscall\n"
	"\thlt\n"
	".size mdshim_inject_return, . - mdshim_inject_return\n");

/*
 * mdshim_inject_start sets the shim up in a process it was loaded into
 * with dlopen: batches with depth frames an allocation (no batches when
 * batch is 0), sampling of one allocation every sample bytes on average
 * (none when 0), both at once (--all --inject: only the sampled calls go
 * to the batches), and the list of slots to route. With batches, a
 * non-zero early is mdtrace's pid (~0: one the process cannot see, in
 * another PID namespace): the batches are held until mdtrace writes
 * mdshim_ready, as in an early start, once its probes on the shim's
 * sites are live (--all --inject routes the calls in the stop that
 * writes it). With blob not NULL (--all --inject), it then makes the
 * bypasses of the allocator's probes that blob, len bytes, describe, as
 * mdshim_inject_bypass does, in the same call, and leaves what that
 * returns in mdshim_inject_bypassed. It returns the slots listed,
 * or -errno.
 */
static long inject_start(unsigned long batch, unsigned long depth, unsigned long sample, unsigned long early);
__attribute__((visibility("default"))) long mdshim_inject_bypass(const void *blob, unsigned long len);
__attribute__((visibility("default"))) volatile long mdshim_inject_bypassed;
__attribute__((visibility("default"))) long mdshim_inject_start(const void *blob, unsigned long len,
								unsigned long batch, unsigned long depth,
								unsigned long sample, unsigned long early)
{
	long n = inject_start(batch, depth, sample, early);

	mdshim_inject_bypassed = 0;
	if (n >= 0 && blob != NULL)
		mdshim_inject_bypassed = mdshim_inject_bypass(blob, len);
	return n;
}

/* inject_start is mdshim_inject_start without the bypasses. */
static long inject_start(unsigned long batch, unsigned long depth, unsigned long sample, unsigned long early)
{
	Dl_info self, alloc;
	void *m, *lib;

	md_debug_on();
	md_real_resolve();
	if (md_real_usable_size == NULL)
		return -ENOSYS;
	if (batch && md_batch_pending == NULL) {
		m = mmap(NULL, sizeof(uint32_t) << INJECT_PENDING_BITS, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return -ENOMEM;
		md_batch_pending = m;
		mdshim_inject_pending = (uintptr_t)m;
	}
	if (batch && !md_batch_start(depth, md_real_usable_size))
		return -EINVAL;
	if (batch && early != 0) {
		if (early != ~0UL && early > INT32_MAX)
			return -EINVAL;
		md_early_start(early == ~0UL ? 0 : (pid_t)early, true);
	}
	if (sample && md_sample_bytes != sample && !md_sample_start(sample))
		return -ENOMEM;
	if (sample && mdshim_adopt_area == 0) {
		/* Touched only as far as mdtrace writes. */
		m = mmap(NULL, ADOPT_CAP * sizeof(uint64_t), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m == MAP_FAILED)
			return -ENOMEM;
		mdshim_adopt_area = (uintptr_t)m;
	}
	if (dladdr((void *)mdshim_inject_start, &self) == 0)
		return -ENOENT;
	g_self_base = (uintptr_t)self.dli_fbase;
	if (!g_atfork) {
		if (pthread_atfork(inject_fork_prepare, inject_fork_parent, inject_fork_child) != 0)
			return -ENOMEM;
		g_atfork = true;
	}
	pthread_mutex_lock(&g_lock);
	if (g_slots == NULL) {
		m = mmap(NULL, MAX_SLOTS * sizeof(struct slot), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m == MAP_FAILED) {
			pthread_mutex_unlock(&g_lock);
			return -ENOMEM;
		}
		g_slots = m;
	}
	/* Started again after it was given back: the list is made anew. */
	if (!__atomic_load_n(&mdshim_inject_routed, __ATOMIC_ACQUIRE))
		g_nslots = g_failed = g_dropped = 0;
	/*
	 * The allocator's functions are looked up in its own object: in the
	 * global scope an executable's canonical PLT entry comes first.
	 */
	lib = dladdr((void *)md_real_malloc, &alloc) != 0 ? dlopen(alloc.dli_fname, RTLD_LAZY | RTLD_NOLOAD) : NULL;
	for (size_t f = 0; f < N_FUNCS; f++) {
		g_funcs[f].canon = (uintptr_t)md_real_dlsym(RTLD_DEFAULT, g_funcs[f].name);
		g_funcs[f].real = lib != NULL ? (uintptr_t)md_real_dlsym(lib, g_funcs[f].name) : 0;
		if (g_funcs[f].real == 0)
			g_funcs[f].real = g_funcs[f].canon;
	}
	if (lib != NULL)
		dlclose(lib);
	dl_iterate_phdr(scan_module, NULL);
	mdshim_inject_list = g_slots;
	mdshim_inject_dropped = g_dropped;
	pthread_mutex_unlock(&g_lock);
	return (long)g_nslots;
}

/*
 * mdshim_inject_route points the listed slots at the hooks. mdtrace calls
 * it with every other thread stopped, so that the switch from its probes
 * on the allocator to the hooks is one moment for the program; it takes no
 * lock another thread could hold. It returns the slots routed.
 */
__attribute__((visibility("default"))) long mdshim_inject_route(void)
{
	if (g_slots == NULL)
		return -EINVAL;
	__atomic_store_n(&mdshim_inject_routed, 1, __ATOMIC_RELEASE);
	route_from(0);
	return (long)mdshim_inject_slots;
}

/*
 * mdshim_inject_stop puts every slot back, with every other thread
 * stopped, and returns how many it restored. A hook called afterwards
 * (through a pointer taken meanwhile) passes its call to the allocator
 * once mdtrace has left the probe sites.
 */
__attribute__((visibility("default"))) long mdshim_inject_stop(void)
{
	__atomic_store_n(&mdshim_inject_routed, 0, __ATOMIC_RELEASE);
	md_early_end();
	return (long)restore();
}

/*
 * The bypasses (mdtrace --all --inject): the probes on the allocator have
 * no PID filter there, so the hooks pass each call on through a copy of
 * the function's first instructions, up to the last one probed, that
 * jumps back into the function after it (tracer/bypass.go makes them).
 * g_bypassed holds the functions the shim used before, given back when the
 * shim gives the process's calls back by itself.
 */
#define BYPASS_FUNCS 5
#define BYPASS_NONE UINT32_MAX
static void *g_bypassed[BYPASS_FUNCS];
/* What the shim calls for each function: its bypass, or the function. */
static void *g_fn[BYPASS_FUNCS];

/*
 * glibc's realloc and memalign call its malloc and free themselves for
 * some arguments, at their probed entries, where the probes pass over them
 * as the allocator's own calls but the trap is paid: those calls go to the
 * bypasses of malloc and free instead, as glibc 2.36 makes them (realloc
 * of a null pointer, realloc to 0 bytes, which frees, and an alignment
 * that malloc gives anyway, its MALLOC_ALIGNMENT).
 */
static void *bypass_realloc(void *p, size_t n)
{
	if (p == NULL)
		return ((void *(*)(size_t))g_fn[0])(n);
	if (n == 0) {
		((void (*)(void *))g_fn[1])(p);
		return NULL;
	}
	return ((void *(*)(void *, size_t))g_fn[3])(p, n);
}

static void *bypass_memalign(size_t alignment, size_t n)
{
	if (alignment <= 2 * sizeof(size_t))
		return ((void *(*)(size_t))g_fn[0])(n);
	return ((void *(*)(size_t, size_t))g_fn[4])(alignment, n);
}

/* The shim's pointers to the allocator's functions, in the blob's order. */
static void **const g_real[BYPASS_FUNCS] = {
	(void **)&md_real_malloc, (void **)&md_real_free,     (void **)&md_real_calloc,
	(void **)&md_real_realloc, (void **)&md_real_memalign,
};

/*
 * mdshim_inject_bypass takes blob, len bytes: the address of the page the
 * code goes in (8 bytes: near the allocator's code, whose RIP-relative
 * operands the code keeps); for md_real_malloc, free, calloc, realloc and
 * memalign, the offset of its bypass in the code that follows (4 bytes
 * each; BYPASS_NONE: the function is not probed); then the code. The page
 * is mapped there, or the call fails, and made executable once written.
 * It returns the functions bypassed, or -errno. mdtrace calls it before
 * mdshim_inject_route.
 */
__attribute__((visibility("default"))) long mdshim_inject_bypass(const void *blob, unsigned long len)
{
	const size_t head = sizeof(uint64_t) + BYPASS_FUNCS * sizeof(uint32_t);
	uint64_t where;
	uint32_t at[BYPASS_FUNCS];
	size_t code, page = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char *m;
	long n = 0;

	if (len <= head || len - head > page)
		return -EINVAL;
	code = len - head;
	memcpy(&where, blob, sizeof(where));
	memcpy(at, (const unsigned char *)blob + sizeof(where), sizeof(at));
	for (size_t i = 0; i < BYPASS_FUNCS; i++)
		if (at[i] != BYPASS_NONE && at[i] >= code)
			return -EINVAL;
	m = mmap((void *)(uintptr_t)where, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
		 -1, 0);
	if (m == MAP_FAILED)
		return -errno;
	if ((uintptr_t)m != where) {
		/* A kernel older than 4.17 takes the address as a hint. */
		munmap(m, page);
		return -EEXIST;
	}
	memcpy(m, (const unsigned char *)blob + head, code);
	if (mprotect(m, page, PROT_READ | PROT_EXEC) != 0) {
		n = -errno;
		munmap(m, page);
		return n;
	}
	/* In order: realloc's and memalign's wrappers use malloc's and free's. */
	for (size_t i = 0; i < BYPASS_FUNCS; i++) {
		if (g_bypassed[i] == NULL)
			g_bypassed[i] = __atomic_load_n(g_real[i], __ATOMIC_ACQUIRE);
		g_fn[i] = at[i] == BYPASS_NONE ? g_bypassed[i] : (void *)(m + at[i]);
		n += at[i] != BYPASS_NONE;
		__atomic_store_n(g_real[i],
				 i == 3 ? (void *)bypass_realloc : i == 4 ? (void *)bypass_memalign : g_fn[i],
				 __ATOMIC_RELEASE);
	}
	return n;
}

void md_inject_adopt(void)
{
	const uint64_t *area = (const uint64_t *)mdshim_adopt_area;
	unsigned long n, failed = 0;

	md_spin_lock(&g_adopt_lock);
	/* Another thread took them while this one waited. */
	if (__atomic_load_n(&md_ctl_pending, __ATOMIC_ACQUIRE) & ADOPT_PENDING) {
		n = mdshim_adopt_count;
		if (area == NULL || md_sample_bytes == 0)
			failed = n;
		else
			for (unsigned long i = 0; i < n && i < ADOPT_CAP; i++)
				failed += !md_sample_mark((const void *)(uintptr_t)area[i]);
		mdshim_adopt_failed += failed;
		mdshim_adopt_count = 0;
		__atomic_fetch_and(&md_ctl_pending, ~ADOPT_PENDING, __ATOMIC_RELEASE);
	}
	md_spin_unlock(&g_adopt_lock);
}

/*
 * mdshim_sample_adopt takes n blocks the probes sampled before the hooks
 * took the process's calls (--all --inject): their frees must reach the
 * sites as those of the shim's samples do. mdtrace calls it with every
 * other thread stopped, before mdshim_inject_route. It returns the blocks
 * taken.
 */
__attribute__((visibility("default"))) long mdshim_sample_adopt(const uintptr_t *blocks, unsigned long n)
{
	long taken = 0;

	if (md_sample_bytes == 0)
		return -EINVAL;
	for (unsigned long i = 0; i < n; i++)
		taken += md_sample_mark((const void *)blocks[i]);
	return taken;
}

void md_inject_abandon(void)
{
	pthread_mutex_lock(&g_lock);
	/* The calls go to the functions themselves again, probes and all. */
	for (size_t i = 0; i < BYPASS_FUNCS; i++)
		if (g_bypassed[i] != NULL)
			__atomic_store_n(g_real[i], g_bypassed[i], __ATOMIC_RELEASE);
	if (__atomic_exchange_n(&mdshim_inject_routed, 0, __ATOMIC_ACQ_REL))
		restore();
	/* Nobody will say ready to a fork child. */
	md_early_end();
	pthread_mutex_unlock(&g_lock);
}
#endif
