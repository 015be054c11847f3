/*
 * idle_threads: memory an allocator keeps per thread that has used malloc
 * and then went idle (issue 18, "memory per idle thread").
 *
 *   idle_threads [--threads T] [--objects N] [--rounds R] [--keep K] [--wait-ms MS]
 *
 * A plain malloc/free program (no uslab call): run it under LD_PRELOAD of the
 * malloc to measure (libuslab-malloc.so, with USLAB_OPTIONS picking the
 * mode; libjemalloc.so.2, ...), or without (glibc).
 *
 * 1. The main thread allocates and frees one object of each class below (so
 *    the allocator's global set-up is done, and not charged to the threads),
 *    then reads its RSS: base.
 * 2. It starts T threads (default stack size); each waits on a condition
 *    variable before touching malloc. RSS with T threads alive that have
 *    not allocated yet: spawned (stacks, TLS: what any allocator pays).
 * 3. The threads are released together. Each, R times: allocates N objects
 *    of each of the 12 classes 16, 32, 48, 64, 96, 128, 192, 256, 384, 512,
 *    1024 and 2048 bytes (interleaved: one of each class, N times), writes
 *    every byte of each, then frees them in a random order (a per-thread
 *    seed), except K objects per class of the first round, which it keeps
 *    for good (an idle thread usually still owns something). Its pointer
 *    array is mmap()ed and unmapped before it idles. Then it blocks on a
 *    condition variable: idle, not exited.
 * 4. Once all are idle: RSS at once (done), after --wait-ms (1500 ms, the
 *    allocator's chance to give memory back on its own: decay, background
 *    threads) (idle), and right after the main thread calls the allocator's
 *    own release call (trim): malloc_trim(0) when the malloc in use defines
 *    it (glibc, uslab), else mi_collect(true) (mimalloc),
 *    MallocExtension_ReleaseFreeMemory() (tcmalloc), mallctl
 *    "arena.<all>.purge" (jemalloc); none if there is none. The call runs on
 *    the main thread: what it frees of idle threads' caches is up to the
 *    allocator.
 * 5. The threads are woken, exit and are joined.
 *
 * RSS is /proc/self/statm's resident pages (read with open/read, no malloc).
 * Output (KiB; per_thread = (X - base) / T, alloc_per_thread = (idle -
 * spawned) / T, the allocator's part without stacks):
 *   malloc: <the object malloc came from>; release: <call or none>
 *   RESULT threads=T base_kib=.. spawned_kib=.. done_kib=.. idle_kib=.. trim_kib=..
 *          per_thread_idle_kib=.. per_thread_trim_kib=.. alloc_per_thread_idle_kib=..
 *          alloc_per_thread_trim_kib=.. release=NAME
 * (one line; trim values equal idle ones, release=none, without a call).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define NCLASS 12
static const unsigned class_size[NCLASS] = { 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048 };

static unsigned long nthreads = 16, nobjs = 200, rounds = 2, keep = 2, wait_ms = 1500;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond_main = PTHREAD_COND_INITIALIZER;   /* main waits here */
static pthread_cond_t cond_thr = PTHREAD_COND_INITIALIZER;    /* threads wait here */
static unsigned long nr_waiting, nr_idle;
static int phase;   /* 0: wait before work, 1: work, 2: exit */

static __attribute__((noreturn)) void die(const char *what, int err)
{
	fprintf(stderr, "idle_threads: %s: %s\n", what, strerror(err));
	exit(1);
}

/* Resident KiB from /proc/self/statm (second field, pages). */
static unsigned long rss_kib(void)
{
	char buf[256];
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die("/proc/self/statm", errno);
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		die("read /proc/self/statm", n < 0 ? errno : EIO);
	buf[n] = 0;
	unsigned long size, res;
	if (sscanf(buf, "%lu %lu", &size, &res) != 2)
		die("parse /proc/self/statm", EINVAL);
	return res * (unsigned long)sysconf(_SC_PAGESIZE) / 1024;
}

static void sleep_ms(unsigned long ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void *worker(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg + 1;
	pthread_mutex_lock(&lock);
	nr_waiting++;
	pthread_cond_signal(&cond_main);
	while (phase < 1)
		pthread_cond_wait(&cond_thr, &lock);
	pthread_mutex_unlock(&lock);

	size_t n = (size_t)nobjs * NCLASS;
	size_t bytes = n * (sizeof(void *) + sizeof(uint32_t));
	void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		die("mmap", errno);
	void **p = m;
	uint32_t *order = (uint32_t *)(p + n);
	void *kept[NCLASS * 64];
	unsigned nkept = 0;
	for (unsigned long r = 0; r < rounds; r++) {
		for (size_t i = 0; i < nobjs; i++)
			for (unsigned c = 0; c < NCLASS; c++) {
				void *o = malloc(class_size[c]);
				if (!o)
					die("malloc", ENOMEM);
				memset(o, (int)(i + c), class_size[c]);
				p[i * NCLASS + c] = o;
			}
		for (size_t i = 0; i < n; i++)
			order[i] = (uint32_t)i;
		for (size_t i = n - 1; i > 0; i--) {   /* Fisher-Yates */
			size_t j = (size_t)(rnd(&seed) % (i + 1));
			uint32_t t = order[i];
			order[i] = order[j];
			order[j] = t;
		}
		for (size_t i = 0; i < n; i++) {
			size_t k = order[i];
			if (r == 0 && k / NCLASS < keep)   /* the first K of each class of round 0 */
				kept[nkept++] = p[k];
			else
				free(p[k]);
		}
	}
	munmap(m, bytes);

	pthread_mutex_lock(&lock);
	nr_idle++;
	pthread_cond_signal(&cond_main);
	while (phase < 2)
		pthread_cond_wait(&cond_thr, &lock);
	pthread_mutex_unlock(&lock);
	for (unsigned i = 0; i < nkept; i++)
		free(kept[i]);
	return NULL;
}

/* The allocator's own release call, found by name in the object malloc
 * comes from (dladdr), so that glibc's malloc_trim is not called on behalf
 * of a preloaded malloc that lacks one. */
typedef int (*trim_fn)(size_t);
typedef void (*collect_fn)(bool);
typedef void (*release_fn)(void);
typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

static const char *malloc_object(void)
{
	Dl_info di;
	void *m = dlsym(RTLD_DEFAULT, "malloc");
	if (m && dladdr(m, &di) && di.dli_fname) {
		const char *s = strrchr(di.dli_fname, '/');
		return s ? s + 1 : di.dli_fname;
	}
	return "?";
}

static void *own_symbol(const char *name)
{
	Dl_info a, b;
	void *m = dlsym(RTLD_DEFAULT, "malloc"), *f = dlsym(RTLD_DEFAULT, name);
	if (!m || !f || !dladdr(m, &a) || !dladdr(f, &b))
		return NULL;
	return a.dli_fbase == b.dli_fbase ? f : NULL;
}

static const char *release(bool call)
{
	void *f;
	if ((f = own_symbol("malloc_trim"))) {
		if (call)
			((trim_fn)f)(0);
		return "malloc_trim(0)";
	}
	if ((f = own_symbol("mi_collect"))) {
		if (call)
			((collect_fn)f)(true);
		return "mi_collect(true)";
	}
	if ((f = own_symbol("MallocExtension_ReleaseFreeMemory"))) {
		if (call)
			((release_fn)f)();
		return "MallocExtension_ReleaseFreeMemory()";
	}
	if ((f = own_symbol("mallctl"))) {
		if (call)
			((mallctl_fn)f)("arena.4096.purge", NULL, NULL, NULL, 0);   /* MALLCTL_ARENAS_ALL */
		return "mallctl(arena.4096.purge)";
	}
	return NULL;
}

static unsigned long arg_ulong(const char *what, const char *s, unsigned long lo, unsigned long hi)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "idle_threads: %s must be an integer in %lu..%lu, not '%s'\n", what, lo, hi, s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (i + 1 < argc && !strcmp(a, "--threads"))
			nthreads = arg_ulong(a, argv[++i], 1, 4096);
		else if (i + 1 < argc && !strcmp(a, "--objects"))
			nobjs = arg_ulong(a, argv[++i], 1, 100000);
		else if (i + 1 < argc && !strcmp(a, "--rounds"))
			rounds = arg_ulong(a, argv[++i], 1, 1000);
		else if (i + 1 < argc && !strcmp(a, "--keep"))
			keep = arg_ulong(a, argv[++i], 0, 64);
		else if (i + 1 < argc && !strcmp(a, "--wait-ms"))
			wait_ms = arg_ulong(a, argv[++i], 0, 600000);
		else {
			fprintf(stderr, "usage: idle_threads [--threads T] [--objects N] [--rounds R] [--keep K] "
					"[--wait-ms MS]\n");
			return 2;
		}
	}
	if (keep > nobjs)
		keep = nobjs;
	const char *rel = release(false);
	printf("idle_threads: %lu threads, %d classes 16..2048 B, %lu objects per class x %lu rounds, "
	       "%lu kept per class, wait %lu ms\n",
	       nthreads, NCLASS, nobjs, rounds, keep, wait_ms);
	printf("malloc: %s; release: %s\n", malloc_object(), rel ? rel : "none");
	fflush(stdout);

	for (unsigned c = 0; c < NCLASS; c++) {   /* the allocator's global set-up */
		void *o = malloc(class_size[c]);
		if (!o)
			die("malloc", ENOMEM);
		memset(o, 0, class_size[c]);
		free(o);
	}
	pthread_t *tid = mmap(NULL, nthreads * sizeof *tid, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			      -1, 0);
	if (tid == MAP_FAILED)
		die("mmap", errno);
	sleep_ms(50);
	unsigned long base = rss_kib();

	for (unsigned long i = 0; i < nthreads; i++) {
		int err = pthread_create(&tid[i], NULL, worker, (void *)(uintptr_t)i);
		if (err)
			die("pthread_create", err);
	}
	pthread_mutex_lock(&lock);
	while (nr_waiting < nthreads)
		pthread_cond_wait(&cond_main, &lock);
	pthread_mutex_unlock(&lock);
	unsigned long spawned = rss_kib();

	pthread_mutex_lock(&lock);
	phase = 1;
	pthread_cond_broadcast(&cond_thr);
	while (nr_idle < nthreads)
		pthread_cond_wait(&cond_main, &lock);
	pthread_mutex_unlock(&lock);
	unsigned long done = rss_kib();
	sleep_ms(wait_ms);
	unsigned long idle = rss_kib();
	unsigned long trim = idle;
	if (rel) {
		release(true);
		trim = rss_kib();
	}

	pthread_mutex_lock(&lock);
	phase = 2;
	pthread_cond_broadcast(&cond_thr);
	pthread_mutex_unlock(&lock);
	for (unsigned long i = 0; i < nthreads; i++)
		pthread_join(tid[i], NULL);

	double t = (double)nthreads;
	printf("RESULT threads=%lu base_kib=%lu spawned_kib=%lu done_kib=%lu idle_kib=%lu trim_kib=%lu "
	       "per_thread_idle_kib=%.1f per_thread_trim_kib=%.1f alloc_per_thread_idle_kib=%.1f "
	       "alloc_per_thread_trim_kib=%.1f release=%s\n",
	       nthreads, base, spawned, done, idle, trim, ((double)idle - (double)base) / t,
	       ((double)trim - (double)base) / t, ((double)idle - (double)spawned) / t,
	       ((double)trim - (double)spawned) / t, rel ? rel : "none");
	return 0;
}
