// open_plugin loads libplugin.so from the directory of the program argv0
// names (RTLD_NOW), for dlhost and dlfork.
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

static void *open_plugin(const char *argv0)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s", argv0);
	char *slash = strrchr(path, '/');
	snprintf(slash ? slash + 1 : path, sizeof(path) - (slash ? (size_t)(slash + 1 - path) : 0), "libplugin.so");
	return dlopen(path, RTLD_NOW);
}
