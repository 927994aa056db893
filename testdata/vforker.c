// vforker: between vfork and exec its child allocates in the memory it
// shares with its parent, as dash does, and the parent frees one of those
// blocks once the child has executed /bin/true. The other, 3333 bytes from
// in_vfork_child, is the parent's leak.
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

int main(void)
{
	int status;
	pid_t pid = vfork();

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
