// dlfork is a target for --inject whose modules change after the shim
// listed their GOT slots: it loads libplugin.so (RTLD_NOW, whose slot of
// malloc the shim lists) at its start and says "ready"; at a line on
// standard input it allocates and frees a block, unloads the plugin and
// says "closed"; at the next it
// forks a child that allocates and exits with 7, and says "child 7" (or
// "child signal N" if the child was killed); then it exits at the end of
// its input.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plugin.h"

static void *volatile sink;

static void wait_line(void)
{
	char c;
	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

int main(int argc, char **argv)
{
	char line[64];
	int status, n;
	(void)argc;
	void *h = open_plugin(argv[0]);
	if (!h) {
		write(2, "dlfork: dlopen failed\n", 22);
		return 1;
	}
	write(1, "ready\n", 6);
	wait_line();
	sink = malloc(64);
	free(sink);
	dlclose(h);
	write(1, "closed\n", 7);
	wait_line();
	pid_t child = fork();
	if (child == 0) {
		sink = malloc(100);
		free(sink);
		_exit(7);
	}
	if (child < 0 || waitpid(child, &status, 0) != child)
		return 2;
	if (WIFSIGNALED(status))
		n = snprintf(line, sizeof(line), "child signal %d\n", WTERMSIG(status));
	else
		n = snprintf(line, sizeof(line), "child %d\n", WEXITSTATUS(status));
	write(1, line, n);
	wait_line();
	return 0;
}
