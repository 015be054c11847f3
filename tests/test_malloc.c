/*
 * The malloc family (docs/testing.md rows 1-15, 19, 21, 22, 31-45 in small):
 * linked with libuslab-malloc.a, so malloc, free, ... are uslab's here, and
 * the uslab_* names are checked beside them.
 */
#include "check.h"
#include "os.h"   /* os_clock_hold() */

#include <limits.h>
#include <malloc.h>
#include <stdatomic.h>
#include <sys/mman.h>

/* glibc 2.36 does not declare the C23 sized frees; libuslab-malloc defines them. */
void free_sized(void *p, size_t size);
void free_aligned_sized(void *p, size_t align, size_t size);

static const size_t PG = 4096;

static void *volatile sink;   /* defeats "malloc result unused" optimizations */

/* Row 1: zero sizes give unique, freeable blocks. */
static void test_zero_sizes(void)
{
	void *a = malloc(0), *b = malloc(0), *c = calloc(0, 5), *d = calloc(5, 0), *e = memalign(64, 0);
	void *f = NULL;
	CHECK(posix_memalign(&f, 128, 0) == 0);
	void *g = realloc(NULL, 0);
	CHECK(a && b && c && d && e && f && g);
	CHECK(a != b);
	CHECK(((uintptr_t)e & 63) == 0 && ((uintptr_t)f & 127) == 0);
	void *all[] = { a, b, c, d, e, f, g };
	for (unsigned i = 0; i < 7; i++) {
		CHECK(malloc_usable_size(all[i]) < (1 << 20));
		free(all[i]);
	}
	CHECK(malloc_usable_size(NULL) == 0);
	free(NULL);
	free_sized(NULL, 0);
	CHECK(uslab_malloc_usable_size(NULL) == 0);
}

/* Row 2: realloc(p, 0) frees and returns NULL, as glibc. */
static void test_realloc_zero(void)
{
	void *p = malloc(100);
	CHECK(p);
	CHECK(realloc(p, 0) == NULL);
	void *q = uslab_malloc(5000000);
	CHECK(q);
	CHECK(uslab_realloc(q, 0) == NULL);
}

/* Row 3: impossible sizes on every entry point, after a small malloc/free. */
static void test_too_large(void)
{
	size_t sizes[64];
	unsigned n = 0;
	for (size_t i = 0; i < 16384; i += 1021)
		sizes[n++] = SIZE_MAX - i;
	sizes[n++] = (size_t)PTRDIFF_MAX + 1;
	sizes[n++] = (size_t)PTRDIFF_MAX + 4097;
	for (unsigned k = 1; k < 16; k += 3)
		sizes[n++] = (size_t)k << 50;
	for (unsigned i = 0; i < n; i++) {
		size_t s = sizes[i];
		free(malloc(10));
		CHECK_NULL_ERRNO(malloc(s), ENOMEM);
		CHECK_NULL_ERRNO(calloc(1, s), ENOMEM);
		CHECK_NULL_ERRNO(calloc(s, 1), ENOMEM);
		CHECK_NULL_ERRNO(memalign(64, s), ENOMEM);
		CHECK_NULL_ERRNO(memalign(1 << 22, s), ENOMEM);
		CHECK_NULL_ERRNO(aligned_alloc(4096, s), ENOMEM);
		CHECK_NULL_ERRNO(valloc(s), ENOMEM);
		CHECK_NULL_ERRNO(pvalloc(s), ENOMEM);
		CHECK_NULL_ERRNO(uslab_malloc(s), ENOMEM);
		void *out = (void *)0x1234;
		CHECK(posix_memalign(&out, 256, s) == ENOMEM);
		CHECK(out == (void *)0x1234);
		char *p = malloc(100);
		CHECK(p);
		memset(p, 0x5a, 100);
		CHECK_NULL_ERRNO(realloc(p, s), ENOMEM);
		CHECK_NULL_ERRNO(reallocarray(p, s, 1), ENOMEM);
		for (unsigned j = 0; j < 100; j++)
			CHECK(p[j] == 0x5a);
		free(p);
	}
}

/* Row 4: calloc overflow. */
static void test_calloc_overflow(void)
{
	CHECK_NULL_ERRNO(calloc(SIZE_MAX, SIZE_MAX), ENOMEM);
	CHECK_NULL_ERRNO(calloc((size_t)LONG_MAX + 1, 2), ENOMEM);
	CHECK_NULL_ERRNO(calloc(SIZE_MAX / 2 + 2, 2), ENOMEM);
	CHECK_NULL_ERRNO(uslab_calloc(65537, SIZE_MAX / 65537 + 1), ENOMEM);
}

/* Row 5: calloc zeroes recycled memory (smaller counts than glibc's). */
static void test_calloc_zero(void)
{
	static const size_t sz[] = { 5, 6, 15, 17, 31, 96, 4000, 40000, 300000, 3000000 };
	enum { N = 2000 };
	static unsigned char *p[N];
	uint64_t rs = 5;
	for (unsigned round = 0; round < 3; round++) {
		for (unsigned k = 0; k < sizeof sz / sizeof sz[0]; k++) {
			unsigned cnt = sz[k] > 100000 ? 8 : N;
			for (unsigned i = 0; i < cnt; i++) {
				p[i] = malloc(sz[k]);
				CHECK(p[i]);
				memset(p[i], 0xff, sz[k]);
			}
			for (unsigned i = 0; i < cnt; i++)
				free(p[i]);
			for (unsigned i = 0; i < cnt; i++) {
				p[i] = calloc(1, sz[k]);
				CHECK(p[i]);
				for (size_t j = 0; j < sz[k]; j++)
					CHECKF(p[i][j] == 0, "size %zu byte %zu", sz[k], j);
			}
			for (unsigned i = 0; i < cnt; i++)
				free(p[i]);
		}
		for (unsigned i = 0; i < N; i++) {
			size_t a = 1 + rnd_next(&rs) % 10, b = 1 + rnd_next(&rs) % 100;
			p[i] = calloc(a, b);
			CHECK(p[i]);
			for (size_t j = 0; j < a * b; j++)
				CHECK(p[i][j] == 0);
			memset(p[i], 0xff, a * b);
		}
		for (unsigned i = 0; i < N; i++)
			free(p[i]);
	}
}

static void check_block(void *p, size_t size, size_t align)
{
	CHECKF(p != NULL, "size %zu align %zu", size, align);
	CHECKF(((uintptr_t)p & (align - 1)) == 0, "%p size %zu align %zu", p, size, align);
	CHECKF(malloc_usable_size(p) >= size, "usable %zu < %zu", malloc_usable_size(p), size);
	if (size)
		((volatile char *)p)[size - 1] = 1;
	((volatile char *)p)[0] = 1;
}

/* Row 6: alignment sweep. */
static void test_alignment(void)
{
	for (size_t align = 8; align <= ((size_t)1 << 22); align <<= 1) {
		for (size_t size = 0; size < 70000; size = size < 64 ? size + 1 : size * 5 / 4) {
			void *p = memalign(align, size);
			check_block(p, size, align);
			if (size & 1) {
				void *q = realloc(p, size * 2 + 1);
				CHECK(q);
				p = q;
			}
			if (size % 3 == 0)
				free_aligned_sized(p, align, size);
			else
				free(p);
			void *a = aligned_alloc(align, size);
			check_block(a, size, align);
			free(a);
			void *b = NULL;
			CHECK(posix_memalign(&b, align, size) == 0);
			check_block(b, size, align);
			free(b);
		}
		for (size_t size = 256; size <= 1024; size *= 2) {
			void *p = memalign(size, size);   /* size == alignment */
			check_block(p, size, size);
			free(p);
		}
	}
	/* big alignments */
	for (unsigned sh = 23; sh <= 27; sh++) {
		size_t align = (size_t)1 << sh;
		size_t sizes[] = { 1, 100, 5 << 20, align + 1 };
		for (unsigned i = 0; i < 4; i++) {
			void *p = NULL;
			CHECK(posix_memalign(&p, align, sizes[i]) == 0);
			check_block(p, sizes[i], align);
			free(p);
		}
	}
	/* default alignment: 16 for every size that is a multiple of 16 or above 128 */
	for (size_t size = 1; size < 100000; size += size < 300 ? 1 : 997) {
		void *p = malloc(size);
		check_block(p, size, (size % 16 == 0 || size > 128) ? 16 : 8);
		free(p);
	}
}

/* Row 7: bad alignments. */
static void test_bad_alignment(void)
{
	size_t bad[] = { 0, 3, 0x300, 3 * sizeof(void *), 4 };
	for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		void *p = (void *)0x77;
		CHECK(posix_memalign(&p, bad[i], 64) == EINVAL);
		CHECK(p == (void *)0x77);
	}
	CHECK_NULL_ERRNO(memalign((size_t)-1, PG), EINVAL);
	CHECK_NULL_ERRNO(aligned_alloc(0, 64), EINVAL);
	CHECK_NULL_ERRNO(aligned_alloc(65, 64), EINVAL);
	CHECK_NULL_ERRNO(aligned_alloc(SIZE_MAX / 2 + 2, 64), EINVAL);
	CHECK_NULL_ERRNO(aligned_alloc(SIZE_MAX / 2 + 1, 64), ENOMEM);   /* a power of two: too big, as glibc */
	void *p = memalign(24, 100);   /* rounded up to 32 */
	check_block(p, 100, 32);
	free(p);
}

/* Row 8: realloc across classes and tiers keeps the prefix; in place when it fits. */
static void test_realloc_sweep(void)
{
	size_t size = 1;
	unsigned char *p = malloc(size);
	CHECK(p);
	p[0] = 0;
	while (size < (24UL << 20)) {
		size_t nsize = size + size / 3 + 1;
		unsigned char *q = realloc(p, nsize);
		CHECK(q);
		for (size_t j = 0; j < size; j += 1 + j / 64)
			CHECKF(q[j] == (unsigned char)(j * 7), "grow to %zu: byte %zu", nsize, j);
		for (size_t j = size; j < nsize; j++)
			q[j] = (unsigned char)(j * 7);
		p = q;
		size = nsize;
	}
	while (size > 1) {
		size_t nsize = size / 3;
		size_t usable = malloc_usable_size(p);
		CHECK(usable >= size);
		unsigned char *q = realloc(p, nsize ? nsize : 1);
		CHECK(q == p);   /* shrinking always fits */
		for (size_t j = 0; j < nsize; j += 1 + j / 64)
			CHECKF(q[j] == (unsigned char)(j * 7), "shrink to %zu: byte %zu", nsize, j);
		size = nsize ? nsize : 1;
		if (size == 1)
			break;
	}
	/* grow within the usable size: same pointer */
	for (size_t s = 1; s < (3UL << 20); s = s * 3 + 1) {
		void *a = malloc(s);
		size_t u = malloc_usable_size(a);
		CHECK(realloc(a, u) == a);
		free(a);
	}
	free(p);
}

/* Row 9: reallocarray overflow leaves the block. */
static void test_reallocarray(void)
{
	char *p = malloc(10);
	strcpy(p, "abcdefghi");
	CHECK_NULL_ERRNO(reallocarray(p, SIZE_MAX, 2), ENOMEM);
	CHECK_NULL_ERRNO(reallocarray(p, 2, SIZE_MAX), ENOMEM);
	CHECK_NULL_ERRNO(reallocarray(p, 65537, SIZE_MAX / 65537 + 1), ENOMEM);
	CHECK_NULL_ERRNO(reallocarray(p, SIZE_MAX / 65537 + 1, 65537), ENOMEM);
	CHECK(strcmp(p, "abcdefghi") == 0);
	p = reallocarray(p, 100, 100);
	CHECK(p && strcmp(p, "abcdefghi") == 0);
	free(p);
}

/* Row 10: usable size >= request, all of it writable. */
static void test_usable(void)
{
	for (size_t s = 0; s < (6UL << 20); s = s < 4096 ? s + 7 : s * 2 + 4095) {
		char *p = malloc(s);
		size_t u = malloc_usable_size(p);
		CHECK(u >= s);
		CHECK(u == uslab_malloc_usable_size(p));
		memset(p, 0xa5, u);
		free(p);
	}
}

/* Row 11: valloc/pvalloc. */
static void test_valloc(void)
{
	for (size_t s = 0; s < 100000; s = s * 3 + 1) {
		void *p = valloc(s);
		check_block(p, s, PG);
		free(p);
		p = pvalloc(s);
		check_block(p, s, PG);
		CHECK(malloc_usable_size(p) >= ((s + PG - 1) & ~(PG - 1)));
		free(p);
	}
	CHECK_NULL_ERRNO(pvalloc(SIZE_MAX - PG + 2), ENOMEM);
	CHECK_NULL_ERRNO(pvalloc((size_t)-PG), ENOMEM);
}

/* Row 12: free never changes errno. */
static void test_free_errno(void)
{
	size_t sizes[] = { 8, 100, 5000, 40000, 1 << 20, 3 << 20, 40 << 20 };
	for (unsigned i = 0; i < 7; i++) {
		void *p = malloc(sizes[i]);
		CHECK(p);
		errno = 1789;
		free(p);
		CHECK(errno == 1789);
		p = malloc(sizes[i]);
		errno = 1789;
		free_sized(p, sizes[i]);
		CHECK(errno == 1789);
	}
	errno = 1789;
	free(NULL);
	CHECK(errno == 1789);
	/* a huge free that lands in a full cache and unmaps */
	void *big[40];
	for (unsigned i = 0; i < 40; i++)
		big[i] = malloc((3 + i % 5) << 20);
	for (unsigned i = 0; i < 40; i++) {
		errno = 1789;
		free(big[i]);
		CHECK(errno == 1789);
	}
}

/* Rows 13, 15: sized frees, mallinfo2, malloc_trim, malloc_stats, mallopt. */
static void test_info_trim(void)
{
	CHECK(mallopt(M_ARENA_MAX, 1) == 1);   /* accepted and ignored (test_glibc_compat has the table) */
	malloc_trim(0);
	size_t rss0 = test_rss();
	enum { N = 200000 };
	void **v = malloc(N * sizeof *v);
	CHECK(v);
	for (unsigned i = 0; i < N; i++) {
		v[i] = malloc(64 + (i % 8) * 40);
		memset(v[i], 1, 64);
	}
	struct mallinfo2 mi = mallinfo2();
	CHECKF(mi.uordblks >= (size_t)N * 64, "uordblks %zu", mi.uordblks);
	CHECK(mi.arena >= mi.uordblks);
	void *h = malloc(10 << 20);
	memset(h, 1, 10 << 20);
	mi = mallinfo2();
	CHECK(mi.hblks >= 1 && mi.hblkhd >= (10 << 20));
	free(h);
	size_t rss1 = test_rss();
	for (unsigned i = 0; i < N; i++)
		free_sized(v[i], 64 + (i % 8) * 40);
	free(v);
	CHECK(malloc_trim(0) == 1);
	size_t rss2 = test_rss();
	mi = mallinfo2();
	CHECKF(mi.uordblks < 4 * MiB, "uordblks %zu after freeing all", mi.uordblks);
	printf("    rss: before %zu KiB, full %zu KiB, after trim %zu KiB\n", rss0 >> 10, rss1 >> 10, rss2 >> 10);
	if (!UNDER_SANITIZER)
		CHECKF(rss2 < rss0 + (rss1 - rss0) / 4, "trim left %zu KiB", rss2 >> 10);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
	CHECK(old.arena >= 0);
	struct uslab_malloc_info ui = { .version = USLAB_MALLOC_INFO_VERSION };
	CHECK(uslab_malloc_get_info(&ui) == 0);
	struct stderr_capture cap;
	char buf[2048];
	stderr_capture_begin(&cap);
	malloc_stats();
	stderr_capture_end(&cap, buf, sizeof buf);
	CHECK(strstr(buf, "system bytes") && strstr(buf, "in use bytes"));
}

/* Huge blocks: a freed mapping is reused (no new fault-in), then decays.
 * The policy clock (os.h) is held: a freed range decays after decay_ms
 * (1 s), and a machine that descheduled us that long between a free and
 * the next malloc would see a fresh mapping where the test expects reuse. */
static void test_huge_reuse(void)
{
	os_clock_hold(true);
	void *a = malloc(20 << 20);
	memset(a, 1, 20 << 20);
	free(a);
	void *b = malloc(6 << 20);   /* best fit inside the freed range */
	CHECK(b == a);
	void *c = malloc(8 << 20);   /* the rest of it */
	CHECK((char *)c == (char *)a + (8 << 20));
	free(b);
	free(c);
	void *d = malloc(18 << 20);   /* coalesced again */
	CHECK(d == a);
	free(d);
	/* grow in place into the cached neighbour */
	char *e = malloc(5 << 20);
	CHECK(e == a);
	e[0] = 42;
	char *f = realloc(e, 15 << 20);
	CHECK(f == e && f[0] == 42);
	free(f);
	CHECK(malloc_trim(0) == 1);
	os_clock_hold(false);
}

/* ---- threads, thread exit, fork ------------------------------------------ */

#define XFER 4096
static void *_Atomic slots[XFER];

static void *cross_worker(void *arg)
{
	uint64_t rs = (uintptr_t)arg;
	for (unsigned it = 0; it < SCALE(200000, 30000); it++) {
		unsigned i = (unsigned)(rnd_next(&rs) % XFER);
		size_t sz = 1 + rnd_next(&rs) % (rnd_chance(&rs, 2) ? 300000 : 2000);
		unsigned char *p = malloc(sz);
		CHECK(p);
		p[0] = 0;
		if (sz >= 24) {   /* cookie: marker, size, last byte */
			p[0] = 0xa5;
			memcpy(p + 8, &sz, sizeof sz);
			p[sz - 1] = (unsigned char)sz;
		}
		unsigned char *old = atomic_exchange(&slots[i], (void *)p);
		if (old) {
			size_t osz;
			if (old[0] == 0xa5) {
				memcpy(&osz, old + 8, sizeof osz);
				CHECKF(malloc_usable_size(old) >= osz && old[osz - 1] == (unsigned char)osz,
				       "cookie of a %zu-byte block", osz);
			}
			free(old);
		}
	}
	return NULL;
}

/* Rows 31-32 in small: threads free what others allocated. */
static void test_cross_threads(void)
{
	pthread_t t[4];
	for (uintptr_t i = 0; i < 4; i++)
		CHECK(pthread_create(&t[i], NULL, cross_worker, (void *)(i + 1)) == 0);
	for (unsigned i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	for (unsigned i = 0; i < XFER; i++)
		free(atomic_exchange(&slots[i], NULL));
}

static void *exit_worker(void *arg)
{
	void **keep = arg;
	for (unsigned i = 0; i < 1000; i++)
		free(malloc(64 + i % 512));
	*keep = malloc(100);
	return NULL;
}

/* Rows 34, 36 in small: memory cached by exiting threads comes back. */
static void test_thread_exit(void)
{
	malloc_trim(0);
	struct mallinfo2 m0 = mallinfo2();
	for (unsigned r = 0; r < SCALE(2000, 300); r++) {
		void *keep = NULL;
		pthread_t t;
		CHECK(pthread_create(&t, NULL, exit_worker, &keep) == 0);
		pthread_join(t, NULL);
		free(keep);
	}
	malloc_trim(0);
	struct mallinfo2 m1 = mallinfo2();
	CHECKF(m1.arena <= m0.arena + 8 * MiB, "arena %zu -> %zu", m0.arena, m1.arena);
}

static _Atomic bool fork_stop;

static void *fork_churn(void *arg)
{
	uint64_t rs = (uintptr_t)arg;
	void *v[64] = { 0 };
	while (!atomic_load(&fork_stop)) {
		unsigned i = (unsigned)(rnd_next(&rs) % 64);
		free(v[i]);
		v[i] = malloc(1 + rnd_next(&rs) % 70000);
	}
	for (unsigned i = 0; i < 64; i++)
		free(v[i]);
	return NULL;
}

/* Rows 39, 41 in small: fork while other threads allocate; the child
 * allocates every class, frees the parent's blocks, forks again. */
static void test_fork_threads(void)
{
	pthread_t t[3];
	atomic_store(&fork_stop, false);
	for (uintptr_t i = 0; i < 3; i++)
		CHECK(pthread_create(&t[i], NULL, fork_churn, (void *)(i + 7)) == 0);
	void *parent = malloc(1000);
	void *parent_big = malloc(5 << 20);
	for (unsigned r = 0; r < SCALE(100, 20); r++) {
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			alarm(20);
			free(parent);
			free(parent_big);
			for (size_t s = 1; s < (4 << 20); s = s * 5 / 4 + 1)
				free(malloc(s));
			pid_t p2 = fork();
			if (p2 == 0) {
				free(malloc(12345));
				_exit(17);
			}
			int st;
			waitpid(p2, &st, 0);
			_exit(WIFEXITED(st) && WEXITSTATUS(st) == 17 ? 17 : 1);
		}
		int st;
		CHECK(waitpid(pid, &st, 0) == pid);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 17, "child status 0x%x", st);
	}
	atomic_store(&fork_stop, true);
	for (unsigned i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	free(parent);
	free(parent_big);
}

/* ---- misuse (rows 19, 21, 22) ----------------------------------------------- */

static int global_var[16];

static void die_free_stack(void *arg) { int x[4]; sink = x; free(sink); }
static void die_free_global(void *arg) { free(&global_var[2]); }
static void die_free_interior(void *arg) { char *p = malloc((size_t)arg); free(p + 16); }
static void die_double_free(void *arg)
{
	void *p = malloc((size_t)arg);
	free(p);
	free(p);
}
/* glibc's tcache pattern (tst-tcfree): free(a); free(b); free(a), with a
 * and b from another thread that has exited (issue 12) */
static void *aba_blocks[2];
static void *aba_thread(void *arg)
{
	aba_blocks[0] = malloc(200);
	aba_blocks[1] = malloc(200);
	return NULL;
}
static void die_aba(void *arg)
{
	pthread_t t;
	CHECK(pthread_create(&t, NULL, aba_thread, NULL) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	free(aba_blocks[0]);
	free(aba_blocks[1]);
	free(aba_blocks[0]);
	void *x = malloc(200), *y = malloc(200), *z = malloc(200);
	fprintf(stderr, "not caught: %p %p %p\n", x, y, z);
}
static void die_realloc_bad(void *arg) { int x[4]; sink = x; sink = realloc(sink, 100); }
static void die_usable_bad(void *arg) { sink = (void *)malloc_usable_size(&global_var[1]); }
static void die_free_mmap(void *arg)
{
	void *p = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	free(p);
}

static void test_misuse(void)
{
	CHECK_DEATH("free of a stack address", die_free_stack, NULL, "uslab: fatal:", "invalid free");
	CHECK_DEATH("free of a global", die_free_global, NULL, "uslab: fatal:", "invalid free");
	CHECK_DEATH("free of user mmap", die_free_mmap, NULL, "uslab: fatal:", "invalid free");
	size_t sizes[] = { 48, 3000, 100000, 1 << 20, 8 << 20 };
	for (unsigned i = 0; i < 5; i++) {
		CHECK_DEATH("interior free", die_free_interior, (void *)sizes[i], "uslab: fatal:", "invalid free");
		CHECK_DEATH("double free", die_double_free, (void *)sizes[i], "uslab: fatal:", "double free");
	}
	const char *o = getenv("USLAB_OPTIONS");
	if (!o || !strstr(o, "slub_sheaf_capacity=0"))   /* classic mode sees list heads only (README) */
		CHECK_DEATH("free(a); free(b); free(a) of 200 B", die_aba, NULL, "uslab: fatal:", "double free", "kmalloc-");
	CHECK_DEATH("realloc of a stack address", die_realloc_bad, NULL, "uslab: fatal: invalid realloc");
	CHECK_DEATH("usable_size of a global", die_usable_bad, NULL, "uslab: fatal: invalid malloc_usable_size");
}

int main(void)
{
	check_init("test_malloc");
	RUN(test_zero_sizes);
	RUN(test_realloc_zero);
	RUN(test_too_large);
	RUN(test_calloc_overflow);
	RUN(test_calloc_zero);
	RUN(test_alignment);
	RUN(test_bad_alignment);
	RUN(test_realloc_sweep);
	RUN(test_reallocarray);
	RUN(test_usable);
	RUN(test_valloc);
	RUN(test_free_errno);
	RUN(test_info_trim);
	RUN(test_huge_reuse);
	RUN(test_misuse);
	RUN(test_cross_threads);
	RUN(test_thread_exit);
	RUN(test_fork_threads);
	return 0;
}
