// xframe says what the kernel puts in its signal frames' vector state: it
// takes a signal and prints the state's size and features from the
// frame's fx_sw_bytes, "xstate_size N xfeatures 0xX", or "no xstate" for a
// frame without them.
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>

#define FP_XSTATE_MAGIC1 0x46505853U

static void on_usr1(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	const unsigned char *fp = (const unsigned char *)((ucontext_t *)uc)->uc_mcontext.fpregs;
	uint32_t magic, size;
	uint64_t features;
	/* fx_sw_bytes, in the legacy area's reserved bytes at 464: magic1,
	 * extended_size, xfeatures, xstate_size. */
	memcpy(&magic, fp + 464, 4);
	memcpy(&features, fp + 472, 8);
	memcpy(&size, fp + 480, 4);
	if (magic != FP_XSTATE_MAGIC1)
		printf("no xstate\n");
	else
		printf("xstate_size %u xfeatures %#llx\n", size, (unsigned long long)features);
}

int main(void)
{
	struct sigaction sa = {0};

	sa.sa_sigaction = on_usr1;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGUSR1, &sa, NULL);
	raise(SIGUSR1);
	return 0;
}
