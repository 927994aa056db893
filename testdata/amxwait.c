// amxwait holds data in an AMX tile register through a wait: mdtrace's
// calls in a thread must give the thread its whole vector state back, the
// tile data included, where the process asked for it.
//
// It asks for AMX's tile data (arch_prctl ARCH_REQ_XCOMP_PERM), loads a
// pattern into tile 0, says "ready", and waits for a line on standard input
// with raw read system calls, which keep the tiles; then it says "tile ok",
// or "tile changed" if tile 0 no longer holds the pattern, and exits when
// standard input closes. Without AMX it says "no amx: " and why, and exits.
#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

struct tile_config {
	uint8_t palette;
	uint8_t start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};

static uint8_t pattern[16 * 64], got[16 * 64];

int main(void)
{
	unsigned int a, b, c, d;
	struct tile_config cfg = {.palette = 1};
	char ch;
	long r;

	/* CPUID.(7,0):EDX bit 24, AMX-TILE. */
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1U << 24))) {
		puts("no amx: the processor has none");
		return 0;
	}
	if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
		puts("no amx: the kernel did not give it");
		return 0;
	}
	for (size_t i = 0; i < sizeof(pattern); i++)
		pattern[i] = (uint8_t)(i * 7 + 3);
	cfg.colsb[0] = 64;
	cfg.rows[0] = 16;
	_tile_loadconfig(&cfg);
	_tile_loadd(0, pattern, 64);
	/* Raw system calls from here to the store: nothing touches the tiles. */
	r = syscall(SYS_write, 1, "ready\n", 6);
	do {
		__asm__ volatile("syscall" : "=a"(r) : "0"(0L), "D"(0L), "S"(&ch), "d"(1L) : "rcx", "r11", "memory");
	} while (r == 1 && ch != '\n');
	_tile_stored(0, got, 64);
	_tile_release();
	printf("tile %s\n", memcmp(got, pattern, sizeof(got)) == 0 ? "ok" : "changed");
	fflush(stdout);
	while (read(0, &ch, 1) == 1)
		;
	return 0;
}
