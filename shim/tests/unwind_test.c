// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The unwinder's test program (run_unwind.sh): main calls the chain of
 * unwind_chain.c, built with the flags under test, down to a bottom that
 * allocates:
 *
 *   unwind_test chain        leaf, through c1 to c11
 *   unwind_test signal       leaf, from a SIGALRM handler that stops spin
 *   unwind_test altstack     the same, the handler on a signal stack
 *   unwind_test dlopen LIB   lib_leaf and lib_entry of LIB, dlopen'ed
 *   unwind_test reload OLD LIB   the same, after OLD was dlopen'ed, walked
 *                            and dlclose'd, LIB mapped where OLD was
 *   unwind_test no_fde       leaf, from code without CFI whose rbp is no frame
 *   unwind_test bad_ra       leaf, from code without CFI whose frame record's
 *                            return address is in no object
 *   unwind_test unsupported  leaf, from code whose CFA is an expression
 *   unwind_test bounds       leaf, from code whose CFA is off the stack
 *
 * Under libmdshim.so with front_guard, the block's free reports its
 * corrupted guard with a backtrace; under the model shim with
 * MDSHIM_BATCH, the block's frames are logged the same way
 * (unwind_report.c). Either way, stdout says why the walks stopped.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "unwind_chain.h"
#include "unwind_report.h"

/* Bottoms for the walks that must stop early, each calling leaf. */
int no_fde(int x);
int bad_ra(int x);
int unsupported(int x);
int bounds(int x);
__asm__(".text\n"
	/* No CFI; rbp is 16, not a frame. */
	".type no_fde, @function\n"
	"no_fde:\n"
	"	push %rbp\n"
	"	mov $16, %rbp\n"
	"	call leaf\n"
	"	pop %rbp\n"
	"	ret\n"
	".size no_fde, . - no_fde\n"
	/* No CFI; rbp is a record on the stack whose return address is 0x12345678. */
	".type bad_ra, @function\n"
	"bad_ra:\n"
	"	push %rbp\n"
	"	sub $16, %rsp\n"
	"	movq $0, (%rsp)\n"
	"	movq $0x12345678, 8(%rsp)\n"
	"	mov %rsp, %rbp\n"
	"	call leaf\n"
	"	add $16, %rsp\n"
	"	pop %rbp\n"
	"	ret\n"
	".size bad_ra, . - bad_ra\n"
	/* The CFA as an expression, rsp + 8 + 8, which the unwinder does not evaluate. */
	".type unsupported, @function\n"
	"unsupported:\n"
	"	.cfi_startproc\n"
	"	sub $8, %rsp\n"
	"	.cfi_escape 0x0f, 0x04, 0x77, 0x08, 0x38, 0x22\n"
	"	call leaf\n"
	"	add $8, %rsp\n"
	"	.cfi_def_cfa_offset 8\n"
	"	ret\n"
	"	.cfi_endproc\n"
	".size unsupported, . - unsupported\n"
	/* The CFA is rbp + 16, and rbp is 0x10000. */
	".type bounds, @function\n"
	"bounds:\n"
	"	.cfi_startproc\n"
	"	push %rbp\n"
	"	.cfi_def_cfa_offset 16\n"
	"	.cfi_offset %rbp, -16\n"
	"	mov $0x10000, %rbp\n"
	"	.cfi_def_cfa_register %rbp\n"
	"	call leaf\n"
	"	pop %rbp\n"
	"	.cfi_def_cfa %rsp, 8\n"
	"	ret\n"
	"	.cfi_endproc\n"
	".size bounds, . - bounds\n");

static const struct {
	const char *mode;
	int (*bottom)(int);
} bottoms[] = {
	{"chain", leaf}, {"no_fde", no_fde}, {"bad_ra", bad_ra}, {"unsupported", unsupported}, {"bounds", bounds},
};

int main(int argc, char **argv)
{
	struct itimerval every_ms = {{0, 1000}, {0, 1000}}, off = {{0, 0}, {0, 0}};
	const char *mode = argc > 1 ? argv[1] : "";
	int r;

	chain_corrupt = !unwind_batched();
	for (size_t i = 0; i < sizeof(bottoms) / sizeof(bottoms[0]); i++)
		if (strcmp(mode, bottoms[i].mode) == 0)
			chain_bottom = bottoms[i].bottom;
	if (strcmp(mode, "signal") == 0 || strcmp(mode, "altstack") == 0) {
		static char alt[64 * 1024] __attribute__((aligned(16)));
		stack_t ss = {.ss_sp = alt, .ss_size = sizeof(alt)};
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_signal;
		if (strcmp(mode, "altstack") == 0) {
			sigaltstack(&ss, NULL);
			sa.sa_flags = SA_ONSTACK;
		}
		sigaction(SIGALRM, &sa, NULL);
		chain_bottom = spin;
	} else if ((strcmp(mode, "dlopen") == 0 && argc > 2) || (strcmp(mode, "reload") == 0 && argc > 3)) {
		void *lib;

		if (strcmp(mode, "reload") == 0) {
			/* The first library's frames walked, then unloaded: the second
			 * one, mapped where it was, must not be walked by its rules. */
			void *old = dlopen(argv[2], RTLD_NOW);
			Dl_info at_old, at_new;

			if (old == NULL) {
				fprintf(stderr, "%s\n", dlerror());
				return 2;
			}
			chain_bottom = (int (*)(int))dlsym(old, "lib_entry");
			*(volatile int *)dlsym(old, "lib_corrupt") = 0;
			c11(0);
			dladdr((void *)chain_bottom, &at_old);
			dlclose(old);
			argv++;
			lib = dlopen(argv[2], RTLD_NOW);
			if (lib != NULL && (dladdr(dlsym(lib, "lib_entry"), &at_new) == 0 || at_new.dli_fbase != at_old.dli_fbase)) {
				fprintf(stderr, "the second library is not mapped where the first was\n");
				return 2;
			}
		} else {
			lib = dlopen(argv[2], RTLD_NOW);
		}

		if (lib == NULL) {
			fprintf(stderr, "%s\n", dlerror());
			return 2;
		}
		chain_bottom = (int (*)(int))dlsym(lib, "lib_entry");
		*(volatile int *)dlsym(lib, "lib_corrupt") = chain_corrupt;
	}
	if (chain_bottom == NULL) {
		fprintf(stderr, "usage: unwind_test chain|signal|altstack|dlopen LIB|reload OLD LIB|no_fde|bad_ra|unsupported|bounds\n");
		return 2;
	}
	unwind_begin();
	if (chain_bottom == spin)
		setitimer(ITIMER_REAL, &every_ms, NULL);
	r = c11(0);
	setitimer(ITIMER_REAL, &off, NULL);
	unwind_end();
	return r < 0;
}
