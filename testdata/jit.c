// jit allocates from code it generates at run time, in an anonymous
// executable mapping that no file and no unwind table describes, as a JIT
// compiler's code does: 3 blocks of 777 bytes, leaked. Built -O2 without
// frame pointers (testdata/Makefile).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int main(void)
{
	// sub $8, %rsp; movabs $malloc, %rax; mov $777, %edi; call *%rax;
	// add $8, %rsp; ret
	unsigned char code[] = {0x48, 0x83, 0xec, 0x08, 0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0xbf, 0x09, 0x03,
				0x00, 0x00, 0xff, 0xd0, 0x48, 0x83, 0xc4, 0x08, 0xc3};
	void *(*volatile target)(size_t) = malloc;
	uint64_t addr = (uint64_t)(uintptr_t)target;
	memcpy(code + 6, &addr, 8);
	void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return 1;
	memcpy(page, code, sizeof(code));
	if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0)
		return 1;
	void *(*jitted)(void) = (void *(*)(void))page;
	static void *volatile kept[3];
	for (int i = 0; i < 3; i++)
		kept[i] = jitted();
	return 0;
}
