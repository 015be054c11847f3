/*
 * memtime: run a command and print "WALL_SECONDS MAXRSS_KIB EXIT VOLUNTARY
 * INVOLUNTARY" on fd 3 (or stderr when fd 3 is closed): the last two are
 * its context switches (getrusage's ru_nvcsw, ru_nivcsw: a voluntary one
 * is a sleep, on a lock, a condition variable or I/O). With --preload LIB the command runs with
 * LD_PRELOAD=LIB; memtime itself never runs preloaded.
 *
 *   memtime [--preload LIB] -- CMD [ARGS...]
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *lib = NULL;
	int i = 1;
	for (; i < argc; i++) {
		if (!strcmp(argv[i], "--preload") && i + 1 < argc)
			lib = argv[++i];
		else if (!strcmp(argv[i], "--"))
			break;
	}
	if (i + 1 >= argc) {
		fprintf(stderr, "usage: memtime [--preload LIB] -- CMD [ARGS...]\n");
		return 2;
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid_t pid = fork();
	if (pid == 0) {
		if (lib && *lib)
			setenv("LD_PRELOAD", lib, 1);
		else
			unsetenv("LD_PRELOAD");
		execvp(argv[i + 1], argv + i + 1);
		perror("memtime: exec");
		_exit(127);
	}
	int st;
	struct rusage ru;
	if (wait4(pid, &st, 0, &ru) < 0) {
		perror("memtime: wait4");
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
	int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	FILE *out = fdopen(3, "w");
	if (!out)
		out = stderr;
	fprintf(out, "%.4f %ld %d %ld %ld\n", wall, ru.ru_maxrss, code, ru.ru_nvcsw, ru.ru_nivcsw);
	fclose(out);
	return code;
}
