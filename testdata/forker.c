// forker leaks a block, forks, and waits for its child, which leaks one of
// its own: the child is a zygote child (forked without exec), which starts
// with its parent's block and marks its own allocation as a zygote
// child's.
//
//   forker        1111 bytes leaked by the parent before the fork (so by
//                 both processes), 2222 by the child after it
//   forker wait   the same once a line is read from standard input, after
//                 printing "ready" (for attaching)
//   forker free   the same, but the child frees the block it started with,
//                 its copy of its parent's, and leaks only its own
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void *volatile sink[2];

__attribute__((noinline)) static void before_fork(void)
{
	sink[0] = malloc(1111);
}

__attribute__((noinline)) static void in_child(void)
{
	sink[1] = malloc(2222);
}

int main(int argc, char **argv)
{
	char line[16];
	int status;
	pid_t pid;

	if (argc > 1 && strcmp(argv[1], "wait") == 0) {
		printf("ready\n");
		fflush(stdout);
		if (fgets(line, sizeof(line), stdin) == NULL)
			return 1;
	}
	before_fork();
	pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		if (argc > 1 && strcmp(argv[1], "free") == 0)
			free(sink[0]);
		in_child();
		printf("child %d\n", (int)getpid());
		return 0;
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "forker: the child failed\n");
		return 1;
	}
	printf("parent %d\n", (int)getpid());
	return 0;
}
