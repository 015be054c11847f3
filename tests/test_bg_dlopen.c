/*
 * libuslab.so dlopen'ed, its background thread started through the API,
 * then dlclose'd while the thread runs (issue 11; docs/testing.md row 54).
 * The library is linked with -z nodelete, so dlclose leaves it mapped: the
 * thread goes on running its code (blocks freed after the dlclose, through
 * the function pointers nodelete keeps valid, give it a pass to run, seen
 * in its context switches), threads that used the
 * library exit after the dlclose (their key destructor is the library's
 * code), a second dlopen finds the same library, and
 * uslab_background_thread(0) stops the thread.
 *
 * No verdict depends on how fast the machine runs: what the thread must
 * eventually do is polled up to CHECK_HANG_S (only a hang fails) and its
 * time printed; the user threads say when they have used the library.
 *
 *   test_bg_dlopen /path/to/libuslab.so
 *
 * Plain C with libdl: nothing of uslab is linked in.
 */
#include "check.h"

#include <dirent.h>
#include <dlfcn.h>
#include <link.h>

static struct {
	int (*background_thread)(int);
	void *(*malloc)(size_t);
	void (*free)(void *);
	struct uslab_cache *(*cache_create)(const char *, size_t, size_t, unsigned long, void (*)(void *));
	void *(*cache_alloc)(struct uslab_cache *);
	void (*cache_free)(struct uslab_cache *, void *);
	int (*process_get_info)(struct uslab_process_info *);
} u;

static void *sym(void *h, const char *name)
{
	void *p = dlsym(h, name);
	CHECKF(p != NULL, "dlsym %s: %s", name, dlerror());
	return p;
}

static void load(void *h)
{
	u.background_thread = (int (*)(int))sym(h, "uslab_background_thread");
	u.malloc = (void *(*)(size_t))sym(h, "uslab_malloc");
	u.free = (void (*)(void *))sym(h, "uslab_free");
	u.cache_create = (struct uslab_cache * (*)(const char *, size_t, size_t, unsigned long, void (*)(void *)))
		sym(h, "uslab_cache_create");
	u.cache_alloc = (void *(*)(struct uslab_cache *))sym(h, "uslab_cache_alloc");
	u.cache_free = (void (*)(struct uslab_cache *, void *))sym(h, "uslab_cache_free");
	u.process_get_info = (int (*)(struct uslab_process_info *))sym(h, "uslab_process_get_info");
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* The tid of the thread named uslab-bg, or 0. */
static int bg_tid(void)
{
	DIR *d = opendir("/proc/self/task");
	CHECK(d != NULL);
	int tid = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		char path[300], comm[32] = "";
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof comm, f) && !strncmp(comm, "uslab-bg", 8))
			tid = atoi(e->d_name);
		fclose(f);
	}
	closedir(d);
	return tid;
}

static long ctx_switches(int tid)
{
	char path[64], line[128];
	snprintf(path, sizeof path, "/proc/self/task/%d/status", tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long v = -1;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "voluntary_ctxt_switches:", 24))
			v = atol(line + 24);
	fclose(f);
	return v;
}

static uint64_t dirty_bytes(void)
{
	struct uslab_process_info pi;
	memset(&pi, 0, sizeof pi);
	pi.version = 1;
	CHECK(u.process_get_info(&pi) == 0);
	return pi.dirty_bytes;
}

/* Wait (polled, bounded by CHECK_HANG_S) until the uslab-bg thread exists
 * (want) or is gone (!want); its tid, or 0. */
static int wait_bg(bool want)
{
	double t0 = check_now();
	int tid;
	while (!(tid = bg_tid()) == want && check_now() - t0 < CHECK_HANG_S)
		sleep_ms(5);
	return tid;
}

/* A thread that uses the library, says so, then waits; it exits after
 * dlclose. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate, used;

static void *user_thread(void *arg)
{
	void *v[500];
	for (int i = 0; i < 500; i++)
		CHECK((v[i] = u.malloc(16 + (size_t)i)) != NULL);
	for (int i = 0; i < 500; i += 2)
		u.free(v[i]);
	pthread_mutex_lock(&gate_lock);
	used++;
	pthread_cond_broadcast(&gate_cond);
	while (!gate)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
	for (int i = 1; i < 500; i += 2)
		u.free(v[i]);   /* the function pointers stay valid: nodelete */
	return arg;         /* then the key destructor: library code */
}

int main(int argc, char **argv)
{
	check_init("test_bg_dlopen");
	CHECKF(argc == 2, "usage: test_bg_dlopen /path/to/libuslab.so");
	/* passes every 50 ms while anything is pending (ignored, with a
	 * warning, by a library without the option: then every second) */
	const char *old = getenv("USLAB_OPTIONS");
	char opts[512];
	snprintf(opts, sizeof opts, "%s%sdecay_ms=50", old ? old : "", old && *old ? " " : "");
	setenv("USLAB_OPTIONS", opts, 1);

	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	CHECKF(h != NULL, "dlopen %s: %s", argv[1], dlerror());
	load(h);
	CHECK(bg_tid() == 0);
	CHECK(u.background_thread(1) == 0);
	int tid = wait_bg(true);
	CHECKF(tid, "no uslab-bg thread %.0f s after uslab_background_thread(1)", CHECK_HANG_S);
	printf("  dlopen'ed %s, thread %d started\n", argv[1], tid);

	/* the library in use: a cache, malloc, a thread that keeps objects */
	struct uslab_cache *c = u.cache_create("dl_cache", 128, 0, 0, NULL);
	CHECK(c != NULL);
	void *objs[4000];
	for (int i = 0; i < 4000; i++)
		CHECK((objs[i] = u.cache_alloc(c)) != NULL);
	for (int i = 0; i < 4000; i++)
		u.cache_free(c, objs[i]);
	void *big[8];
	for (int i = 0; i < 8; i++) {
		CHECK((big[i] = u.malloc(512 * 1024)) != NULL);
		memset(big[i], 1, 512 * 1024);
	}
	for (int i = 0; i < 4; i++)
		u.free(big[i]);   /* dirty pages: the thread has passes to run */
	pthread_t ut[3];
	for (int i = 0; i < 3; i++)
		CHECK(pthread_create(&ut[i], NULL, user_thread, NULL) == 0);
	pthread_mutex_lock(&gate_lock);
	while (used < 3)   /* each has used the library */
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);

	void *fn_before = (void *)u.background_thread;
	long cs0 = ctx_switches(tid);
	CHECK(dlclose(h) == 0);
	printf("  dlclose'd while the thread runs (%ld context switches so far)\n", cs0);
	/* 2 MiB of blocks freed now (nodelete keeps the pointers valid): the
	 * thread has a pass to run, woken or already due; the program goes on
	 * with its own malloc meanwhile. Whether the thread had finished its
	 * earlier passes before the dlclose does not matter, nor how late a
	 * loaded machine runs it: only a hang fails. */
	for (int i = 4; i < 8; i++)
		u.free(big[i]);
	double t0 = check_now();
	long cs1 = cs0;
	uint64_t dirty;
	for (int i = 0;; i++) {
		void *p = malloc(1000 + (size_t)(i % 30) * 100);
		CHECK(p != NULL);
		memset(p, 2, 1000);
		free(p);
		cs1 = ctx_switches(tid);
		dirty = dirty_bytes();
		if (cs1 != cs0 || check_now() - t0 > CHECK_HANG_S)
			break;
		sleep_ms(10);
	}
	printf("  %.2f s later: thread %d alive, %ld context switches, %.2f MiB dirty\n", check_now() - t0, tid, cs1,
	       (double)dirty / MiB);
	CHECKF(cs1 >= 0, "the thread is gone after dlclose");
	CHECKF(cs1 > cs0, "the thread did not run after dlclose (%ld -> %ld context switches in %.0f s)", cs0, cs1,
	       CHECK_HANG_S);
	/* threads that used the library exit now: their exit handlers run */
	pthread_mutex_lock(&gate_lock);
	gate = 1;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
	for (int i = 0; i < 3; i++)
		CHECK(pthread_join(ut[i], NULL) == 0);
	printf("  3 threads that used the library exited after dlclose\n");

	/* dlopen again: the same library (nodelete kept it), the same thread */
	h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	CHECKF(h != NULL, "second dlopen: %s", dlerror());
	load(h);
	CHECKF((void *)u.background_thread == fn_before, "a second copy of the library was loaded");
	CHECK(bg_tid() == tid);
	CHECK(u.background_thread(0) == 0);
	CHECKF(wait_bg(false) == 0, "the thread did not stop in %.0f s", CHECK_HANG_S);
	struct uslab_process_info pi;
	memset(&pi, 0, sizeof pi);
	pi.version = 1;
	CHECK(u.process_get_info(&pi) == 0);
	printf("  stopped; %.2f MiB mapped, %.2f MiB dirty\n", (double)pi.mapped_bytes / MiB,
	       (double)pi.dirty_bytes / MiB);
	CHECK(dlclose(h) == 0);
	return 0;
}
