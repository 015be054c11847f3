/*
 * Many caches: NCACHES caches of various sizes, alignments and constructors
 * live at once, used, destroyed; then the same again with two long-lived
 * threads, so that cache ids (internal slots) are recycled while a thread
 * still holds per-thread state for the old cache in the same slot: the
 * thread must get objects of the new cache, never a stale slab of the old
 * one. Finally both threads create, use and destroy caches concurrently.
 */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>

#define NCACHES SCALE(1000, 500)
#define CTOR_MAGIC 0x6d616e7963616368ULL

static const size_t size_tab[] = { 8, 16, 24, 40, 64, 96, 128, 200, 256, 500, 1000, 1500, 2048 };
static const size_t align_tab[] = { 0, 0, 0, 8, 16, 32, 64, 128, 0, 256 };
#define NSIZES (sizeof size_tab / sizeof size_tab[0])
#define NALIGNS (sizeof align_tab / sizeof align_tab[0])

static atomic_ulong ctor_calls;

static void ctor(void *p)
{
	*(uint64_t *)p = CTOR_MAGIC;
	atomic_fetch_add_explicit(&ctor_calls, 1, memory_order_relaxed);
}

struct spec {
	size_t size, align;
	bool ctor;
	struct uslab_cache *c;
};

static void spec_make(struct spec *s, unsigned i, unsigned salt)
{
	s->size = size_tab[(i * 7 + salt) % NSIZES];
	s->align = align_tab[(i * 3 + salt) % NALIGNS];
	s->ctor = (i + salt) % 4 == 0;
}

static void spec_create(struct spec *s, const char *prefix, unsigned i)
{
	char name[48];
	snprintf(name, sizeof name, "%s_%u", prefix, i);
	/* distinct caches: merging (tested in test_merge) would share counts */
	s->c = uslab_cache_create(name, s->size, s->align, USLAB_NO_MERGE, s->ctor ? ctor : NULL);
	CHECKF(s->c != NULL, "create %s: errno %d", name, errno);
	CHECK(strcmp(uslab_cache_name(s->c), name) == 0);
	CHECK_EQ(uslab_cache_size(s->c), s->size);
}

static size_t want_align(const struct spec *s)
{
	return s->align ? s->align : s->size < 16 ? 8 : 16;
}

static uint8_t seed_of(const void *p, const struct spec *s)
{
	return (uint8_t)((((uintptr_t)p >> 3) * 31 + s->size) | 1);
}

/* Allocate from s, check it is an object of this cache as far as can be
 * seen, and fill it. */
static void *get(const struct spec *s)
{
	uint8_t *p = uslab_cache_alloc(s->c);
	CHECKF(p != NULL, "alloc from %s: errno %d", uslab_cache_name(s->c), errno);
	CHECKF((uintptr_t)p % want_align(s) == 0, "object %p of %s (align %zu) misaligned", (void *)p,
	       uslab_cache_name(s->c), want_align(s));
	if (s->ctor)
		CHECKF(*(uint64_t *)p == CTOR_MAGIC, "object %p of %s not constructed", (void *)p,
		       uslab_cache_name(s->c));
	uint8_t v = seed_of(p, s);
	for (size_t j = 0; j < s->size; j++)
		p[j] = (uint8_t)(v + j);
	return p;
}

static void put(const struct spec *s, void *obj)
{
	uint8_t *p = obj, v = seed_of(p, s);
	for (size_t j = 0; j < s->size; j++)
		CHECKF(p[j] == (uint8_t)(v + j), "object %p of %s: byte %zu overwritten", obj, uslab_cache_name(s->c),
		       j);
	if (s->ctor)
		*(uint64_t *)p = CTOR_MAGIC;     /* back to its constructed state */
	uslab_cache_free(s->c, obj);
}

static void check_apart(const struct spec *s, void *const *objs, int n)
{
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++) {
			uintptr_t a = (uintptr_t)objs[i], b = (uintptr_t)objs[j];
			CHECKF(a + s->size <= b || b + s->size <= a, "objects %p and %p of %s overlap", objs[i], objs[j],
			       uslab_cache_name(s->c));
		}
}

/* ---- one thread ------------------------------------------------------------------ */

static struct spec specs[NCACHES];
static void *kept[NCACHES][2];

struct sbuf {
	char buf[1 << 20];
	size_t len;
};

static void sink(void *arg, const char *text)
{
	struct sbuf *s = arg;
	size_t n = strlen(text);
	if (n > sizeof s->buf - 1 - s->len)
		n = sizeof s->buf - 1 - s->len;
	memcpy(s->buf + s->len, text, n);
	s->len += n;
	s->buf[s->len] = 0;
}

static void test_single_thread(void)
{
	for (unsigned i = 0; i < NCACHES; i++) {
		spec_make(&specs[i], i, 0);
		spec_create(&specs[i], "mc_one", i);
		void *o[4];
		for (int j = 0; j < 4; j++)
			o[j] = get(&specs[i]);
		check_apart(&specs[i], o, 4);
		put(&specs[i], o[1]);
		put(&specs[i], o[3]);
		kept[i][0] = o[0];
		kept[i][1] = o[2];
	}
	/* All caches live at once, each with two objects. */
	struct sbuf *sb = calloc(1, sizeof *sb);
	CHECK(sb != NULL);
	uslab_stats_print(sink, sb, 0);
	CHECK(strstr(sb->buf, "mc_one_0") != NULL);
	char last[48];
	snprintf(last, sizeof last, "mc_one_%u", NCACHES - 1);
	CHECK(strstr(sb->buf, last) != NULL);
	for (unsigned i = 0; i < NCACHES; i++) {
		CHECK_EQ(cache_active(specs[i].c), 2);
		put(&specs[i], kept[i][0]);
		put(&specs[i], kept[i][1]);
		CHECK_EQ(cache_active(specs[i].c), 0);
		destroy_silently(specs[i].c);
	}
	sb->len = 0;
	sb->buf[0] = 0;
	uslab_stats_print(sink, sb, 0);
	CHECK(strstr(sb->buf, "mc_one_") == NULL);
	free(sb);
}

/* ---- two long-lived threads, recycled ids ------------------------------------- */

static struct spec set_a[NCACHES], set_b[NCACHES];
static void *hand_a[NCACHES];          /* allocated by thread 0, freed by thread 1 */
static void *kept_b[2][NCACHES];       /* freed by main */
static pthread_barrier_t bar;

static void *long_lived(void *arg)
{
	int t = (int)(uintptr_t)arg;
	/* phase 1: use every cache of set A; the slabs stay cached here */
	for (unsigned i = 0; i < NCACHES; i++) {
		void *o[3];
		for (int j = 0; j < 3; j++)
			o[j] = get(&set_a[i]);
		check_apart(&set_a[i], o, 3);
		for (int j = 0; j < 3; j++)
			put(&set_a[i], o[j]);
		if (t == 0)
			hand_a[i] = get(&set_a[i]);
	}
	pthread_barrier_wait(&bar);
	/* phase 2: thread 1 frees what thread 0 allocated */
	if (t == 1)
		for (unsigned i = 0; i < NCACHES; i++)
			put(&set_a[i], hand_a[i]);
	pthread_barrier_wait(&bar);
	/* main destroys set A and creates set B: same slots, other shapes */
	pthread_barrier_wait(&bar);
	for (unsigned i = 0; i < NCACHES; i++) {
		void *o[3];
		for (int j = 0; j < 3; j++)
			o[j] = get(&set_b[i]);
		check_apart(&set_b[i], o, 3);
		struct uslab_cache_info info;
		cache_info(set_b[i].c, &info);
		CHECK_EQ(info.object_size, set_b[i].size);
		CHECK(strcmp(info.name, uslab_cache_name(set_b[i].c)) == 0);
		put(&set_b[i], o[0]);
		put(&set_b[i], o[2]);
		kept_b[t][i] = o[1];
	}
	pthread_barrier_wait(&bar);
	/* main checks and frees what we kept */
	pthread_barrier_wait(&bar);

	/* phase 3: both threads create, use and destroy caches at once */
	enum { ROUNDS = 3, PER = 200 };
	static struct spec own[2][PER];
	for (int r = 0; r < ROUNDS; r++) {
		for (unsigned i = 0; i < PER; i++) {
			spec_make(&own[t][i], i + (unsigned)r * 13, (unsigned)t * 5 + 1);
			spec_create(&own[t][i], t ? "mc_t1" : "mc_t0", i);
			void *o[2] = { get(&own[t][i]), get(&own[t][i]) };
			check_apart(&own[t][i], o, 2);
			put(&own[t][i], o[0]);
			put(&own[t][i], o[1]);
		}
		for (unsigned i = 0; i < PER; i++) {
			CHECK_EQ(cache_active(own[t][i].c), 0);
			destroy_silently(own[t][i].c);
		}
	}
	return NULL;
}

static void test_recycled_ids(void)
{
	CHECK(pthread_barrier_init(&bar, NULL, 3) == 0);
	for (unsigned i = 0; i < NCACHES; i++) {
		spec_make(&set_a[i], i, 1);
		spec_create(&set_a[i], "mc_a", i);
	}
	pthread_t t[2];
	for (uintptr_t i = 0; i < 2; i++)
		CHECK(pthread_create(&t[i], NULL, long_lived, (void *)i) == 0);
	pthread_barrier_wait(&bar);      /* phase 1 done */
	pthread_barrier_wait(&bar);      /* phase 2 done */
	/* All objects of set A are free, but the threads still cache its
	 * slabs: destroy takes them back and must find nothing live. (The
	 * exactness of active_objects while another thread holds a CPU slab is
	 * tested in test_api.) */
	for (unsigned i = 0; i < NCACHES; i++)
		destroy_silently(set_a[i].c);
	for (unsigned i = 0; i < NCACHES; i++) {
		spec_make(&set_b[i], i, 6);     /* other sizes, alignments, ctors */
		spec_create(&set_b[i], "mc_b", i);
	}
	pthread_barrier_wait(&bar);      /* threads use set B */
	pthread_barrier_wait(&bar);
	for (unsigned i = 0; i < NCACHES; i++) {
		void *o[2] = { kept_b[0][i], kept_b[1][i] };
		check_apart(&set_b[i], o, 2);
		put(&set_b[i], o[0]);
		put(&set_b[i], o[1]);
	}
	pthread_barrier_wait(&bar);
	for (int i = 0; i < 2; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	/* Both threads exited: nothing is cached anywhere any more. */
	for (unsigned i = 0; i < NCACHES; i++) {
		CHECK_EQ(cache_active(set_b[i].c), 0);
		CHECK(uslab_cache_shrink(set_b[i].c) == 0);
		destroy_silently(set_b[i].c);
	}
	pthread_barrier_destroy(&bar);
	printf("    constructor calls: %lu\n", atomic_load(&ctor_calls));
}

int main(void)
{
	check_init("test_many_caches");
	RUN(test_single_thread);
	RUN(test_recycled_ids);
	return 0;
}
