// vforker: between vfork and exec its child allocates in the memory it
// shares with its parent, as dash does, and the parent frees one of those
// blocks once the child has executed /bin/true. The other, 3333 bytes from
// in_vfork_child, is the parent's leak. With the argument "wait" it first
// writes "ready" and waits for a line on its standard input (for mdtrace -p).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char *volatile shared;
static void *volatile kept;

__attribute__((noinline)) static void in_vfork_child(void)
{
	shared = strdup("made in the vfork child");
	kept = malloc(3333);
}

int main(int argc, char **argv)
{
	int status;
	pid_t pid;

	if (argc > 1 && strcmp(argv[1], "wait") == 0) {
		char line[16];

		puts("ready");
		fflush(stdout);
		if (!fgets(line, sizeof line, stdin))
			return 4;
	}
	pid = vfork();

	if (pid == 0) {
		in_vfork_child();
		execl("/bin/true", "true", (char *)0);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return 2;
	free(shared);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
}
