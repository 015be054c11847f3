/*
 * forkexec: fork-heavy work with a live heap, in the manner of `perf bench
 * syscall fork` and `execve` (where Linux 7.0's sheaves were bisected for
 * a 6-11 % regression, March 2026), for a user-space allocator.
 *
 * The process keeps LIVE blocks of 16 .. 512 bytes (log-uniform) in slots.
 * FORKS times: REPLACE random slots get a new block (the old one freed,
 * the new one written: state that changes), then TEMP blocks are
 * allocated, written and freed in random order (the work of one request),
 * then the process forks; the child exits at once (mode fork) or execs
 * /bin/true (mode exec), and the parent waits for it. What the allocator
 * decides shows in the fork: every page written since the last fork is
 * copied on the parent's next write to it (the child shares them until it
 * exits or execs), so an allocator that places one request's temporaries
 * on few pages, and reuses them, pays few copies; the page tables copied
 * grow with what the heap holds; and the allocator's fork handlers run in
 * both processes.
 *
 *   forkexec [FORKS=2000] [LIVE=100000] [REPLACE=100] [TEMP=2000] [fork|exec]
 *
 * Prints "forkexec: N forks, minor faults per fork F" (the parent's own,
 * getrusage); the time is taken from outside.
 */
#include "common.h"

#include <stdbool.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long forks = arg_or(argc, argv, 1, 2000), live = arg_or(argc, argv, 2, 100000);
	long replace = arg_or(argc, argv, 3, 100), temp = arg_or(argc, argv, 4, 2000);
	bool exec = argc > 5 && !strcmp(argv[5], "exec");
	if (forks < 1 || live < 1 || replace < 0 || temp < 0)
		return 2;
	char **tmp = xmalloc((size_t)(temp ? temp : 1) * sizeof *tmp);
	uint64_t seed = 0xf0f0;
	char **slot = xmalloc((size_t)live * sizeof *slot);
	for (long i = 0; i < live; i++) {
		size_t n = rnd_size(&seed, 16, 512);
		slot[i] = xmalloc(n);
		memset(slot[i], (int)i, n);
	}
	struct rusage r0, r1;
	getrusage(RUSAGE_SELF, &r0);
	for (long f = 0; f < forks; f++) {
		for (long k = 0; k < replace; k++) {
			long i = (long)(rnd(&seed) % (uint64_t)live);
			free(slot[i]);
			size_t n = rnd_size(&seed, 16, 512);
			slot[i] = xmalloc(n);
			memset(slot[i], (int)k, n < 64 ? n : 64);
		}
		for (long k = 0; k < temp; k++) {
			size_t n = rnd_size(&seed, 16, 512);
			tmp[k] = xmalloc(n);
			memset(tmp[k], (int)k, n < 64 ? n : 64);
		}
		for (long k = temp - 1; k > 0; k--) {   /* freed in random order */
			long j = (long)(rnd(&seed) % (uint64_t)(k + 1));
			char *t = tmp[k];
			tmp[k] = tmp[j];
			tmp[j] = t;
		}
		for (long k = 0; k < temp; k++)
			free(tmp[k]);
		pid_t pid = fork();
		if (pid < 0) {
			perror("forkexec: fork");
			return 1;
		}
		if (pid == 0) {
			if (exec) {
				execl("/bin/true", "true", (char *)NULL);
				_exit(127);
			}
			_exit(0);
		}
		int st;
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "forkexec: child failed\n");
			return 1;
		}
	}
	getrusage(RUSAGE_SELF, &r1);
	for (long i = 0; i < live; i++)
		free(slot[i]);
	free(slot);
	free(tmp);
	printf("forkexec: %ld forks (%s), minor faults per fork %.1f\n", forks, exec ? "exec" : "fork",
	       (double)(r1.ru_minflt - r0.ru_minflt) / (double)forks);
	return 0;
}
