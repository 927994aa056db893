// dlhost loads libplugin.so from its own directory, has it leak a block
// of 4321 bytes, unloads it, then loads other libraries over its old
// addresses' neighbourhood, and exits.
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char path[PATH_MAX];
	(void)argc;
	snprintf(path, sizeof(path), "%s", argv[0]);
	char *slash = strrchr(path, '/');
	snprintf(slash ? slash + 1 : path, sizeof(path) - (slash ? (size_t)(slash + 1 - path) : 0), "libplugin.so");
	void *h = dlopen(path, RTLD_NOW);
	if (!h) {
		write(2, "dlhost: dlopen failed\n", 22);
		return 1;
	}
	void (*leak)(void) = (void (*)(void))dlsym(h, "plugin_leak");
	leak();
	dlclose(h);
	write(1, "dlhost: done\n", 13);
	return 0;
}
