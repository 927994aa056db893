// plugin is a library that dlhost loads, makes leak, and unloads.
#include <stdlib.h>

static void *volatile kept;

__attribute__((noinline)) void plugin_leak(void)
{
	kept = malloc(4321);
}
