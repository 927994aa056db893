// libslowload's constructor runs with the loader's lock held: once the
// main thread sleeps (in pthread_join), it says "loading" and waits for a
// line on standard input (see slowload.c). The main thread is then the
// first that can make a call for mdtrace.
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int main_sleeps(void)
{
	char path[64], buf[512];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", getpid(), getpid());
	if ((fd = open(path, O_RDONLY)) < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	return p != NULL && p[1] == ' ' && p[2] == 'S';
}

__attribute__((constructor)) static void wait_line(void)
{
	char c;

	while (!main_sleeps())
		usleep(1000);
	write(1, "loading\n", 8);
	while (read(0, &c, 1) == 1 && c != '\n')
		;
}
