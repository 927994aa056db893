// spawner runs a program as build tools do, with posix_spawn (glibc's
// clone with CLONE_VM | CLONE_VFORK), then vforks a child that exits
// without running anything, and leaks a block of its own.
//
//   spawner PROG [ARGS]   prints "spawned PID" and "vforked PID"; exits 0
//                         when PROG exited 0 and the vfork child with 3
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void *volatile sink;

__attribute__((noinline)) static void leak_in_spawner(void)
{
	sink = malloc(3333);
}

int main(int argc, char **argv)
{
	int status;
	pid_t pid;

	if (argc < 2) {
		fprintf(stderr, "usage: spawner PROG [ARGS]\n");
		return 2;
	}
	leak_in_spawner();
	if (posix_spawn(&pid, argv[1], NULL, NULL, argv + 1, environ) != 0) {
		perror("posix_spawn");
		return 1;
	}
	printf("spawned %d\n", (int)pid);
	fflush(stdout);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return 1;
	pid = vfork();
	if (pid < 0) {
		perror("vfork");
		return 1;
	}
	if (pid == 0)
		_exit(3);
	printf("vforked %d\n", (int)pid);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 3)
		return 1;
	return 0;
}
