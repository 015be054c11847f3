/*
 * The background thread (issue 11): the API and the option, fork in a
 * threaded program (the child starts its own thread on its first slow path
 * and its decay works), exit from any thread while the thread sleeps, runs
 * passes, serves the export or is being stopped (the process exits at
 * once), and the idle child that test_uslabinfo_idle.sh reads.
 *
 *   test_bgthread                     the tests
 *   test_bgthread idle-child N        make cache "idle_a" with N objects,
 *                                     print "READY pid active_objects", then
 *                                     do nothing until stdin closes
 *   test_bgthread option-child W      (internal) the option path; W: want a thread
 *   test_bgthread exit-child MODE     (internal) exit while the thread runs
 *
 * dlopen/dlclose of libuslab.so is tests/test_bg_dlopen.c.
 */
#include "check.h"
#include "slab.h"
#include "bgthread.h"

#include <dirent.h>
#include <sys/mman.h>

#if UNDER_TSAN
/* TSan kills a child of a multi-threaded fork that starts a thread: ours
 * does, by design. And fork's prepare handler holds every allocator lock
 * at once (two per cache: more than the 64 TSan's deadlock detector can
 * track once the malloc family's classes exist). */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
	return "die_after_fork=0 detect_deadlocks=0";
}
#endif

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* Threads named uslab-bg in this process (from /proc, not the library). */
static int bg_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	CHECK(d != NULL);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[300], comm[32] = "";
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof comm, f) && !strncmp(comm, "uslab-bg", 8))
			n++;
		fclose(f);
	}
	closedir(d);
	return n;
}

/* Wait (bounded) until bg_threads() == want. */
static bool wait_threads(int want, double seconds)
{
	double t0 = check_now();
	while (bg_threads() != want) {
		if (check_now() - t0 > seconds)
			return false;
		sleep_ms(5);
	}
	return true;
}

static bool running(void)
{
	struct bg_stats st;
	bg_get_stats(&st);
	return st.running;
}

static uint64_t dirty_bytes(void)
{
	struct uslab_process_info p;
	memset(&p, 0, sizeof p);
	p.version = 1;
	CHECK(uslab_process_get_info(&p) == 0);
	return p.dirty_bytes;
}

/* A burst of malloc'ed objects, all freed: dirty memory to decay. */
static void burst(size_t bytes, uint64_t seed)
{
	size_t cap = bytes / 16 + 1, n = 0, sum = 0;
	void **v = mmap(NULL, cap * sizeof *v, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(v != MAP_FAILED);
	while (sum < bytes && n < cap) {
		size_t sz = 16 + rnd_next(&seed) % 1009;
		v[n] = uslab_malloc(sz);
		CHECK(v[n] != NULL);
		memset(v[n], 0x33, sz);
		sum += sz;
		n++;
	}
	for (size_t i = 0; i < n; i++)
		uslab_free(v[i]);
	munmap(v, cap * sizeof *v);
}

/* Wait (bounded) until almost nothing is dirty. */
static bool wait_clean(double seconds)
{
	double t0 = check_now();
	while (dirty_bytes() > 512 * 1024) {
		if (check_now() - t0 > seconds)
			return false;
		sleep_ms(10);
	}
	return true;
}

/* Run this program with args in a child (USLAB_OPTIONS += extra); its
 * exit status and how long it took. */
static int run_self(const char *const *args, const char *extra, double *secs)
{
	double t0 = check_now();
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (extra) {
			const char *old = getenv("USLAB_OPTIONS");
			char buf[512];
			snprintf(buf, sizeof buf, "%s%s%s", old ? old : "", old && *old ? " " : "", extra);
			setenv("USLAB_OPTIONS", buf, 1);
		}
		char *argv[8];
		int i = 0;
		argv[i++] = (char *)"test_bgthread";
		for (; args[i - 1] && i < 7; i++)
			argv[i] = (char *)args[i - 1];
		argv[i] = NULL;
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	int st;
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		CHECK(w >= 0);
		if (w == pid)
			break;
		if (check_now() - t0 > 20) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			check_fail(__FILE__, __LINE__, "child", "%s did not exit within 20 s", args[0]);
		}
		sleep_ms(2);
	}
	*secs = check_now() - t0;
	return st;
}

/* The malloc family's classes are made at its first call; do it before any
 * thread does (tests here are not about concurrent first calls). */
static void malloc_init_once(void)
{
	void *x = uslab_malloc(1);
	CHECK(x != NULL);
	uslab_free(x);
}

/* ---- the API -------------------------------------------------------------------- */

static void test_api(void)
{
	errno = 0;
	CHECK(uslab_background_thread(2) == -1 && errno == EINVAL);
	CHECK(uslab_background_thread(-1) == -1 && errno == EINVAL);
	CHECK(!running());
	CHECK(bg_threads() == 0);
	for (int round = 0; round < 3; round++) {
		CHECK(uslab_background_thread(1) == 0);
		CHECK(running());
		CHECK(uslab_background_thread(1) == 0);   /* already: nothing */
		CHECKF(wait_threads(1, 2.0), "%d uslab-bg threads, want 1", bg_threads());
		CHECK(uslab_background_thread(0) == 0);
		CHECK(!running());
		CHECKF(wait_threads(0, 2.0), "%d uslab-bg threads after stop", bg_threads());
		CHECK(uslab_background_thread(0) == 0);   /* not running: nothing */
	}
	/* signals go to the program's threads, never to ours */
	CHECK(uslab_background_thread(1) == 0);
	CHECK(wait_threads(1, 2.0));
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	bool checked = false;
	while ((e = readdir(d))) {
		char path[300], line[256], comm[32] = "";
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		bool ours = fgets(comm, sizeof comm, f) && !strncmp(comm, "uslab-bg", 8);
		fclose(f);
		if (!ours)
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
		f = fopen(path, "r");
		CHECK(f != NULL);
		while (fgets(line, sizeof line, f))
			if (!strncmp(line, "SigBlk:", 7)) {
				unsigned long long blk = strtoull(line + 7, NULL, 16);
				const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD,
						     SIGALRM, SIGPIPE, SIGPROF, SIGWINCH, SIGRTMIN + 1 };
				for (unsigned k = 0; k < sizeof sigs / sizeof sigs[0]; k++)
					CHECKF(blk & (1ULL << (sigs[k] - 1)), "uslab-bg does not block signal %d: %s",
					       sigs[k], line);
				checked = true;
			}
		fclose(f);
	}
	closedir(d);
	CHECK(checked);
	CHECK(uslab_background_thread(0) == 0);
	CHECK(wait_threads(0, 2.0));
}

/* ---- USLAB_OPTIONS ----------------------------------------------------------------- */

static int option_child(bool want)
{
	CHECKF(!running() && bg_threads() == 0, "a thread before the first allocation");
	void *x = uslab_malloc(100);   /* init, then a slow path: the safe point */
	CHECK(x != NULL);
	uslab_free(x);
	if (want) {
		CHECKF(wait_threads(1, 2.0), "background_thread given, %d threads after a slow path", bg_threads());
		CHECK(running());
		CHECK_EQ(page_purge_delay_ms, 150);
	} else {
		sleep_ms(50);
		CHECKF(!running() && bg_threads() == 0, "background_thread=0, yet a thread");
	}
	return 0;
}

static void test_option(void)
{
	static const struct {
		const char *opts;
		const char *want;
	} cases[] = {
		{ "background_thread decay_ms=150", "1" },
		{ "background_thread=1 decay_ms=150", "1" },
		{ "background_thread=0 decay_ms=150", "0" },
		{ "decay_ms=150", "0" },
	};
	for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		double secs;
		const char *args[] = { "option-child", cases[i].want, NULL };
		int st = run_self(args, cases[i].opts, &secs);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "USLAB_OPTIONS='%s': child status 0x%x", cases[i].opts, st);
		printf("    USLAB_OPTIONS='%s': %s thread\n", cases[i].opts, cases[i].want[0] == '1' ? "a" : "no");
	}
}

/* ---- fork in a threaded program ------------------------------------------------------ */

static _Atomic bool workers_stop;
static struct uslab_cache *fork_cache;

static void *fork_worker(void *arg)
{
	uint64_t seed = (uintptr_t)arg;
	void *held[256];
	bool from_cache[256];
	unsigned n = 0;
	while (!atomic_load(&workers_stop)) {
		for (int k = 0; k < 64; k++) {
			bool c = rnd_chance(&seed, 50);
			void *x = c ? uslab_cache_alloc(fork_cache) : uslab_malloc(16 + rnd_next(&seed) % 1000);
			CHECK(x != NULL);
			unsigned j = n;
			if (n == 256) {   /* replace a random one */
				j = (unsigned)(rnd_next(&seed) % n);
				if (from_cache[j])
					uslab_cache_free(fork_cache, held[j]);
				else
					uslab_free(held[j]);
			} else {
				n++;
			}
			held[j] = x;
			from_cache[j] = c;
		}
	}
	for (unsigned i = 0; i < n; i++) {
		if (from_cache[i])
			uslab_cache_free(fork_cache, held[i]);
		else
			uslab_free(held[i]);
	}
	return NULL;
}

static void fork_child_body(int round)
{
	alarm(20);
	/* no thread in the child until its first slow path */
	struct bg_stats st;
	bg_get_stats(&st);
	CHECKF(!st.running && st.pending, "child: running %d pending %d", st.running, st.pending);
	CHECK(bg_threads() == 0);
	burst(SCALE(8, 2) * MiB, 100 + (uint64_t)round);   /* slow paths: the thread starts again */
	CHECKF(wait_threads(1, 2.0), "child: %d uslab-bg threads after its slow paths", bg_threads());
	bg_get_stats(&st);
	CHECK(st.running && !st.pending && st.starts == 1);
	CHECKF(wait_clean(3.0), "child: %llu dirty bytes 3 s after its burst", (unsigned long long)dirty_bytes());
	/* the cache API and the forking thread's parts work */
	void *x = uslab_cache_alloc(fork_cache);
	CHECK(x != NULL);
	uslab_cache_free(fork_cache, x);
	if (round & 1)
		exit(0);   /* destructors: the thread is stopped, within a bound */
	_exit(0);
}

static void test_fork_threaded(void)
{
	page_purge_delay_ms = 100;
	fork_cache = uslab_cache_create("bg_fork", 200, 0, 0, NULL);
	CHECK(fork_cache != NULL);
	CHECK(uslab_background_thread(1) == 0);
	enum { W = 3 };
	pthread_t t[W];
	atomic_store(&workers_stop, false);
	for (int i = 0; i < W; i++)
		CHECK(pthread_create(&t[i], NULL, fork_worker, (void *)(uintptr_t)(i + 1)) == 0);
	for (int round = 0; round < SCALE(6, 3); round++) {
		sleep_ms(30);
		fflush(NULL);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0)
			fork_child_body(round);
		int status;
		double t0 = check_now();
		CHECK(waitpid(pid, &status, 0) == pid);
		CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: status 0x%x", round, status);
		printf("    fork %d: child restarted its thread, decayed, exited in %.2f s\n", round, check_now() - t0);
		CHECK(running());
	}
	atomic_store(&workers_stop, true);
	for (int i = 0; i < W; i++)
		pthread_join(t[i], NULL);
	CHECK(running() && bg_threads() == 1);
	burst(SCALE(8, 2) * MiB, 7);
	CHECKF(wait_clean(3.0), "parent: %llu dirty bytes 3 s after a burst", (unsigned long long)dirty_bytes());
	CHECK(uslab_background_thread(0) == 0);
	CHECK_EQ(cache_active(fork_cache), 0);
	destroy_silently(fork_cache);
}

/* A child that forks while the thread is stopped runs none. */
static void test_fork_stopped(void)
{
	CHECK(uslab_background_thread(1) == 0);
	CHECK(uslab_background_thread(0) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		alarm(10);
		burst(MiB, 9);
		sleep_ms(20);
		CHECK(!running() && bg_threads() == 0);
		_exit(0);
	}
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x", status);
}

/* ---- exit from any thread ---------------------------------------------------------------- */

static _Atomic bool exit_churn_on;

static void *exit_churn(void *arg)
{
	uint64_t seed = 5;
	while (atomic_load(&exit_churn_on)) {
		void *v[64];
		for (int i = 0; i < 64; i++)
			v[i] = uslab_malloc(16 + rnd_next(&seed) % 4000);
		for (int i = 0; i < 64; i++)
			uslab_free(v[i]);
	}
	return arg;
}

/* When exit was called: written to $BG_EXIT_STAMP, which the parent reads
 * after the child is gone. */
static void exit_stamp(void)
{
	const char *path = getenv("BG_EXIT_STAMP");
	if (!path)
		return;
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	fprintf(f, "%.6f\n", check_now());
	fclose(f);
}

static void *exit_now(void *arg)
{
	sleep_ms(30);
	exit_stamp();
	exit((int)(uintptr_t)arg);
}

static void *stop_thread(void *arg)
{
	(void)arg;
	uslab_background_thread(0);
	return NULL;
}

/* MODE: sleeping (no deadline), busy (passes every 10 ms and a thread
 * churning), export (asleep on the export's futex), stopping (another
 * thread stops it meanwhile), main (main returns while the thread runs). */
static int exit_child(const char *mode)
{
	page_purge_delay_ms = !strcmp(mode, "busy") ? 0 : 100;
	CHECK(uslab_background_thread(1) == 0);
	burst(4 * MiB, 11);
	pthread_t t;
	if (!strcmp(mode, "busy")) {
		atomic_store(&exit_churn_on, true);
		CHECK(pthread_create(&t, NULL, exit_churn, NULL) == 0);
	} else if (!strcmp(mode, "stopping")) {
		CHECK(pthread_create(&t, NULL, stop_thread, NULL) == 0);
		pthread_detach(t);
	} else if (!strcmp(mode, "sleeping") || !strcmp(mode, "export")) {
		double t0 = check_now();
		while (!atomic_load(&mem_bg_sleeping) && check_now() - t0 < 3)
			sleep_ms(5);
		CHECK(atomic_load(&mem_bg_sleeping));
	}
	if (!strcmp(mode, "main")) {
		exit_stamp();
		return 7;
	}
	CHECK(pthread_create(&t, NULL, exit_now, (void *)(uintptr_t)7) == 0);
	for (;;)
		pause();
}

static void test_exit_any_thread(void)
{
	static const char *const modes[] = { "sleeping", "busy", "export", "stopping", "main" };
	char stamp[64];
	snprintf(stamp, sizeof stamp, "/tmp/uslab-bg-exit-%d", (int)getpid());
	setenv("BG_EXIT_STAMP", stamp, 1);
	for (unsigned i = 0; i < sizeof modes / sizeof modes[0]; i++) {
		const char *args[] = { "exit-child", modes[i], NULL };
		double secs;
		unlink(stamp);
		int st = run_self(args, !strcmp(modes[i], "export") ? "export" : NULL, &secs);
		double gone = check_now(), called = 0;
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 7, "exit while the thread is %s: status 0x%x", modes[i], st);
		FILE *f = fopen(stamp, "r");
		CHECK(f != NULL && fscanf(f, "%lf", &called) == 1);
		fclose(f);
		printf("    exit(7) while the thread is %-8s: gone %.1f ms after exit() was called\n", modes[i],
		       (gone - called) * 1000);
		/* the bound: the destructor's wait (100 ms) and process teardown, with room for a loaded machine */
		CHECKF(gone - called < 1.0 + (UNDER_SANITIZER ? 2.0 : 0), "exit while %s took %.2f s", modes[i],
		       gone - called);
	}
	unlink(stamp);
	unsetenv("BG_EXIT_STAMP");
}

/* ---- the idle child of test_uslabinfo_idle.sh --------------------------------------------- */

static int idle_child(long n)
{
	struct uslab_cache *c = uslab_cache_create("idle_a", 100, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	void **v = calloc((size_t)n + 1, sizeof *v);
	for (long i = 0; i < n; i++)
		CHECK((v[i] = uslab_cache_alloc(c)) != NULL);
	/* classic mode: only the owner counts its CPU free list as free, so
	 * that the exported count (read by another thread) agrees, give the
	 * CPU slab back first */
	struct uslab_cache_info info;
	cache_info(c, &info);
	if (!info.sheaf_capacity)
		uslab_cache_shrink(c);
	printf("READY %d %llu\n", (int)getpid(), (unsigned long long)cache_active(c));
	fflush(stdout);
	/* idle: no allocation until stdin closes */
	char b;
	while (read(0, &b, 1) > 0)
		;
	for (long i = 0; i < n; i++)
		uslab_cache_free(c, v[i]);
	free(v);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "idle-child"))
		return idle_child(atol(argv[2]));
	if (argc >= 3 && !strcmp(argv[1], "option-child"))
		return option_child(argv[2][0] == '1');
	if (argc >= 3 && !strcmp(argv[1], "exit-child"))
		return exit_child(argv[2]);
	check_init("test_bgthread");
	malloc_init_once();
	RUN(test_api);
	RUN(test_option);
	RUN(test_fork_threaded);
	RUN(test_fork_stopped);
	RUN(test_exit_any_thread);
	return 0;
}
