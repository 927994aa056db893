// nofp calls malloc the way code built without frame pointers does: with
// the frame-pointer register holding data instead of the caller's frame.
// Each block it leaks is allocated by call_with_fp with %rbp set to a fake
// frame record whose "return address" names a real function, main. The
// calls run in a thread whose stack is the bottom of a 32 MiB mapping; the
// top of the mapping holds a record far above the stack.
//
//   1001 bytes: %rbp points to the far record (16 MiB above the stack);
//   1002 bytes: %rbp points to a record on the stack whose return address
//               is a string;
//   1003 bytes: %rbp points to a record on the stack whose return address
//               is main's and whose next record is the far one;
//   1004 bytes: %rbp points to a record in a heap block, below the stack.
//
// A walk of the frame-pointer chain must stop after call_with_fp, the one
// real frame, or for 1003 after main: the other records are not frames.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

// call_with_fp(fn, n, fp) returns fn(n), called with %rbp = fp.
void *call_with_fp(void *(*fn)(size_t), size_t n, void *fp);
__asm__(".text\n"
	".globl call_with_fp\n"
	".type call_with_fp, @function\n"
	"call_with_fp:\n"
	"	push %rbp\n"
	"	mov %rdx, %rbp\n"
	"	mov %rdi, %rax\n"
	"	mov %rsi, %rdi\n"
	"	call *%rax\n"
	"	pop %rbp\n"
	"	ret\n"
	".size call_with_fp, . - call_with_fp\n");

#define MAPPING (32 << 20)
#define STACK (1 << 20)
#define FAR (16 << 20)

int main(void);

static void *volatile sink[4];
static char *mapping;

static void *run(void *arg)
{
	uint64_t *far = (uint64_t *)(mapping + STACK + FAR);
	uint64_t *heap = malloc(32);
	uint64_t rec[2];
	char text[8];

	(void)arg;
	far[0] = 0;
	far[1] = (uint64_t)main + 4;
	sink[0] = call_with_fp(malloc, 1001, far);

	memcpy(text, "C_PAPER", 8);
	rec[0] = 0;
	memcpy(&rec[1], text, 8);
	sink[1] = call_with_fp(malloc, 1002, rec);

	rec[0] = (uint64_t)far;
	rec[1] = (uint64_t)main + 4;
	sink[2] = call_with_fp(malloc, 1003, rec);

	heap[0] = 0;
	heap[1] = (uint64_t)main + 4;
	sink[3] = call_with_fp(malloc, 1004, heap);
	free(heap);
	return NULL;
}

int main(void)
{
	pthread_attr_t attr;
	pthread_t t;

	// No stdio buffer: its block would be one more leak.
	setvbuf(stdout, NULL, _IONBF, 0);
	mapping = mmap(NULL, MAPPING, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mapping == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	pthread_attr_init(&attr);
	pthread_attr_setstack(&attr, mapping, STACK);
	if (pthread_create(&t, &attr, run, NULL) != 0) {
		fputs("nofp: pthread_create failed\n", stderr);
		return 1;
	}
	pthread_join(t, NULL);
	puts("nofp: done");
	return 0;
}
