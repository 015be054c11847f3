/*
 * The public API, call by call and errno by errno (docs/testing.md row 16):
 * create's argument checks, alignment and size sweep with overlap and
 * content checks, zalloc, free(NULL) and errno, constructors, names,
 * get_info, stat names and events, the stats printers, shrink, and destroy
 * with live objects.
 */
#include "check.h"
#include "kfence.h"   /* kfence_owns(): KFENCE is on by default */

#include <pthread.h>
#include <stdatomic.h>

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static size_t default_align(size_t size)
{
	return size < 16 ? 8 : 16;
}

static bool is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

/* ---- create: argument checks ------------------------------------------ */

static void test_create_einval(void)
{
	CHECK_NULL_ERRNO(uslab_cache_create("zero", 0, 0, 0, NULL), EINVAL);
	CHECK_NULL_ERRNO(uslab_cache_create("big", USLAB_CACHE_MAX_SIZE + 1, 0, 0, NULL), EINVAL);
	CHECK_NULL_ERRNO(uslab_cache_create("huge", SIZE_MAX, 0, 0, NULL), EINVAL);
	CHECK_NULL_ERRNO(uslab_cache_create("huge2", SIZE_MAX / 2 + 1, 0, 0, NULL), EINVAL);

	static const size_t bad_align[] = { 3, 24, 6, 12, 100, 4097, 3 * 4096, SIZE_MAX };
	for (size_t i = 0; i < NELEM(bad_align); i++)
		CHECK_NULL_ERRNO(uslab_cache_create("align", 64, bad_align[i], 0, NULL), EINVAL);
	/* Powers of two above USLAB_CACHE_MAX_SIZE. */
	CHECK_NULL_ERRNO(uslab_cache_create("align", 64, USLAB_CACHE_MAX_SIZE * 2, 0, NULL), EINVAL);
	CHECK_NULL_ERRNO(uslab_cache_create("align", 64, (size_t)1 << 40, 0, NULL), EINVAL);
	CHECK_NULL_ERRNO(uslab_cache_create("align", 64, (size_t)1 << 63, 0, NULL), EINVAL);

	static const unsigned long bad_flags[] = { 1UL, 0x4000UL, 0x80000000UL, 1UL << 40, ~0UL,
						   USLAB_HWCACHE_ALIGN | 2UL, USLAB_NO_MERGE | 0x10UL };
	for (size_t i = 0; i < NELEM(bad_flags); i++)
		CHECK_NULL_ERRNO(uslab_cache_create("flags", 64, 0, bad_flags[i], NULL), EINVAL);

	CHECK_NULL_ERRNO(uslab_cache_create(NULL, 64, 0, 0, NULL), EINVAL);
	CHECK_NULL_ERRNO(uslab_cache_create("", 64, 0, 0, NULL), EINVAL);

	char name[USLAB_NAME_MAX + 2];
	memset(name, 'n', USLAB_NAME_MAX + 1);
	name[USLAB_NAME_MAX + 1] = 0;
	CHECK_NULL_ERRNO(uslab_cache_create(name, 64, 0, 0, NULL), EINVAL);
	char longer[300];
	memset(longer, 'L', sizeof longer - 1);
	longer[sizeof longer - 1] = 0;
	CHECK_NULL_ERRNO(uslab_cache_create(longer, 64, 0, 0, NULL), EINVAL);

	/* Exactly USLAB_NAME_MAX characters works, and the name is kept whole. */
	name[USLAB_NAME_MAX] = 0;
	name[0] = 'A';
	name[USLAB_NAME_MAX - 1] = 'Z';
	struct uslab_cache *c = uslab_cache_create(name, 64, 0, 0, NULL);
	CHECK(c != NULL);
	CHECK(strcmp(uslab_cache_name(c), name) == 0);
	struct uslab_cache_info info;
	cache_info(c, &info);
	CHECK(strcmp(info.name, name) == 0);
	void *p = uslab_cache_alloc(c);
	CHECK(p != NULL);
	uslab_cache_free(c, p);
	destroy_silently(c);

	/* The valid extremes and flag bits. */
	c = uslab_cache_create("maxsize", USLAB_CACHE_MAX_SIZE, 0, 0, NULL);
	CHECK(c != NULL);
	CHECK_EQ(uslab_cache_size(c), USLAB_CACHE_MAX_SIZE);
	destroy_silently(c);
	c = uslab_cache_create("flags_ok", 64, 0, USLAB_HWCACHE_ALIGN | USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	destroy_silently(c);
	for (size_t a = 1; a <= 4; a *= 2) {
		c = uslab_cache_create("small_align", 10, a, 0, NULL);
		CHECKF(c != NULL, "align %zu", a);
		p = uslab_cache_alloc(c);
		CHECK(p != NULL && (uintptr_t)p % a == 0);
		memset(p, 1, 10);
		uslab_cache_free(c, p);
		destroy_silently(c);
	}
	uslab_cache_destroy(NULL);
}

static void test_name_copied(void)
{
	char buf[32];
	strcpy(buf, "mutable_name");
	struct uslab_cache *c = uslab_cache_create(buf, 123, 0, 0, NULL);
	CHECK(c != NULL);
	memset(buf, 'X', sizeof buf - 1);
	CHECK(strcmp(uslab_cache_name(c), "mutable_name") == 0);
	CHECK_EQ(uslab_cache_size(c), 123);
	/* Names need not be unique. */
	struct uslab_cache *d = uslab_cache_create("mutable_name", 77, 0, 0, NULL);
	CHECK(d != NULL && d != c);
	CHECK(strcmp(uslab_cache_name(d), "mutable_name") == 0);
	CHECK_EQ(uslab_cache_size(d), 77);
	destroy_silently(d);
	destroy_silently(c);
}

/* ---- alignment and size sweep -------------------------------------------- */

static uint8_t pat_seed(size_t i)
{
	return (uint8_t)(i * 2654435761u >> 13) | 1;
}

static void fill(void *p, size_t size, size_t i)
{
	uint8_t *b = p, s = pat_seed(i);
	for (size_t j = 0; j < size; j++)
		b[j] = (uint8_t)(s + j * 7);
	if (size >= sizeof(size_t))
		memcpy(b, &i, sizeof i);
}

static bool intact(const void *p, size_t size, size_t i)
{
	const uint8_t *b = p;
	uint8_t s = pat_seed(i);
	size_t j = 0;
	if (size >= sizeof(size_t)) {
		size_t got;
		memcpy(&got, b, sizeof got);
		if (got != i)
			return false;
		j = sizeof(size_t);
	}
	for (; j < size; j++)
		if (b[j] != (uint8_t)(s + j * 7))
			return false;
	return true;
}

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
	return x < y ? -1 : x > y;
}

/* No two of the n objects of `size` bytes overlap. Sorts a copy. */
static void check_disjoint(void **objs, size_t n, size_t size)
{
	uintptr_t *s = malloc(n * sizeof *s);
	CHECK(s != NULL);
	for (size_t i = 0; i < n; i++)
		s[i] = (uintptr_t)objs[i];
	qsort(s, n, sizeof *s, cmp_ptr);
	for (size_t i = 1; i < n; i++)
		CHECKF(s[i - 1] + size <= s[i], "objects %#lx and %#lx of size %zu overlap",
		       (unsigned long)s[i - 1], (unsigned long)s[i], size);
	free(s);
}

/* Allocate objects enough for several slabs (fewer for big sizes), check
 * alignment, fill each with its own pattern, check overlap and contents,
 * free in an interleaved order. */
static void exercise(struct uslab_cache *c, size_t size, size_t want_align, const char *what)
{
	struct uslab_cache_info info;
	cache_info(c, &info);
	CHECKF(info.objects_per_slab > 0, "%s", what);
	CHECKF(info.slab_object_size >= size, "%s: stride %zu < size %zu", what, info.slab_object_size, size);
	CHECKF(is_pow2(info.align) && info.align >= want_align, "%s: align %zu, want %zu", what, info.align,
	       want_align);
	CHECKF(info.slab_object_size % want_align == 0, "%s: stride %zu", what, info.slab_object_size);
	size_t n = 3 * (size_t)info.objects_per_slab + 1;
	size_t cap = (SCALE(24, 8) * MiB) / size;
	if (cap < 4)
		cap = 4;
	if (n > cap)
		n = cap;
	if (n > 20000)
		n = 20000;
	void **objs = malloc(n * sizeof *objs);
	CHECK(objs != NULL);
	for (size_t i = 0; i < n; i++) {
		objs[i] = uslab_cache_alloc(c);
		CHECKF(objs[i] != NULL, "%s: alloc %zu of %zu", what, i, n);
		CHECKF((uintptr_t)objs[i] % want_align == 0, "%s: object %p not aligned to %zu", what, objs[i],
		       want_align);
		fill(objs[i], size, i);
	}
	cache_info(c, &info);
	CHECKF(info.active_objects == n, "%s: active %" PRIu64 " != %zu", what, info.active_objects, n);
	size_t kf = (size_t)kfence_in_use(), in_slabs = kf < n ? n - kf : 0;   /* (sampled: in KFENCE's pool) */
	CHECKF(info.total_objects >= in_slabs && info.slabs >= 1, "%s", what);
	CHECKF(info.slabs >= (in_slabs + info.objects_per_slab - 1) / info.objects_per_slab, "%s: %" PRIu64 " slabs",
	       what, info.slabs);
	CHECKF(info.slab_bytes >= info.total_objects * info.slab_object_size, "%s", what);
	check_disjoint(objs, n, size);
	for (size_t i = 0; i < n; i++)
		CHECKF(intact(objs[i], size, i), "%s: object %zu (%p) overwritten", what, i, objs[i]);
	for (size_t i = 0; i < n; i += 2)
		uslab_cache_free(c, objs[i]);
	for (size_t i = 1; i < n; i += 2)
		CHECKF(intact(objs[i], size, i), "%s: object %zu changed by freeing others", what, i);
	for (size_t i = 1; i < n; i += 2)
		uslab_cache_free(c, objs[i]);
	CHECK_EQ(cache_active(c), 0);
	free(objs);
}

static void test_align_size_sweep(void)
{
	static const size_t aligns[] = { 0, 8, 16, 64, 128, 4096 };
	static const size_t sizes[] = { 1, 7, 24, 100, 1000, 4000, USLAB_CACHE_MAX_SIZE };
	for (size_t a = 0; a < NELEM(aligns); a++) {
		for (size_t s = 0; s < NELEM(sizes); s++) {
			char what[96];
			snprintf(what, sizeof what, "size %zu align %zu", sizes[s], aligns[a]);
			struct uslab_cache *c = uslab_cache_create("sweep", sizes[s], aligns[a], 0, NULL);
			CHECKF(c != NULL, "%s: errno %d", what, errno);
			CHECK_EQ(uslab_cache_size(c), sizes[s]);
			size_t want = aligns[a] ? aligns[a] : default_align(sizes[s]);
			exercise(c, sizes[s], want, what);
			CHECKF(uslab_cache_shrink(c) == 0, "%s", what);
			destroy_silently(c);
		}
	}
}

/* Alignments above the page size: larger slabs. */
static void test_big_align(void)
{
	static const size_t aligns[] = { 8192, 65536, USLAB_CACHE_MAX_SIZE };
	static const size_t sizes[] = { 1, 100, 5000 };
	for (size_t a = 0; a < NELEM(aligns); a++) {
		for (size_t s = 0; s < NELEM(sizes); s++) {
			char what[96];
			snprintf(what, sizeof what, "size %zu align %zu", sizes[s], aligns[a]);
			struct uslab_cache *c = uslab_cache_create("bigalign", sizes[s], aligns[a], 0, NULL);
			CHECKF(c != NULL, "%s: errno %d", what, errno);
			exercise(c, sizes[s], aligns[a], what);
			destroy_silently(c);
		}
	}
}

/* USLAB_HWCACHE_ALIGN: the cache line, or the smallest power of two half of
 * it that still holds the object; never below the default alignment. */
static void test_hwcache_align(void)
{
	static const size_t sizes[] = { 1, 7, 8, 16, 17, 24, 32, 33, 64, 100, 1000 };
	for (size_t s = 0; s < NELEM(sizes); s++) {
		size_t hw = 64;
		while (sizes[s] <= hw / 2)
			hw /= 2;
		size_t want = hw > default_align(sizes[s]) ? hw : default_align(sizes[s]);
		char what[96];
		snprintf(what, sizeof what, "hwcache size %zu", sizes[s]);
		struct uslab_cache *c = uslab_cache_create("hwcache", sizes[s], 0, USLAB_HWCACHE_ALIGN, NULL);
		CHECKF(c != NULL, "%s", what);
		exercise(c, sizes[s], want, what);
		destroy_silently(c);
	}
}

/* ---- zalloc ----------------------------------------------------------------- */

static void test_zalloc(void)
{
	static const size_t sizes[] = { 7, 100, 4000, 65536 + 8 };
	for (size_t s = 0; s < NELEM(sizes); s++) {
		size_t size = sizes[s];
		struct uslab_cache *c = uslab_cache_create("zalloc", size, 0, 0, NULL);
		CHECK(c != NULL);
		struct uslab_cache_info info;
		cache_info(c, &info);
		size_t n = 2 * (size_t)info.objects_per_slab + 3;
		if (n * size > 16 * MiB)
			n = 16 * MiB / size;
		void **objs = malloc(n * sizeof *objs), **z = malloc(n * sizeof *z);
		CHECK(objs && z);
		for (size_t i = 0; i < n; i++) {
			objs[i] = uslab_cache_alloc(c);
			CHECK(objs[i] != NULL);
			memset(objs[i], 0xff, size);
		}
		for (size_t i = 0; i < n; i++)
			uslab_cache_free(c, objs[i]);
		size_t reused = 0;
		for (size_t i = 0; i < n; i++) {
			z[i] = uslab_cache_zalloc(c);
			CHECK(z[i] != NULL);
			CHECK((uintptr_t)z[i] % default_align(size) == 0);
			const uint8_t *b = z[i];
			for (size_t j = 0; j < size; j++)
				CHECKF(b[j] == 0, "zalloc size %zu: byte %zu is %#x", size, j, b[j]);
			for (size_t k = 0; k < n; k++)
				if (objs[k] == z[i]) {
					reused++;
					break;
				}
			memset(z[i], 0xee, size);
		}
		/* The test means something only if dirty objects came back. */
		CHECKF(reused > 0, "size %zu: no freed object was reused", size);
		for (size_t i = 0; i < n; i++)
			uslab_cache_free(c, z[i]);
		CHECK_EQ(cache_active(c), 0);
		free(objs);
		free(z);
		destroy_silently(c);
	}
}

/* ---- free: NULL and errno ---------------------------------------------------- */

static void *free_with_errno_thread(void *arg)
{
	void **objs = arg;
	struct uslab_cache *c = objs[0];
	for (size_t i = 1; objs[i]; i++) {
		errno = 1789;
		uslab_cache_free(c, objs[i]);
		CHECKF(errno == 1789, "remote free changed errno to %d", errno);
	}
	return NULL;
}

static void test_free_null_and_errno(void)
{
	struct uslab_cache *c = uslab_cache_create("errno", 200, 0, 0, NULL);
	CHECK(c != NULL);
	errno = 1789;
	uslab_cache_free(c, NULL);
	CHECK(errno == 1789);
	CHECK_EQ(cache_active(c), 0);

	/* Fast path, slow path, slabs becoming empty and given back. */
	struct uslab_cache_info info;
	cache_info(c, &info);
	size_t n = 6 * (size_t)info.objects_per_slab + 5;
	void **objs = malloc(n * sizeof *objs);
	CHECK(objs != NULL);
	for (int round = 0; round < 3; round++) {
		for (size_t i = 0; i < n; i++) {
			objs[i] = uslab_cache_alloc(c);
			CHECK(objs[i] != NULL);
		}
		/* Round 0: in order; 1: reverse; 2: strided. */
		for (size_t k = 0; k < n; k++) {
			size_t i = round == 0 ? k : round == 1 ? n - 1 - k : (k * 7) % n;
			if (round == 2 && n % 7 == 0)
				i = k;
			errno = 1789;
			uslab_cache_free(c, objs[i]);
			CHECKF(errno == 1789, "free changed errno to %d (round %d, object %zu)", errno, round, k);
			errno = 1789;
			uslab_cache_free(c, NULL);
			CHECK(errno == 1789);
		}
		CHECK_EQ(cache_active(c), 0);
		errno = 1789;
		uslab_cache_shrink(c);
	}
	free(objs);

	/* Remote frees by another thread. */
	size_t m = 3 * (size_t)info.objects_per_slab;
	void **arr = calloc(m + 2, sizeof *arr);
	CHECK(arr != NULL);
	arr[0] = c;
	for (size_t i = 1; i <= m; i++) {
		arr[i] = uslab_cache_alloc(c);
		CHECK(arr[i] != NULL);
	}
	pthread_t t;
	CHECK(pthread_create(&t, NULL, free_with_errno_thread, arr) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK_EQ(cache_active(c), 0);
	free(arr);
	destroy_silently(c);
}

/* ---- constructors ------------------------------------------------------------ */

#define CTOR_MAGIC 0xc05717c7ed0b1ec7ULL

struct cobj {
	uint64_t magic;
	uint64_t counter;
	uint8_t pad[40];
};

static atomic_ulong ctor_calls;   /* of slab objects: KFENCE's samples (on by default) are counted apart */
static atomic_ulong ctor_calls_sampled;

static void cobj_ctor(void *p)
{
	struct cobj *o = p;
	o->magic = CTOR_MAGIC;
	o->counter = 0;
	memset(o->pad, 0x5a, sizeof o->pad);
	atomic_fetch_add(kfence_owns(p) ? &ctor_calls_sampled : &ctor_calls, 1);
}

static void check_constructed(const struct cobj *o)
{
	CHECKF(o->magic == CTOR_MAGIC && o->counter == 0, "object %p not in constructed state", (void *)o);
	for (size_t i = 0; i < sizeof o->pad; i++)
		CHECK(o->pad[i] == 0x5a);
}

static void test_ctor(void)
{
	atomic_store(&ctor_calls, 0);
	struct uslab_cache *c = uslab_cache_create("ctor", sizeof(struct cobj), 0, 0, cobj_ctor);
	CHECK(c != NULL);
	struct uslab_cache_info info;
	cache_info(c, &info);
	CHECK_EQ(atomic_load(&ctor_calls), info.total_objects);

	struct cobj *p = uslab_cache_alloc(c), *sampled[8];
	unsigned ns = 0;
	while (kfence_owns(p) && ns < 8) {   /* one from a slab, please */
		sampled[ns++] = p;
		p = uslab_cache_alloc(c);
	}
	CHECK(p != NULL);
	check_constructed(p);
	cache_info(c, &info);
	unsigned long calls = atomic_load(&ctor_calls);
	CHECK(calls >= 1);
	/* Every slot of the new slab was constructed, once. */
	CHECK_EQ(calls, info.total_objects);
	CHECK_EQ(calls, info.objects_per_slab);

	/* Allocating and freeing the same object does not construct again. */
	for (int i = 0; i < 1000; i++) {
		p->counter = 42;      /* use it ... */
		p->counter = 0;       /* ... and return it to its constructed state */
		uslab_cache_free(c, p);
		p = uslab_cache_alloc(c);
		CHECK(p != NULL);
		check_constructed(p);
	}
	CHECK_EQ(atomic_load(&ctor_calls), calls);

	/* Growing: each new slab constructs its slots once. */
	size_t n = 5 * (size_t)info.objects_per_slab + 1;
	struct cobj **objs = malloc(n * sizeof *objs);
	CHECK(objs != NULL);
	for (size_t i = 0; i < n; i++) {
		objs[i] = uslab_cache_alloc(c);
		CHECK(objs[i] != NULL);
		check_constructed(objs[i]);
		cache_info(c, &info);
		CHECK_EQ(atomic_load(&ctor_calls), info.total_objects);
	}
	calls = atomic_load(&ctor_calls);
	CHECK(calls >= n + 1);
	for (size_t i = 0; i < n; i++)
		uslab_cache_free(c, objs[i]);
	uslab_cache_free(c, p);
	CHECK_EQ(atomic_load(&ctor_calls), calls);
	/* Objects come back constructed. */
	for (size_t i = 0; i < n; i++) {
		objs[i] = uslab_cache_alloc(c);
		CHECK(objs[i] != NULL);
		check_constructed(objs[i]);
	}
	for (size_t i = 0; i < n; i++)
		uslab_cache_free(c, objs[i]);
	while (ns)
		uslab_cache_free(c, sampled[--ns]);
	free(objs);
	CHECK_EQ(cache_active(c), 0);
	destroy_silently(c);
}

/* ---- get_info ---------------------------------------------------------------- */

static void *alloc_keep_thread(void *arg)
{
	void **a = arg;
	struct uslab_cache *c = a[0];
	for (int i = 1; i <= 10; i++) {
		a[i] = uslab_cache_alloc(c);
		CHECK(a[i] != NULL);
	}
	return NULL;
}

static void test_get_info(void)
{
	struct uslab_cache *c = uslab_cache_create("info_cache", 300, 64, 0, NULL);
	CHECK(c != NULL);
	struct uslab_cache_info info;

	errno = 0;
	CHECK(uslab_cache_get_info(c, NULL) == -1 && errno == EINVAL);
	memset(&info, 0, sizeof info);
	info.version = USLAB_CACHE_INFO_VERSION;
	errno = 0;
	CHECK(uslab_cache_get_info(NULL, &info) == -1 && errno == EINVAL);
	static const unsigned bad_versions[] = { 0, USLAB_CACHE_INFO_VERSION + 1, 1000, ~0u };
	for (size_t i = 0; i < NELEM(bad_versions); i++) {
		memset(&info, 0, sizeof info);
		info.version = bad_versions[i];
		errno = 0;
		CHECKF(uslab_cache_get_info(c, &info) == -1 && errno == EINVAL, "version %u", bad_versions[i]);
	}

	cache_info(c, &info);
	CHECK(strcmp(info.name, "info_cache") == 0);
	CHECK_EQ(info.object_size, 300);
	CHECK(info.slab_object_size >= 300 && info.slab_object_size % 64 == 0);
	CHECK(info.align >= 64 && is_pow2(info.align));
	CHECK(info.objects_per_slab > 0);
	CHECK(info.order < 20 && info.min_order <= info.order);
	CHECK((uint64_t)info.objects_per_slab * info.slab_object_size <= (4096ULL << info.order));
	CHECK_EQ(info.active_objects, 0);
	CHECK(info.partial_slabs <= info.slabs);

	size_t n = 3 * (size_t)info.objects_per_slab + 2;
	void **objs = malloc(n * sizeof *objs);
	CHECK(objs != NULL);
	for (size_t i = 0; i < n; i++) {
		objs[i] = uslab_cache_alloc(c);
		CHECK(objs[i] != NULL);
		cache_info(c, &info);
		CHECK_EQ(info.active_objects, i + 1);
	}
	CHECK(info.slabs >= 4);
	CHECK(info.total_objects >= n);
	CHECK(info.slab_bytes >= info.slabs * 4096);
	CHECK(info.slab_bytes >= info.total_objects * info.slab_object_size);
	CHECK(info.partial_slabs <= info.slabs);

	/* Objects held after their allocating thread exited count too. */
	void *a[11] = { c };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, alloc_keep_thread, a) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK_EQ(cache_active(c), n + 10);
	for (int i = 1; i <= 10; i++)
		uslab_cache_free(c, a[i]);
	CHECK_EQ(cache_active(c), n);

	for (size_t i = 0; i < n; i += 3)
		uslab_cache_free(c, objs[i]);
	CHECK_EQ(cache_active(c), n - (n + 2) / 3);
	for (size_t i = 0; i < n; i++)
		if (i % 3)
			uslab_cache_free(c, objs[i]);
	CHECK_EQ(cache_active(c), 0);
	free(objs);
	destroy_silently(c);
}

/* A quiet cache while another live thread holds its CPU slab. The header's
 * contract: exact for the caller's own use and for exited threads; another
 * live thread's CPU free list counts as allocated (at most one slab ahead).
 * The thread reports what it sees itself, which must be exact. */
struct parked {
	struct uslab_cache *c;
	pthread_barrier_t b;
	void *keep[5];
	uint64_t own_a0, own_a1;
};

static void *parked_thread(void *arg)
{
	struct parked *pk = arg;
	void *p[3];
	struct uslab_cache_info info;
	for (int i = 0; i < 3; i++)
		CHECK((p[i] = uslab_cache_alloc(pk->c)) != NULL);
	for (int i = 0; i < 3; i++)
		uslab_cache_free(pk->c, p[i]);
	cache_info(pk->c, &info);
	pk->own_a0 = info.active_objects;
	pthread_barrier_wait(&pk->b);   /* main reads */
	pthread_barrier_wait(&pk->b);
	for (int i = 0; i < 5; i++)
		CHECK((pk->keep[i] = uslab_cache_alloc(pk->c)) != NULL);
	cache_info(pk->c, &info);
	pk->own_a1 = info.active_objects;
	pthread_barrier_wait(&pk->b);   /* main reads */
	pthread_barrier_wait(&pk->b);
	return NULL;
}

static void test_info_exact_when_quiet(void)
{
	struct parked pk;
	pk.c = uslab_cache_create("quiet", 8, 0, 0, NULL);
	CHECK(pk.c != NULL);
	CHECK(pthread_barrier_init(&pk.b, NULL, 2) == 0);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, parked_thread, &pk) == 0);
	pthread_barrier_wait(&pk.b);
	struct uslab_cache_info info;
	cache_info(pk.c, &info);
	uint64_t a0 = info.active_objects;
	uint64_t allocs0 = ev_allocs(&info);
	pthread_barrier_wait(&pk.b);
	pthread_barrier_wait(&pk.b);
	cache_info(pk.c, &info);
	uint64_t a1 = info.active_objects;
	uint64_t allocs1 = ev_allocs(&info);
	pthread_barrier_wait(&pk.b);
	CHECK(pthread_join(t, NULL) == 0);
	CHECKF(pk.own_a0 == 0 && pk.own_a1 == 5,
	       "the thread's own view: active_objects %" PRIu64 " (want 0), then %" PRIu64 " (want 5)",
	       pk.own_a0, pk.own_a1);
	/* From here: the parked thread's CPU free list counts as allocated,
	 * bounded by one slab of objects. */
	struct uslab_cache_info ci;
	cache_info(pk.c, &ci);
	uint64_t per = ci.objects_per_slab;
	CHECKF(a0 <= per && a1 >= 5 && a1 <= 5 + per && allocs0 >= 3 && allocs0 <= 3 + per &&
	       allocs1 >= 8 && allocs1 <= 8 + per,
	       "another thread parked with its CPU slab: active_objects %" PRIu64 ", then %" PRIu64
	       "; allocations %" PRIu64 ", then %" PRIu64 " (objects per slab %" PRIu64 ")",
	       a0, a1, allocs0, allocs1, per);
	CHECK_EQ(cache_active(pk.c), 5);     /* after the thread exited */
	for (int i = 0; i < 5; i++)
		uslab_cache_free(pk.c, pk.keep[i]);
	CHECK_EQ(cache_active(pk.c), 0);
	pthread_barrier_destroy(&pk.b);
	destroy_silently(pk.c);
}

/* ---- stat names and events ------------------------------------------------ */

static void test_stat_names(void)
{
	static const char *const names[] = {
#define X(n, d) #n,
		USLAB_STAT_ITEMS(X)
#undef X
	};
	CHECK_EQ(NELEM(names), USLAB_NR_STAT_ITEMS);
	CHECK(uslab_stat_name(USLAB_STAT_ALLOC_FASTPATH) != NULL);
	CHECK(strcmp(uslab_stat_name(USLAB_STAT_ALLOC_FASTPATH), "ALLOC_FASTPATH") == 0);
	CHECK(strcmp(uslab_stat_name(USLAB_STAT_ALLOC_FAILED), "ALLOC_FAILED") == 0);
	for (int i = 0; i < USLAB_NR_STAT_ITEMS; i++) {
		const char *n = uslab_stat_name((enum uslab_stat_item)i);
		const char *d = uslab_stat_desc((enum uslab_stat_item)i);
		CHECKF(n && strcmp(n, names[i]) == 0, "stat %d: %s", i, n ? n : "(null)");
		CHECKF(d && *d, "stat %d has no description", i);
	}
	CHECK(uslab_stat_name(USLAB_NR_STAT_ITEMS) == NULL);
	CHECK(uslab_stat_desc(USLAB_NR_STAT_ITEMS) == NULL);
	CHECK(uslab_stat_name((enum uslab_stat_item)1000) == NULL);
	CHECK(uslab_stat_name((enum uslab_stat_item)-1) == NULL);
	CHECK(uslab_stat_desc((enum uslab_stat_item)-1) == NULL);
}

#define EV(info, item) ((info).events[USLAB_STAT_##item])

static void test_events(void)
{
	struct uslab_cache *c = uslab_cache_create("events", 96, 0, 0, NULL);
	CHECK(c != NULL);
	struct uslab_cache_info info;
	cache_info(c, &info);
	for (int i = 0; i < USLAB_NR_STAT_ITEMS; i++)
		CHECKF(info.events[i] == 0, "fresh cache: %s = %" PRIu64, uslab_stat_name((enum uslab_stat_item)i),
		       info.events[i]);

	/* N alloc+free pairs of one object: one slow allocation at most for
	 * the first, then everything on the fast paths (the sheaf, or the CPU
	 * slab in classic mode). */
	const uint64_t N = 10000, k0 = kfence_allocs();
	for (uint64_t i = 0; i < N; i++) {
		void *p = uslab_cache_alloc(c);
		CHECK(p != NULL);
		uslab_cache_free(c, p);
	}
	cache_info(c, &info);
	CHECK_EQ(ev_allocs(&info), N);
	CHECK_EQ(ev_frees(&info), N);
	CHECK(EV(info, ALLOC_SLOWPATH) >= 1);
	if (!cache_debugged(&info)) {   /* slub_debug sends every operation to the slow path */
		uint64_t k = kfence_allocs() - k0;   /* KFENCE's samples: slow paths */
		CHECK(ev_fast_allocs(&info) + k >= N - 1);
		CHECK(ev_fast_frees(&info) + k >= N - 1);
	}
	CHECK(EV(info, ALLOC_SLAB) >= 1);
	CHECK_EQ(EV(info, ALLOC_FAILED), 0);
	CHECK_EQ(info.active_objects, 0);

	/* M objects held at once: several new slabs. */
	size_t M = 3 * (size_t)info.objects_per_slab + 1;
	void **objs = malloc(M * sizeof *objs);
	CHECK(objs != NULL);
	uint64_t slabs0 = EV(info, ALLOC_SLAB);
	for (size_t i = 0; i < M; i++) {
		objs[i] = uslab_cache_alloc(c);
		CHECK(objs[i] != NULL);
	}
	cache_info(c, &info);
	CHECK_EQ(ev_allocs(&info), N + M);
	CHECK(EV(info, ALLOC_SLAB) >= slabs0 + 3);
	/* No slab was given back yet: every slab came from ALLOC_SLAB. */
	CHECK_EQ(EV(info, ALLOC_SLAB) - EV(info, FREE_SLAB), info.slabs);
	for (size_t i = 0; i < M; i++)
		uslab_cache_free(c, objs[i]);
	cache_info(c, &info);
	CHECK_EQ(ev_frees(&info), N + M);
	if (info.cpu_mode == USLAB_CPU_SLQB && !cache_debugged(&info))
		CHECK_EQ(ev_fast_frees(&info), ev_frees(&info));   /* slqb: every free onto the queue */
	else if (!cache_debugged(&info))
		CHECK(ev_frees(&info) - ev_fast_frees(&info) >= 1);   /* some not on the fast path */
	CHECK_EQ(info.active_objects, 0);
	CHECK_EQ(EV(info, ALLOC_SLAB) - EV(info, FREE_SLAB), info.slabs);
	CHECK(uslab_cache_shrink(c) == 0);
	cache_info(c, &info);
	CHECK_EQ(info.slabs, 0);
	CHECK_EQ(EV(info, ALLOC_SLAB), EV(info, FREE_SLAB));
	CHECK_EQ(EV(info, ALLOC_FAILED), 0);
	free(objs);
	destroy_silently(c);
}

/* ---- the stats printers -------------------------------------------------------- */

struct sbuf {
	char buf[1 << 17];
	size_t len;
	unsigned calls;
};

static void sink(void *arg, const char *text)
{
	struct sbuf *s = arg;
	size_t n = strlen(text);
	s->calls++;
	if (n > sizeof s->buf - 1 - s->len)
		n = sizeof s->buf - 1 - s->len;
	memcpy(s->buf + s->len, text, n);
	s->len += n;
	s->buf[s->len] = 0;
}

static void test_stats_print(void)
{
	struct uslab_cache *c = uslab_cache_create("api_print_cache_q7", 72, 0, 0, NULL);
	CHECK(c != NULL);
	void *objs[7];
	for (int i = 0; i < 7; i++)
		CHECK((objs[i] = uslab_cache_alloc(c)) != NULL);

	struct sbuf *s = calloc(1, sizeof *s);
	CHECK(s != NULL);
	uslab_stats_print(sink, s, 0);
	CHECK(s->calls > 0);
	CHECKF(strstr(s->buf, "api_print_cache_q7") != NULL, "table:\n%s", s->buf);
	CHECKF(strstr(s->buf, "Name") != NULL, "table:\n%s", s->buf);
	CHECK(s->buf[s->len - 1] == '\n');

	FILE *f = tmpfile();
	CHECK(f != NULL);
	uslab_stats_print_fd(fileno(f));
	rewind(f);
	char *fdbuf = calloc(1, sizeof s->buf);
	CHECK(fdbuf != NULL);
	size_t n = fread(fdbuf, 1, sizeof s->buf - 1, f);
	fclose(f);
	CHECK(n > 0);
	CHECKF(strstr(fdbuf, "api_print_cache_q7") != NULL, "fd table:\n%s", fdbuf);
	/* Nothing changed in between: the same table, but for the process
	 * line, whose resident size moves with anything the process touches. */
	char *p1 = strstr(s->buf, "\nprocess:"), *p2 = strstr(fdbuf, "\nprocess:");
	size_t l1 = p1 ? (size_t)(p1 - s->buf) : s->len, l2 = p2 ? (size_t)(p2 - fdbuf) : n;
	CHECKF(l1 == l2 && memcmp(fdbuf, s->buf, l1) == 0, "tables differ:\n%s\n---\n%s", s->buf, fdbuf);
	printf("%s", s->buf);

	for (int i = 0; i < 7; i++)
		uslab_cache_free(c, objs[i]);
	destroy_silently(c);

	/* A destroyed cache leaves the table. */
	s->len = 0;
	s->buf[0] = 0;
	uslab_stats_print(sink, s, 0);
	CHECK(strstr(s->buf, "api_print_cache_q7") == NULL);
	free(fdbuf);
	free(s);
}

/* ---- shrink --------------------------------------------------------------------- */

struct hold_arg {
	struct uslab_cache *c;
	pthread_barrier_t *b;
};

static void *hold_cpu_slab_thread(void *arg)
{
	struct hold_arg *h = arg;
	void *p;
	while (kfence_owns(p = uslab_cache_alloc(h->c)))   /* a KFENCE sample makes no CPU slab */
		uslab_cache_free(h->c, p);
	CHECK(p != NULL);
	uslab_cache_free(h->c, p);     /* the slab stays this thread's CPU slab */
	pthread_barrier_wait(h->b);    /* main shrinks */
	pthread_barrier_wait(h->b);
	return NULL;                   /* exit flushes the CPU slab */
}

static void test_shrink(void)
{
	struct uslab_cache *c = uslab_cache_create("shrink", 500, 0, 0, NULL);
	CHECK(c != NULL);
	CHECK(uslab_cache_shrink(c) == 0);     /* never used */
	struct uslab_cache_info info;
	cache_info(c, &info);
	size_t n = 3 * (size_t)info.objects_per_slab + 1;
	void **objs = malloc(n * sizeof *objs);
	CHECK(objs != NULL);
	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < n; i++)
			CHECK((objs[i] = uslab_cache_alloc(c)) != NULL);
		CHECK(uslab_cache_shrink(c) == 1);
		CHECK_EQ(cache_active(c), n);
		/* One object left: still slabs (one of a slab, not a KFENCE sample) */
		for (size_t i = 1; kfence_owns(objs[0]) && i < n; i++) {
			void *t = objs[0];
			objs[0] = objs[i];
			objs[i] = t;
		}
		for (size_t i = 1; i < n; i++)
			uslab_cache_free(c, objs[i]);
		CHECK(uslab_cache_shrink(c) == 1);
		cache_info(c, &info);
		CHECK(info.slabs >= 1);
		uslab_cache_free(c, objs[0]);
		CHECK(uslab_cache_shrink(c) == 0);
		cache_info(c, &info);
		CHECK_EQ(info.slabs, 0);
		CHECK_EQ(info.total_objects, 0);
		CHECK_EQ(info.slab_bytes, 0);
		CHECK_EQ(info.partial_slabs, 0);
	}

	/* Another live thread's CPU slab stays with it; it leaves at exit. */
	pthread_barrier_t b;
	CHECK(pthread_barrier_init(&b, NULL, 2) == 0);
	struct hold_arg h = { c, &b };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, hold_cpu_slab_thread, &h) == 0);
	pthread_barrier_wait(&b);
	/* A debug cache gives no thread a CPU slab: the thread's freed object
	 * went back to an empty node slab, which shrink frees. Parts of CPUs
	 * (the rseq backend) are no thread's: shrink takes theirs too. */
	CHECK(uslab_cache_shrink(c) == (cache_debugged(&info) || cache_per_cpu(&info) ? 0 : 1));
	pthread_barrier_wait(&b);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(uslab_cache_shrink(c) == 0);
	pthread_barrier_destroy(&b);
	free(objs);
	destroy_silently(c);
}

/* ---- destroy with live objects ----------------------------------------------- */

#define LEAK_K 37

static void leak_child(void *arg)
{
	(void)arg;
	struct uslab_cache *c = uslab_cache_create("leaky_cache_xyz", 48, 0, 0, NULL);
	CHECK(c != NULL);
	void *objs[LEAK_K];
	for (int i = 0; i < LEAK_K; i++) {
		CHECK((objs[i] = uslab_cache_alloc(c)) != NULL);
		memset(objs[i], i, 48);
	}
	fprintf(stderr, "--destroy--\n");
	uslab_cache_destroy(c);
	fprintf(stderr, "--after--\n");
	/* Still valid and usable; the live objects are intact. */
	CHECK(strcmp(uslab_cache_name(c), "leaky_cache_xyz") == 0);
	CHECK_EQ(cache_active(c), LEAK_K);
	for (int i = 0; i < LEAK_K; i++)
		for (int j = 0; j < 48; j++)
			CHECK(((uint8_t *)objs[i])[j] == i);
	void *p = uslab_cache_alloc(c);
	CHECK(p != NULL);
	uslab_cache_free(c, p);
	for (int i = 0; i < LEAK_K; i++)
		uslab_cache_free(c, objs[i]);
	CHECK_EQ(cache_active(c), 0);
	uslab_cache_destroy(c);
	fprintf(stderr, "--end--\n");
}

static void test_destroy_live(void)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_in_child(leak_child, NULL, 30, r);
	char desc[128];
	child_describe(r, desc, sizeof desc);
	CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0, "child %s; stderr:\n%s", desc, r->out);
	const char *a = strstr(r->out, "--destroy--\n"), *b = strstr(r->out, "--after--\n"),
		   *e = strstr(r->out, "--end--\n");
	CHECKF(a && b && e && a < b && b < e, "stderr:\n%s", r->out);
	a += strlen("--destroy--\n");
	size_t len = (size_t)(b - a);
	char line[4096];   /* one line, or with slub_debug U 18 */
	CHECKF(len > 0 && len < sizeof line, "destroy with live objects printed nothing; stderr:\n%s", r->out);
	memcpy(line, a, len);
	line[len] = 0;
	/* slub_debug with U (USLAB_OPTIONS=slub_debug=...U, the debug test
	 * variant) follows the one line with INFO lines naming the alloc site
	 * of each live object (at most 16, then "... and N more"). */
	struct uslab_cache *probe = uslab_cache_create("leaky_cache_xyz", 48, 0, 0, NULL);
	CHECK(probe != NULL);
	struct uslab_cache_info pinfo;
	cache_info(probe, &pinfo);
	destroy_silently(probe);
	if (pinfo.flags & USLAB_STORE_USER) {
		char *nl = strchr(line, '\n');
		CHECK(nl != NULL);
		unsigned infos = 0;
		for (char *q = nl + 1; *q; q = strchr(q, '\n') + 1) {
			CHECKF(strncmp(q, "uslab: INFO: live object ", 25) == 0 || strncmp(q, "uslab: INFO: ... and ", 21) == 0,
			       "not an INFO line: %s", q);
			infos++;
		}
		CHECKF(infos == 17, "expected 16 live-object lines and one '... and 21 more': %s", line);
		CHECKF(strstr(line, "... and 21 more") != NULL, "%s", line);
		nl[1] = 0;
		len = (size_t)(nl + 1 - line);
	}
	printf("    destroy reported: %s", line);
	/* One line, naming the cache and the count. */
	CHECKF(strchr(line, '\n') == line + len - 1, "not one line: %s", line);
	CHECKF(strstr(line, "leaky_cache_xyz") != NULL, "cache not named: %s", line);
	bool found = false;
	for (const char *q = line; (q = strstr(q, "37")) != NULL; q++)
		if ((q == line || q[-1] < '0' || q[-1] > '9') && (q[2] < '0' || q[2] > '9'))
			found = true;
	CHECKF(found, "count 37 not in: %s", line);
	b += strlen("--after--\n");
	CHECKF(b == e, "second destroy (after freeing) printed: %.*s", (int)(e - b), b);
	free(r);
}

/* ---- cross-thread basics ------------------------------------------------------- */

struct xfer {
	struct uslab_cache *c;
	void **objs;
	size_t n;
};

static void *producer_thread(void *arg)
{
	struct xfer *x = arg;
	for (size_t i = 0; i < x->n; i++) {
		x->objs[i] = uslab_cache_alloc(x->c);
		CHECK(x->objs[i] != NULL);
		fill(x->objs[i], 64, i);
	}
	return NULL;
}

static void *consumer_thread(void *arg)
{
	struct xfer *x = arg;
	for (size_t i = 0; i < x->n; i++) {
		CHECK(intact(x->objs[i], 64, i));
		uslab_cache_free(x->c, x->objs[i]);
	}
	return NULL;
}

static void test_cross_thread(void)
{
	struct uslab_cache *c = uslab_cache_create("cross", 64, 0, 0, NULL);
	CHECK(c != NULL);
	struct xfer x = { c, NULL, 5000 };
	x.objs = malloc(x.n * sizeof *x.objs);
	CHECK(x.objs != NULL);
	for (int round = 0; round < 4; round++) {
		pthread_t t;
		/* Even rounds: another thread allocates, main frees after it
		 * exited. Odd rounds: main allocates, another thread frees. */
		if (round % 2 == 0) {
			CHECK(pthread_create(&t, NULL, producer_thread, &x) == 0);
			CHECK(pthread_join(t, NULL) == 0);
			CHECK_EQ(cache_active(c), x.n);
			consumer_thread(&x);
		} else {
			producer_thread(&x);
			CHECK(pthread_create(&t, NULL, consumer_thread, &x) == 0);
			CHECK(pthread_join(t, NULL) == 0);
		}
		CHECK_EQ(cache_active(c), 0);
	}
	CHECK(uslab_cache_shrink(c) == 0);
	free(x.objs);
	destroy_silently(c);
}

int main(void)
{
	check_init("test_api");
	RUN(test_create_einval);
	RUN(test_name_copied);
	RUN(test_align_size_sweep);
	RUN(test_big_align);
	RUN(test_hwcache_align);
	RUN(test_zalloc);
	RUN(test_free_null_and_errno);
	RUN(test_ctor);
	RUN(test_get_info);
	RUN(test_stat_names);
	RUN(test_events);
	RUN(test_stats_print);
	RUN(test_shrink);
	RUN(test_destroy_live);
	RUN(test_cross_thread);
	RUN(test_info_exact_when_quiet);
	return 0;
}
