// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * libmdshim.so: mdtrace's LD_PRELOAD library.
 *
 * This version is a pure passthrough: it replaces no allocation function,
 * so a program that preloads it allocates through glibc exactly as without
 * it. The memory-rewriting options (guards, fill, free_track, expand_alloc)
 * and the fast probe sites will live here.
 */

/* mdshim_version names the library's interface version, for mdtrace. */
__attribute__((visibility("default"))) const char *mdshim_version(void)
{
	return "mdshim passthrough 0";
}
