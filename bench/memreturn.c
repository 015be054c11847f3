/*
 * memreturn: does memory go back to the OS after a burst, while the
 * process idles? (issue 11). A plain malloc/free program (no uslab call):
 * run it under LD_PRELOAD of each allocator; bench/memreturn.sh does.
 *
 *   memreturn burst   [--mib N] [--idle S] [--seed N]
 *   memreturn blocked [--mib N] [--idle S] [--threads N] [--seed N]
 *
 * burst: two threads allocate about N MiB (default 512) of objects of
 *   16..1024 B (uniform), writing every byte; then each frees half of its
 *   own objects and half of the other's (handed over: remote frees), and
 *   both block on a condition variable (a server's workers waiting for
 *   the next request). The process then idles S s (default 6) with one
 *   malloc(64)/free from the main thread in the middle.
 * blocked: T threads (default 64) each allocate N/T MiB the same way,
 *   free all of it, and block on a condition variable while the main
 *   thread measures S s of idleness.
 *
 * RSS comes from /proc/self/statm, read by the program itself (a sampler
 * thread every 100 ms for the timeline, and the main thread at the
 * points). Pointer arrays are mmap'ed and unmapped before the idle phase,
 * so only the allocator's memory is measured. Output, one record a line:
 *
 *   scenario burst mib 512 idle 6 threads 2
 *   point start|allocated|freed|idle1|idle3|idle6|trim|peak SECONDS RSS_KIB
 *               (idleX: X s after the frees; 1/6, 1/2 and all of S)
 *   trim none            (no malloc_trim of the allocator under test)
 *   sample SECONDS RSS_KIB
 *
 * malloc_trim(0) is looked up with dlsym and called only if the object
 * that provides it is the one that provides malloc (glibc's own, or a
 * peer's that exports it): glibc's trim under another malloc would trim
 * nothing of that allocator's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double t0;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* Resident KiB, without allocating. */
static long rss_kib(void)
{
	char buf[128];
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *p = strchr(buf, ' ');
	return p ? strtol(p + 1, NULL, 10) * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void *map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("memreturn: mmap");
		exit(1);
	}
	return p;
}

/* ---- the timeline ---------------------------------------------------------------- */

#define MAX_SAMPLES 4096
static struct {
	double t;
	long kib;
} samples[MAX_SAMPLES];
static _Atomic unsigned nsamples;
static _Atomic bool sampling = true;
static _Atomic long peak_kib;

static void *sampler(void *arg)
{
	while (atomic_load(&sampling)) {
		long k = rss_kib();
		unsigned i = atomic_load(&nsamples);
		if (i < MAX_SAMPLES) {
			samples[i].t = now() - t0;
			samples[i].kib = k;
			atomic_store(&nsamples, i + 1);
		}
		if (k > atomic_load(&peak_kib))
			atomic_store(&peak_kib, k);
		sleep_s(0.1);
	}
	return arg;
}

static void point(const char *name)
{
	long k = rss_kib();
	if (k > atomic_load(&peak_kib))
		atomic_store(&peak_kib, k);
	printf("point %s %.3f %ld\n", name, now() - t0, k);
	fflush(stdout);
}

/* ---- workers ------------------------------------------------------------------------ */

struct worker {
	pthread_t t;
	uint64_t seed;
	size_t bytes;       /* to allocate */
	void **objs;        /* mmap'ed */
	size_t n, cap;
	struct worker *other;   /* burst: whose second half this one frees */
};

static pthread_barrier_t start_bar, alloc_bar, free_bar;
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static int scenario_burst;

static void allocate(struct worker *w)
{
	w->cap = w->bytes / 16 + 16;
	w->objs = map(w->cap * sizeof(void *));
	size_t sum = 0;
	while (sum < w->bytes && w->n < w->cap) {
		size_t sz = 16 + (size_t)(rnd(&w->seed) % 1009);
		void *p = malloc(sz);
		if (!p) {
			fprintf(stderr, "memreturn: out of memory after %zu bytes\n", sum);
			exit(1);
		}
		memset(p, (int)(w->n & 0xff), sz);
		w->objs[w->n++] = p;
		sum += sz;
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	pthread_barrier_wait(&start_bar);
	allocate(w);
	pthread_barrier_wait(&alloc_bar);   /* main measures the peak */
	if (scenario_burst) {
		/* even indices of ours, odd indices of the other's */
		for (size_t i = 0; i < w->n; i += 2)
			free(w->objs[i]);
		for (size_t i = 1; i < w->other->n; i += 2)
			free(w->other->objs[i]);
	} else {
		for (size_t i = 0; i < w->n; i++)
			free(w->objs[i]);
	}
	pthread_barrier_wait(&free_bar);
	/* idle until the main thread is done measuring */
	pthread_mutex_lock(&gate_lock);
	while (!gate_open)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
	return NULL;
}

/* ---- malloc_trim of the allocator under test ------------------------------------------ */

typedef int (*trim_fn)(size_t);

static trim_fn find_trim(void)
{
	trim_fn t = (trim_fn)dlsym(RTLD_DEFAULT, "malloc_trim");
	void *m = dlsym(RTLD_DEFAULT, "malloc");
	Dl_info a, b;
	if (!t || !m || !dladdr((void *)t, &a) || !dladdr(m, &b) || a.dli_fbase != b.dli_fbase)
		return NULL;
	return t;
}

int main(int argc, char **argv)
{
	double mib = 512, idle = 6;
	int threads = -1;
	uint64_t seed = 42;
	if (argc < 2 || (strcmp(argv[1], "burst") && strcmp(argv[1], "blocked"))) {
		fprintf(stderr, "usage: memreturn burst|blocked [--mib N] [--idle S] [--threads N] [--seed N]\n");
		return 2;
	}
	scenario_burst = !strcmp(argv[1], "burst");
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--mib"))
			mib = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--idle"))
			idle = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--threads"))
			threads = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 10);
		else {
			fprintf(stderr, "memreturn: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (threads < 1)
		threads = scenario_burst ? 2 : 64;
	if (scenario_burst)
		threads = 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	t0 = now();
	printf("scenario %s mib %g idle %g threads %d\n", argv[1], mib, idle, threads);
	pthread_t st;
	pthread_create(&st, NULL, sampler, NULL);
	point("start");

	struct worker *w = map((size_t)threads * sizeof *w);
	pthread_barrier_init(&start_bar, NULL, (unsigned)threads + 1);
	pthread_barrier_init(&alloc_bar, NULL, (unsigned)threads + 1);
	pthread_barrier_init(&free_bar, NULL, (unsigned)threads + 1);
	for (int i = 0; i < threads; i++) {
		w[i].seed = seed + (uint64_t)i * 7919;
		w[i].bytes = (size_t)(mib * 1048576.0 / threads);
		w[i].other = &w[(i + 1) % threads];
		pthread_create(&w[i].t, NULL, worker_main, &w[i]);
	}
	pthread_barrier_wait(&start_bar);
	pthread_barrier_wait(&alloc_bar);
	point("allocated");
	pthread_barrier_wait(&free_bar);
	for (int i = 0; i < threads; i++)
		munmap(w[i].objs, w[i].cap * sizeof(void *));
	point("freed");
	double t_free = now();

	/* idle; one malloc(64)/free in the middle (burst) */
	bool poked = !scenario_burst;
	static const double marks[] = { 1, 3, 6 };
	for (unsigned k = 0; k < 3; k++) {
		double at = marks[k] * idle / 6;
		if (!poked && at >= idle / 2) {
			sleep_s(t_free + idle / 2 - now());
			void *volatile p = malloc(64);
			memset(p, 1, 64);
			free(p);
			poked = true;
		}
		double wait = t_free + at - now();
		if (wait > 0)
			sleep_s(wait);
		char name[32];
		snprintf(name, sizeof name, "idle%.3g", at);
		point(name);
	}
	trim_fn trim = find_trim();
	if (trim) {
		trim(0);
		point("trim");
	} else {
		printf("trim none\n");
	}
	sleep_s(0.25);
	atomic_store(&sampling, false);
	pthread_join(st, NULL);
	printf("point peak %.3f %ld\n", 0.0, atomic_load(&peak_kib));

	pthread_mutex_lock(&gate_lock);
	gate_open = true;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
	for (int i = 0; i < threads; i++)
		pthread_join(w[i].t, NULL);
	unsigned n = atomic_load(&nsamples);
	for (unsigned i = 0; i < n; i++)
		printf("sample %.3f %ld\n", samples[i].t, samples[i].kib);
	return 0;
}
