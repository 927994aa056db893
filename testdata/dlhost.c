// dlhost loads libplugin.so from its own directory, has it leak a block
// of 4321 bytes, unloads it, then loads other libraries over its old
// addresses' neighbourhood, and exits.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "plugin.h"

int main(int argc, char **argv)
{
	(void)argc;
	void *h = open_plugin(argv[0]);
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
