/*
 * Operation-sequence fuzzer (RELIABILITY row 59), for libFuzzer: the input
 * bytes are a program of operations over the cache API (alloc, zalloc,
 * free, bulk alloc/free, shrink, tunables, validate, frees from another
 * thread, a short-lived cache) and, when the tree has it, the malloc family
 * (uslab_malloc, calloc, realloc, free, usable size).
 *
 * A shadow model keeps every live object's cache (or malloc), size and fill
 * byte; each object is filled when it is handed out and checked before it
 * is freed or resized. Live bytes are capped at 50 MiB. At the end of each
 * input every object is freed, and every cache must validate to 0 and count
 * 0 active objects. Any mismatch aborts with a message (a crash to
 * libFuzzer).
 *
 * Built by -DUSLAB_FUZZ=ON with clang (tests/fuzz/run.sh), the library
 * compiled with -fsanitize=fuzzer-no-link,address.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uslab.h"

#define FZPU (USLAB_CONSISTENCY_CHECKS | USLAB_RED_ZONE | USLAB_POISON | USLAB_STORE_USER)
#define LIVE_MAX 4096
#define LIVE_BYTES_MAX (50UL << 20)
#define BULK_MAX 64

/* ---- the caches (created once, shared by every input) ----------------------- */

#define CTOR_BYTE 0xc7

static void ctor96(void *p)
{
	memset(p, CTOR_BYTE, 96);
}

struct fcache {
	const char *name;
	size_t size, align;
	unsigned long flags;
	void (*ctor)(void *);
	struct uslab_cache *c;
};

static struct fcache caches[] = {
	{ "fz_8", 8, 0, 0, NULL, NULL },
	{ "fz_64", 64, 0, 0, NULL, NULL },
	{ "fz_200_hw", 200, 0, USLAB_HWCACHE_ALIGN, NULL, NULL },
	{ "fz_ctor_96", 96, 0, 0, ctor96, NULL },
	{ "fz_4096_a64", 4096, 64, 0, NULL, NULL },
	{ "fz_20000", 20000, 0, 0, NULL, NULL },
	{ "fz_dbg_48", 48, 0, FZPU, NULL, NULL },
	{ "fz_dbg_1000", 1000, 0, USLAB_RED_ZONE | USLAB_POISON, NULL, NULL },
	{ "fz_dbg_ctor_96", 96, 0, FZPU, ctor96, NULL },
	{ "fz_tmp", 0, 0, 0, NULL, NULL },   /* created and destroyed within an input */
};
#define NCACHES (sizeof caches / sizeof caches[0])
#define TMP (NCACHES - 1)

static void fail(const char *what, const void *p, size_t a, size_t b)
{
	fprintf(stderr, "fuzz_ops: model mismatch: %s (%p, %zu, %zu)\n", what, p, a, b);
	abort();
}

static void setup(void)
{
	for (size_t i = 0; i < TMP; i++) {
		struct fcache *f = &caches[i];
		f->c = uslab_cache_create(f->name, f->size, f->align, f->flags, f->ctor);
		if (!f->c)
			fail("cache create", NULL, i, 0);
	}
}

/* ---- the shadow model ----------------------------------------------------------- */

enum kind { K_CACHE, K_MALLOC };

struct obj {
	unsigned char *p;
	size_t size;       /* bytes the caller may use (request) */
	unsigned cache;    /* index in caches[] (K_CACHE) */
	enum kind kind;
	unsigned char fill;
};

static struct obj live[LIVE_MAX];
static size_t nlive, live_bytes;

static void fill_obj(struct obj *o)
{
	memset(o->p, o->fill, o->size);
}

static void check_obj(const struct obj *o)
{
	for (size_t i = 0; i < o->size; i++)
		if (o->p[i] != o->fill)
			fail("object contents changed", o->p, i, o->p[i]);
}

static bool room(size_t size)
{
	return nlive < LIVE_MAX && live_bytes + size <= LIVE_BYTES_MAX;
}

static void add(unsigned char *p, size_t size, unsigned cache, enum kind kind, unsigned char fill)
{
	for (size_t i = 0; i < nlive; i++)
		if (live[i].p == p)
			fail("a live object handed out twice", p, i, 0);
	struct obj *o = &live[nlive++];
	*o = (struct obj){ p, size, cache, kind, fill };
	live_bytes += size;
	fill_obj(o);
}

/* Take entry i out of the model (after its checks). */
static struct obj take(size_t i)
{
	struct obj o = live[i];
	check_obj(&o);
	live[i] = live[--nlive];
	live_bytes -= o.size;
	return o;
}

static void free_cache_obj(struct obj *o)
{
	struct fcache *f = &caches[o->cache];
	if (f->ctor)
		memset(o->p, CTOR_BYTE, f->size);   /* back to the constructed state (SLUB rule) */
	uslab_cache_free(f->c, o->p);
}

static void release(struct obj *o)
{
	if (o->kind == K_CACHE)
		free_cache_obj(o);
#ifdef USLAB_HAVE_MALLOC
	else
		uslab_free(o->p);
#endif
}

/* ---- input reader ------------------------------------------------------------------ */

struct in {
	const uint8_t *d;
	size_t n, i;
};

static unsigned u8(struct in *in)
{
	return in->i < in->n ? in->d[in->i++] : 0;
}

static unsigned u16(struct in *in)
{
	return u8(in) | u8(in) << 8;
}

static bool more(const struct in *in)
{
	return in->i < in->n;
}

/* ---- operations -------------------------------------------------------------------- */

static int pick_cache(struct in *in)
{
	unsigned k = u8(in) % NCACHES;
	return caches[k].c ? (int)k : -1;
}

static void op_alloc(struct in *in, bool zero)
{
	int k = pick_cache(in);
	if (k < 0 || !room(caches[k].size))
		return;
	struct fcache *f = &caches[k];
	unsigned char *p = zero ? uslab_cache_zalloc(f->c) : uslab_cache_alloc(f->c);
	if (!p)
		fail("allocation failed", NULL, (size_t)k, 0);
	if (((uintptr_t)p & ((f->align ? f->align : 8) - 1)) != 0)
		fail("misaligned object", p, f->align, 0);
	for (size_t i = 0; zero && i < f->size; i++)
		if (p[i])
			fail("zalloc: nonzero byte", p, i, p[i]);
	for (size_t i = 0; !zero && f->ctor && i < f->size; i++)
		if (p[i] != CTOR_BYTE)
			fail("ctor cache: object not in its constructed state", p, i, p[i]);
	add(p, f->size, (unsigned)k, K_CACHE, (unsigned char)u8(in));
}

static void op_free(struct in *in)
{
	if (!nlive)
		return;
	struct obj o = take(u16(in) % nlive);
	release(&o);
}

static void op_alloc_bulk(struct in *in)
{
	int k = pick_cache(in);
	size_t n = u8(in) % BULK_MAX + 1;
	if (k < 0 || nlive + n > LIVE_MAX || live_bytes + n * caches[k].size > LIVE_BYTES_MAX)
		return;
	void *objs[BULK_MAX];
	if (uslab_cache_alloc_bulk(caches[k].c, n, objs) != n)
		fail("alloc_bulk returned less", NULL, (size_t)k, n);
	unsigned char fill = (unsigned char)u8(in);
	for (size_t i = 0; i < n; i++)
		add(objs[i], caches[k].size, (unsigned)k, K_CACHE, (unsigned char)(fill + i));
}

/* Free up to n objects of one cache with one free_bulk call. */
static void op_free_bulk(struct in *in)
{
	int k = pick_cache(in);
	size_t want = u8(in) % BULK_MAX + 1;
	if (k < 0)
		return;
	void *objs[BULK_MAX + 1];
	size_t n = 0;
	for (size_t i = 0; i < nlive && n < want;) {
		if (live[i].kind == K_CACHE && live[i].cache == (unsigned)k) {
			struct obj o = take(i);
			if (caches[k].ctor)
				memset(o.p, CTOR_BYTE, caches[k].size);
			objs[n++] = o.p;
		} else {
			i++;
		}
	}
	if (n && u8(in) & 1)
		objs[n++] = NULL;   /* NULL entries are skipped */
	uslab_cache_free_bulk(caches[k].c, n, objs);
}

static void op_shrink(struct in *in)
{
	int k = pick_cache(in);
	if (k >= 0)
		(void)uslab_cache_shrink(caches[k].c);
}

static void op_tune(struct in *in)
{
	static const char *const names[] = { "cpu_partial", "min_partial", "order", "cpu_queue" };
	static const unsigned long limits[] = { 200, 16, 4, 70 };   /* a little past cpu_queue's 64 */
	int k = pick_cache(in);
	unsigned t = u8(in) % 4;
	unsigned long v = u8(in) % (limits[t] + 1);
	if (k < 0)
		return;
	if (uslab_cache_tune_set(caches[k].c, names[t], v) == 0) {
		unsigned long got = ~0UL;
		if (uslab_cache_tune_get(caches[k].c, names[t], &got) != 0 || got != v)
			fail("tunable set but read back differently", caches[k].c, v, got);
	}
}

static void op_validate(struct in *in)
{
	int k = pick_cache(in);
	if (k >= 0 && uslab_cache_validate(caches[k].c) != 0)
		fail("validate reported problems mid-input", caches[k].c, (size_t)k, 0);
}

struct batch {
	struct obj o[32];
	size_t n;
};

static void *free_batch_thread(void *arg)
{
	struct batch *b = arg;
	for (size_t i = 0; i < b->n; i++)
		release(&b->o[i]);
	return NULL;   /* the thread's CPU parts go back at exit */
}

/* Free a few objects from another thread (remote frees, thread exit). */
static void op_thread_free(struct in *in)
{
	struct batch b;
	b.n = 0;
	size_t want = u8(in) % 32 + 1;
	while (b.n < want && nlive)
		b.o[b.n++] = take(u16(in) % nlive);
	pthread_t t;
	if (pthread_create(&t, NULL, free_batch_thread, &b) != 0) {
		free_batch_thread(&b);
		return;
	}
	pthread_join(t, NULL);
}

/* A cache that lives for part of an input: create (if none), or destroy
 * (its objects freed first, so destroy must be silent and succeed). */
static void op_tmp_cache(struct in *in)
{
	struct fcache *f = &caches[TMP];
	if (!f->c) {
		f->size = u16(in) % 3000 + 1;
		f->align = (size_t)1 << (u8(in) % 8);   /* 1 .. 128 */
		if (f->align < 8)
			f->align = 0;
		f->flags = (u8(in) & 1) ? FZPU : 0;
		f->c = uslab_cache_create(f->name, f->size, f->align, f->flags | USLAB_NO_MERGE, NULL);
		if (!f->c)
			fail("tmp cache create", NULL, f->size, f->align);
		return;
	}
	for (size_t i = 0; i < nlive;) {
		if (live[i].kind == K_CACHE && live[i].cache == TMP) {
			struct obj o = take(i);
			free_cache_obj(&o);
		} else {
			i++;
		}
	}
	if (uslab_cache_validate(f->c) != 0)
		fail("tmp cache validate", f->c, 0, 0);
	uslab_cache_destroy(f->c);
	f->c = NULL;
}

#ifdef USLAB_HAVE_MALLOC
static size_t malloc_size(struct in *in)
{
	unsigned sel = u8(in);
	switch (sel % 4) {
	case 0: return u8(in);                          /* 0..255 */
	case 1: return u16(in) % 4096;                  /* small classes */
	case 2: return u16(in) * 2UL;                   /* to 128 KiB: past the classes */
	default: return ((size_t)u8(in) << 16) + u16(in); /* to 16 MiB: large and huge */
	}
}

static void op_malloc(struct in *in, unsigned how)
{
	size_t n = malloc_size(in);
	if (!room(n))
		return;
	unsigned char *p = how == 1 ? uslab_calloc(1, n) : uslab_malloc(n);
	if (!p)
		fail("malloc failed", NULL, n, how);
	if (((uintptr_t)p & 7) != 0)
		fail("malloc: misaligned", p, n, 0);
	if (uslab_malloc_usable_size(p) < n)
		fail("usable size below the request", p, n, uslab_malloc_usable_size(p));
	for (size_t i = 0; how == 1 && i < n; i++)
		if (p[i])
			fail("calloc: nonzero byte", p, i, p[i]);
	add(p, n, 0, K_MALLOC, (unsigned char)u8(in));
}

static void op_realloc(struct in *in)
{
	size_t idx = SIZE_MAX;
	unsigned start = u16(in);
	for (size_t j = 0; j < nlive; j++) {
		size_t i = (start + j) % nlive;
		if (live[i].kind == K_MALLOC) {
			idx = i;
			break;
		}
	}
	size_t n = malloc_size(in);
	if (idx == SIZE_MAX || live_bytes - live[idx].size + n > LIVE_BYTES_MAX)
		return;
	struct obj o = take(idx);
	unsigned char *q = uslab_realloc(o.p, n);
	if (!q && n)
		fail("realloc failed", o.p, n, 0);
	if (!n) {
		/* glibc semantics: realloc(p, 0) frees p and returns NULL */
		if (q)
			uslab_free(q);
		return;
	}
	size_t keep = o.size < n ? o.size : n;
	for (size_t i = 0; i < keep; i++)
		if (q[i] != o.fill)
			fail("realloc lost the contents", q, i, q[i]);
	if (uslab_malloc_usable_size(q) < n)
		fail("realloc: usable size below the request", q, n, uslab_malloc_usable_size(q));
	add(q, n, 0, K_MALLOC, (unsigned char)u8(in));
}
#endif

/* ---- one input ---------------------------------------------------------------------- */

static void finish(void)
{
	while (nlive) {
		struct obj o = take(nlive - 1);
		release(&o);
	}
	if (live_bytes)
		fail("live bytes left in the model", NULL, live_bytes, 0);
	for (size_t k = 0; k < NCACHES; k++) {
		struct fcache *f = &caches[k];
		if (!f->c)
			continue;
		long v = uslab_cache_validate(f->c);
		if (v != 0)
			fail("validate after the input", f->c, k, (size_t)v);
		struct uslab_cache_info info;
		memset(&info, 0, sizeof info);
		info.version = USLAB_CACHE_INFO_VERSION;
		if (uslab_cache_get_info(f->c, &info) != 0 || info.active_objects != 0)
			fail("active objects after freeing everything", f->c, k, info.active_objects);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	if (!ready) {
		setup();
		ready = true;
	}
	struct in in = { data, size, 0 };
	while (more(&in)) {
		switch (u8(&in) % 16) {
		case 0: case 1: case 2: op_alloc(&in, false); break;
		case 3: op_alloc(&in, true); break;
		case 4: case 5: case 6: op_free(&in); break;
		case 7: op_alloc_bulk(&in); break;
		case 8: op_free_bulk(&in); break;
		case 9: op_shrink(&in); break;
		case 10: op_tune(&in); break;
		case 11: op_validate(&in); break;
		case 12: op_thread_free(&in); break;
		case 13: op_tmp_cache(&in); break;
#ifdef USLAB_HAVE_MALLOC
		case 14: op_malloc(&in, u8(&in) % 2); break;
		case 15: if (u8(&in) & 1) op_realloc(&in); else op_free(&in); break;
#else
		case 14: op_alloc(&in, false); break;
		case 15: op_free(&in); break;
#endif
		}
	}
	finish();
	return 0;
}
