/*
 * Operation-sequence fuzzer (docs/testing.md row 59), for libFuzzer: the input
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
 *
 * Misuse (issue 12, docs/testing.md rows 19-21): double frees and frees of
 * what is not an object, checked against the model. An op byte 0xff is a misuse
 * op, run in at most one input in FUZZ_MISUSE_EVERY (default 200: about
 * 0.5% of inputs; each costs a fork, 5-25 ms, so the fuzzer loses a few
 * percent of its executions per second; 0 turns them off). The misuse runs
 * in a forked child whose stderr the parent reads through a pipe; the child
 * does the misuse, then the flush (uslab_cache_shrink of the cache named,
 * uslab_malloc_trim(0) for the malloc family), writing a marker after each.
 * It must die by SIGABRT with exactly one "uslab: fatal:" line holding the
 * text below, at the point below, or, where the table says "not caught",
 * exit normally with nothing from uslab. At start a self-test runs every
 * row from inputs made for it (50 cases), so each run checks the whole
 * table. The table is what the library does; the last column is checked
 * when the fuzzer runs with USLAB_OPTIONS=hardened (by hand: run.sh unsets
 * USLAB_OPTIONS):
 *
 *  # | misuse                                  | every mode                    | slub_debug cache | hardened
 *  --+-----------------------------------------+-------------------------------+------------------+------------------
 *  1 | free x; 0..3 frees of others of its     | "double free" at the free [a] | "double free" at | "double free
 *    | cache; free x (the child shrinks first) | (x's word: the mark, or a     | the free [a]     | (object not
 *    |                                         | free-list link)               |                  | live)" at the
 *    |                                         |                               |                  | free
 *  2 | the same with 4.. frees between         | "double free" at the free [a] | at the free [a]  | at the free
 *  3 | free x; shrink (x back on its slab's    | "double free" at the free     | "double free" at | "double free
 *    | free list); free x; another live object | (x's word is a free-list link | the free         | (object not
 *    | keeps x's slab                          | or the mark)                  |                  | live)" at once
 *  3b| the same, x was its slab's last object  | "free of a freed block" at the free (the shrink gave the slab
 *    |                                         | back: its pages are free), or "invalid free" when the shrink
 *    |                                         | also unmapped x's segment [b], every mode
 *  4 | x twice in one free_bulk                | "double free" at the free [a] | at the free [a]  | at the free
 *  5 | a pointer inside a cache object         | "invalid free" at the free, every mode
 *  6 | a stack, global or other heap's pointer | "invalid free" at the free, every mode
 *    | freed to a cache                        |
 *  7 | an object of cache A freed to cache B   | "wrong cache" (naming both) at the free, every mode;
 *    |                                         | not caught when B and A are one cache (merged: an alias)
 *  8 | malloc class block: free; any number of | "double free" at the free (glibc's tcache pattern, 20 frees
 *    | frees of its class; free (after         | between, included) [a]
 *    | malloc_trim)                            |
 *  9 | a large block (32 KiB .. 2 MiB) twice   | "double free at .. (a freed block ...)" at the free
 * 10 | a huge block (own mapping) twice        | "double free at .. (huge block)" at the free
 * 11 | uslab_free of a pointer inside a class, | "invalid free" at the free
 *    | large or huge block, of a stack, global |
 *    | or other heap's pointer                 |
 * 12 | uslab_cache_free of a malloc'd block    | class block: "wrong cache"; not caught when the class and the
 *    |                                         | cache are one (kmalloc classes made after a compatible cache
 *    |                                         | become its aliases: kmalloc-64 of fz_64); large, huge block:
 *    |                                         | "invalid free"
 * 13 | uslab_cache_free of a cache object      | not caught: freed to its cache (as the kernel's kfree())
 *
 * [a] or "free of a freed block" at the free: when the first free emptied
 *     x's slab (a debug cache frees to the slab at once; the modes without
 *     a sheaf free to the slab when x's is not the CPU part's) while the
 *     node already kept min_partial slabs, the slab is given back at once
 *     and the second free finds free pages there. Which of the two happens
 *     depends on where the objects of the parent's live set lie, which the
 *     model does not follow.
 * [b] a segment is unmapped when all of it is free: x's pointer is then
 *     not uslab's at all.
 * Time and state: an input's outcome depends on the input alone, so that
 * a crash artifact replayed alone fails as it failed in the run:
 *   - no background thread (uslab_background_thread(0) at the start);
 *   - the policy clock (decay of free pages, empty slabs and huge
 *     mappings, slab mode's reap, KFENCE's samples) is held
 *     (os_clock_hold) and moves only when an input says so (op 9 with its
 *     top bit: the clock moves by 0..65535 ms, then one decay pass runs, as
 *     the background thread would run it);
 *   - every input starts from the same allocator state: the tunables back
 *     at their creation values, the temporary cache destroyed, every cache
 *     shrunk and the malloc family trimmed (empty slabs, sheaves and free
 *     pages all given back), KFENCE's next sample kfence_ms away.
 * Rows 1-4 and 8 rest on the double-free mark (src/core/slab.h, FP_TAKEN):
 * a free object's free-pointer word holds a link or the mark, whichever
 * per-CPU mode holds it (CPU free list, owned slab, remote batch, SLQB
 * queue, sheaf, SLAB array, slab), and every free reads it first. The
 * fuzzer is built obfuscated (USLAB_HARDENED, the default), where the mark
 * is checked. KFENCE samples are freed to the pool, which reports on its
 * own (tests/test_kfence.c): the rows pick objects of slabs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "uslab.h"
#include "kfence.h"   /* kfence_owns(), kfence_due */
#include "os.h"       /* os_clock_hold(), os_clock_advance() */

uint64_t mem_decay_pass(void);   /* cpu/decay.c: one decay pass (what the background thread runs) */

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

static void cache_info(struct uslab_cache *c, struct uslab_cache_info *info)
{
	memset(info, 0, sizeof *info);
	info->version = USLAB_CACHE_INFO_VERSION;
	if (uslab_cache_get_info(c, info) != 0)
		fail("get_info", c, 0, 0);
}

/* The largest slab order any cache has had (slabs keep the order they were
 * made with): bounds which objects can share a slab (misuse rows 3, 3b). */
static unsigned max_order_seen;

static void saw_order(struct uslab_cache *c)
{
	struct uslab_cache_info info;
	cache_info(c, &info);
	if (info.order > max_order_seen)
		max_order_seen = info.order;
}

static const char *const tune_names[] = { "cpu_partial", "min_partial", "order", "cpu_queue" };
#define NTUNE (sizeof tune_names / sizeof tune_names[0])
static unsigned long tune_start[NCACHES][NTUNE];   /* each cache's tunables when made */
static bool tune_have[NCACHES][NTUNE];

static void misuse_setup(void);

static void setup(void)
{
	for (size_t i = 0; i < TMP; i++) {
		struct fcache *f = &caches[i];
		f->c = uslab_cache_create(f->name, f->size, f->align, f->flags, f->ctor);
		if (!f->c)
			fail("cache create", NULL, i, 0);
		saw_order(f->c);
		for (size_t t = 0; t < NTUNE; t++)
			tune_have[i][t] = uslab_cache_tune_get(f->c, tune_names[t], &tune_start[i][t]) == 0;
	}
	misuse_setup();
}

/* Every input starts from one allocator state (the file comment, "Time
 * and state"): tunables as made, no temporary cache, everything unused
 * given back, KFENCE's next sample a whole interval away. */
static void start_state(void)
{
	max_order_seen = 0;
	for (size_t i = 0; i < TMP; i++) {
		for (size_t t = 0; t < NTUNE; t++)
			if (tune_have[i][t] && uslab_cache_tune_set(caches[i].c, tune_names[t], tune_start[i][t]) != 0)
				fail("tunable reset", caches[i].c, t, tune_start[i][t]);
		uslab_cache_shrink(caches[i].c);
		saw_order(caches[i].c);
	}
#ifdef USLAB_HAVE_MALLOC
	uslab_malloc_trim(0);
#endif
	if (atomic_load_explicit(&kfence_due, memory_order_relaxed) != UINT64_MAX)
		atomic_store_explicit(&kfence_due, os_now_ms() + kfence_ms, memory_order_relaxed);
}

/* ---- the shadow model ----------------------------------------------------------- */

enum kind { K_CACHE, K_MALLOC };

/* Where a malloc-family block lives: a kmalloc class object, a large block
 * (whole pages of a segment), a huge block (a mapping of its own). Decided
 * by the usable size when the block is made (classes to 32 KiB, large to 2
 * MiB); a realloc that keeps the pointer keeps it, whatever the usable size
 * becomes (a huge block shrunk to 100 bytes is still a mapping). */
enum mkind { MB_CLASS, MB_LARGE, MB_HUGE };
#define CLASS_MAX (32UL * 1024)
#define LARGE_MAX (2UL * 1024 * 1024)

struct obj {
	unsigned char *p;
	size_t size;       /* bytes the caller may use (request) */
	unsigned cache;    /* index in caches[] (K_CACHE) */
	enum kind kind;
	unsigned char fill;
	enum mkind mkind;  /* K_MALLOC */
};

static enum mkind mkind_of(void *p)
{
	size_t u = uslab_malloc_usable_size(p);
	return u > LARGE_MAX ? MB_HUGE : u > CLASS_MAX ? MB_LARGE : MB_CLASS;
}

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

static struct obj *add(unsigned char *p, size_t size, unsigned cache, enum kind kind, unsigned char fill)
{
	for (size_t i = 0; i < nlive; i++)
		if (live[i].p == p)
			fail("a live object handed out twice", p, i, 0);
	struct obj *o = &live[nlive++];
	*o = (struct obj){ p, size, cache, kind, fill, MB_CLASS };
	live_bytes += size;
	fill_obj(o);
	return o;
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

/* Shrink a cache or, with the top bit, let time pass: the held clock moves
 * 0..65535 ms and one decay pass runs (what the background thread does). */
static void op_shrink(struct in *in)
{
	unsigned sel = u8(in);
	if (sel & 0x80) {
		os_clock_advance(u16(in));
		(void)mem_decay_pass();
		return;
	}
	struct fcache *f = &caches[sel % NCACHES];
	if (f->c)
		(void)uslab_cache_shrink(f->c);
}

static void op_tune(struct in *in)
{
	static const char *const *names = tune_names;
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
		if (t == 2 && v > max_order_seen)
			max_order_seen = (unsigned)v;
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
		saw_order(f->c);
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
	add(p, n, 0, K_MALLOC, (unsigned char)u8(in))->mkind = mkind_of(p);
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
	add(q, n, 0, K_MALLOC, (unsigned char)u8(in))->mkind = q == o.p ? o.mkind : mkind_of(q);
}
#endif

/* ---- misuse: double frees and frees of what is not an object ----------------------- */
/*
 * One misuse per child: fork, do it there, read the child's stderr through a
 * pipe, check against the table at the top (the rows below). The parent's
 * model and state are untouched. At most one input in misuse_every
 * (FUZZ_MISUSE_EVERY, default 200; 0: never) runs one, so the fuzzer keeps
 * its speed; an input replayed alone always does.
 */
enum row {
	R_RECENT,     /* 1: free, 0..3 others, free (main emptied first) */
	R_FAR,        /* 2: free, 4.. others, free, all in main */
	R_SLAB,       /* 3/3b: free, shrink, free */
	R_BULK,       /* 4: twice in one free_bulk */
	R_INTERIOR,   /* 5: inside an object */
	R_STACK,      /* 6: a stack, global or other heap's pointer, to a cache */
	R_WRONG,      /* 7/7b: an object to another cache */
	R_M_RECENT,   /* 8/8b: malloc class block: free, others, free */
	R_M_BIG,      /* 9/10: large or huge block freed twice */
	R_M_INVALID,  /* 11: uslab_free of an interior/stack/global/heap pointer */
	R_M_TO_CACHE, /* 12: a malloc block to a cache */
	R_C_TO_FREE,  /* 13: a cache object to uslab_free */
	NROWS
};
static const char *const row_name[NROWS] = {
	"1 double free, <=3 between", "2 double free, >=4 between", "3 free, shrink, free", "4 twice in free_bulk",
	"5 interior pointer", "6 stack/global/heap ptr", "7 wrong cache", "8 malloc double free",
	"9/10 large/huge twice", "11 uslab_free(non-block)", "12 malloc block to cache", "13 cache obj to free()",
};

enum when { AT_MISUSE, AT_FLUSH, AT_EITHER, NEVER };
static const char *const when_name[] = { "at the free", "at the flush", "at the free or the flush", "not caught" };

struct plan {
	enum row row;
	int sub;                  /* which pointer (R_STACK, R_M_INVALID) */
	struct uslab_cache *c;    /* the cache the free names (NULL: uslab_free) */
	unsigned char *x;         /* the object misused */
	size_t off;               /* R_INTERIOR, R_M_INVALID: bytes into it */
	void *others[BULK_MAX + 1];
	size_t nothers;           /* frees between (R_RECENT, R_FAR, R_M_RECENT); the bulk (R_BULK) */
	size_t fresh;             /* more frees between: objects the child allocates first */
	size_t fresh_size;        /* their size (R_M_RECENT) */
	enum when when;           /* expected */
	const char *text;         /* in the one "uslab: fatal:" line */
	const char *text2;        /* or this (NULL: no other) */
};

static bool hardened;             /* USLAB_OPTIONS has "hardened" */
static bool selftesting;          /* misuse_selftest() runs: no limit */
static unsigned long misuse_every = 200, execs, misuse_runs;
static bool misuse_this_input;
static double misuse_secs;
static unsigned long outcome[NROWS][4];
static char misuse_global[256];

#define MARK_MISUSE "fuzz_ops child: the misuse returned\n"
#define MARK_FLUSH "fuzz_ops child: the flush returned\n"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void misuse_report(void)
{
	if (!misuse_runs)
		return;
	fprintf(stderr, "fuzz_ops: %lu of %lu inputs ran a misuse child (%.1f%%), %.1f s in them (%.2f ms each); "
		"row: caught at the free / at the flush / not caught\n",
		misuse_runs, execs, 100.0 * (double)misuse_runs / (double)execs, misuse_secs,
		1000 * misuse_secs / (double)misuse_runs);
	for (int r = 0; r < NROWS; r++)
		fprintf(stderr, "fuzz_ops:   %-28s %lu / %lu / %lu\n", row_name[r], outcome[r][AT_MISUSE],
			outcome[r][AT_FLUSH], outcome[r][NEVER]);
}

static void misuse_setup(void)
{
	const char *o = getenv("USLAB_OPTIONS");
	hardened = o && strstr(o, "hardened");
	const char *e = getenv("FUZZ_MISUSE_EVERY");
	if (e && *e)
		misuse_every = strtoul(e, NULL, 10);
	atexit(misuse_report);
}

/* ---- what the library knows of caches -------------------------------------------- */

struct cstate {
	bool sheaves;       /* sheaf_capacity > 0 (not debug) */
	bool debug;         /* slub_debug on the cache */
	unsigned cap;       /* sheaf_capacity */
	unsigned min_order;
	char root[USLAB_NAME_MAX + 1];   /* the cache whose slabs it uses */
	bool shared;        /* an alias, or has aliases: others' objects share its slabs */
};

static void cstate_of(struct uslab_cache *c, struct cstate *st)
{
	struct uslab_cache_info info;
	cache_info(c, &info);
	st->debug = info.flags & (USLAB_CONSISTENCY_CHECKS | USLAB_RED_ZONE | USLAB_POISON | USLAB_STORE_USER |
				   USLAB_TRACE);
	st->cap = info.sheaf_capacity;
	st->sheaves = info.sheaf_capacity > 0 && !st->debug;
	st->min_order = info.min_order < info.order ? info.min_order : info.order;
	snprintf(st->root, sizeof st->root, "%s", info.alias_of[0] ? info.alias_of : info.name);
	st->shared = info.alias_of[0] || info.aliases;
}

/* The kmalloc class of a class block, from the JSON statistics (the
 * classes have no handles): its root cache and sheaf capacity. */
static char jbuf[1 << 19];
static size_t jlen;

static void jwrite(void *arg, const char *t)
{
	size_t n = strlen(t);
	if (jlen + n < sizeof jbuf) {
		memcpy(jbuf + jlen, t, n);
		jlen += n;
		jbuf[jlen] = 0;
	}
}

static bool class_state(size_t usable, char *root, size_t rootsz, unsigned *cap)
{
	char key[96];
	jlen = 0;
	jbuf[0] = 0;
	uslab_stats_print(jwrite, NULL, USLAB_STATS_JSON);
	snprintf(root, rootsz, "kmalloc-%zu", usable);
	snprintf(key, sizeof key, "{\"name\":\"kmalloc-%zu\",\"alias_of\":\"", usable);
	const char *a = strstr(jbuf, key);
	if (a) {   /* the class became an alias of another cache */
		a += strlen(key);
		snprintf(root, rootsz, "%.*s", (int)strcspn(a, "\""), a);
	}
	snprintf(key, sizeof key, "{\"name\":\"%s\",", root);
	const char *r = strstr(jbuf, key);
	const char *c = r ? strstr(r, "\"sheaf_capacity\":") : NULL;
	if (!c)
		return false;
	*cap = (unsigned)strtoul(c + strlen("\"sheaf_capacity\":"), NULL, 10);
	return true;
}

/* Does another live object share x's slab? 1 yes, 0 no, -1 cannot tell.
 * Slabs are buddy blocks of 4 KiB << order, aligned to their size: two
 * object starts in one block of the smallest order any slab of the cache
 * can have share a slab; no other start within the block of the largest
 * order any slab has had means no other live object in x's slab. */
static int slab_shared(size_t xi, const struct cstate *st)
{
	uintptr_t lo = (uintptr_t)4096 << st->min_order, hi = (uintptr_t)4096 << max_order_seen;
	uintptr_t x = (uintptr_t)live[xi].p;
	int r = 0;
	for (size_t j = 0; j < nlive; j++) {
		if (j == xi || live[j].kind != K_CACHE || live[j].cache != live[xi].cache)
			continue;
		uintptr_t y = (uintptr_t)live[j].p;
		if ((y & ~(lo - 1)) == (x & ~(lo - 1)))
			return 1;
		if ((y & ~(hi - 1)) == (x & ~(hi - 1)))
			r = -1;
	}
	return r;
}

/* ---- the child -------------------------------------------------------------------- */

static void mark(const char *m)
{
	ssize_t w = write(2, m, strlen(m));
	(void)w;
}

/* Back to the constructed state before a free, as always (ctor caches). */
static void restore(struct uslab_cache *c, void *p)
{
	for (size_t k = 0; k < NCACHES; k++)
		if (caches[k].c == c && caches[k].ctor && p)
			memset(p, CTOR_BYTE, caches[k].size);
}

static void cfree(struct uslab_cache *c, void *p)
{
	restore(c, p);
	uslab_cache_free(c, p);
}

static void flush(const struct plan *pl)
{
	if (pl->c)
		uslab_cache_shrink(pl->c);
#ifdef USLAB_HAVE_MALLOC
	else
		uslab_malloc_trim(0);
#endif
}

static void *bad_pointer(int sub, size_t off, char *stack)
{
	switch (sub % 3) {
	case 0: return stack + off % 64;
	case 1: return misuse_global + off % 64;
	default: {   /* the fuzzer's own heap (the sanitizer's malloc) */
		char *h = malloc(64);
		return h + off % 64;
	}
	}
}

static void child(const struct plan *pl)
{
	char stack[128];
	memset(stack, 0, sizeof stack);
	switch (pl->row) {
	case R_RECENT: case R_FAR: {
		void *o[BULK_MAX + 1];
		size_t n = pl->nothers;
		memcpy(o, pl->others, n * sizeof o[0]);
		for (size_t j = 0; j < pl->fresh; j++)
			o[n++] = uslab_cache_alloc(pl->c);
		uslab_cache_shrink(pl->c);   /* this thread's main sheaf is empty now */
		cfree(pl->c, pl->x);
		for (size_t j = 0; j < n; j++)
			cfree(pl->c, o[j]);
		cfree(pl->c, pl->x);
		break;
	}
	case R_SLAB:
		cfree(pl->c, pl->x);
		uslab_cache_shrink(pl->c);   /* x back on its slab's free list, or its slab given back */
		cfree(pl->c, pl->x);
		break;
	case R_BULK:
		for (size_t j = 0; j < pl->nothers; j++)
			restore(pl->c, pl->others[j]);
		uslab_cache_free_bulk(pl->c, pl->nothers, (void **)pl->others);
		break;
	case R_INTERIOR:
		uslab_cache_free(pl->c, pl->x + pl->off);
		break;
	case R_STACK:
		uslab_cache_free(pl->c, bad_pointer(pl->sub, pl->off, stack));
		break;
	case R_WRONG: case R_M_TO_CACHE:
		cfree(pl->c, pl->x);
		break;
#ifdef USLAB_HAVE_MALLOC
	case R_M_RECENT: {
		void *o[BULK_MAX + 1];
		size_t n = pl->nothers;
		memcpy(o, pl->others, n * sizeof o[0]);
		for (size_t j = 0; j < pl->fresh; j++)
			o[n++] = uslab_malloc(pl->fresh_size);
		uslab_malloc_trim(0);
		uslab_free(pl->x);
		for (size_t j = 0; j < n; j++)
			uslab_free(o[j]);
		uslab_free(pl->x);
		break;
	}
	case R_M_BIG:
		uslab_free(pl->x);
		uslab_free(pl->x);
		break;
	case R_M_INVALID:
		uslab_free(pl->sub < 0 ? pl->x + pl->off : bad_pointer(pl->sub, pl->off, stack));
		break;
	case R_C_TO_FREE:
		uslab_free(pl->x);
		break;
#endif
	default:
		break;
	}
	mark(MARK_MISUSE);
	flush(pl);
	mark(MARK_FLUSH);
}

/* Run pl in a child and check what happened against pl->when and pl->text. */
static void run_misuse(const struct plan *pl)
{
	static char out[65536];
	int fds[2];
	if (pipe(fds) != 0)
		fail("pipe", NULL, (size_t)errno, 0);
	fflush(NULL);
	double t0 = now_s();
	pid_t pid = fork();
	if (pid < 0)
		fail("fork", NULL, (size_t)errno, 0);
	if (pid == 0) {
		/* libFuzzer's handlers would record a crash of the child as the
		 * parent's: the default actions, and a time limit */
		static const int sigs[] = { SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGALRM, SIGINT, SIGTERM, SIGUSR1,
					    SIGUSR2, SIGXFSZ };
		for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
			signal(sigs[i], SIG_DFL);
		close(fds[0]);
		dup2(fds[1], 2);
		close(fds[1]);
		alarm(20);
		child(pl);
		_exit(0);
	}
	close(fds[1]);
	size_t len = 0;
	for (;;) {
		ssize_t n = read(fds[0], out + len, sizeof out - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == sizeof out - 1)
			break;
	}
	out[len] = 0;
	close(fds[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	misuse_secs += now_s() - t0;
	misuse_runs++;

	unsigned fatal = 0;
	const char *line = NULL;
	for (const char *q = out; (q = strstr(q, "uslab: fatal:")) != NULL; q++, fatal++)
		line = line ? line : q;
	bool after_misuse = strstr(out, MARK_MISUSE) != NULL, after_flush = strstr(out, MARK_FLUSH) != NULL;
	bool aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
	size_t ll = line ? strcspn(line, "\n") : 0;
	bool text = line && fatal == 1 && pl->text &&
		    (memmem(line, ll, pl->text, strlen(pl->text)) || (pl->text2 && memmem(line, ll, pl->text2, strlen(pl->text2))));
	enum when got = !aborted ? NEVER : after_misuse ? AT_FLUSH : AT_MISUSE;
	bool ok;
	switch (pl->when) {
	case NEVER: ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && after_flush && !strstr(out, "uslab:"); break;
	case AT_MISUSE: ok = aborted && !after_misuse && text; break;
	case AT_FLUSH: ok = aborted && after_misuse && !after_flush && text; break;
	default: ok = aborted && !after_flush && text; break;
	}
	if (!ok) {
		fprintf(stderr,
			"fuzz_ops: misuse row '%s' (cache %s, object %p, %zu others, sub %d, offset %zu%s): expected %s%s%s%s%s%s, "
			"got status %#x (%s%d)%s%s; the child's stderr:\n%s\n",
			row_name[pl->row], pl->c ? uslab_cache_name(pl->c) : "uslab_free", (void *)pl->x, pl->nothers,
			pl->sub, pl->off, hardened ? ", hardened" : "", when_name[pl->when], pl->when == NEVER ? "" : " ('",
			pl->when == NEVER ? "" : pl->text, pl->text2 ? "' or '" : "", pl->text2 ? pl->text2 : "",
			pl->when == NEVER ? "" : "')", status,
			WIFSIGNALED(status) ? "signal " : "exit ", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
			after_misuse ? ", the misuse returned" : "", after_flush ? ", the flush returned" : "", out);
		fail("misuse not handled as documented", pl->x, pl->row, pl->when);
	}
	outcome[pl->row][got]++;
}

/* ---- choosing a misuse ------------------------------------------------------------- */

/* A live object from index `start` on that pred accepts; SIZE_MAX if none. */
static size_t find_obj(size_t start, bool (*pred)(size_t i, void *arg), void *arg)
{
	for (size_t j = 0; j < nlive; j++) {
		size_t i = (start + j) % nlive;
		if (pred(i, arg) && !kfence_owns(live[i].p))   /* a sample has its own reports */
			return i;
	}
	return SIZE_MAX;
}

static bool is_cache_obj(size_t i, void *arg)
{
	(void)arg;
	return live[i].kind == K_CACHE;
}

static bool is_malloc_kind(size_t i, void *arg)
{
	return live[i].kind == K_MALLOC && live[i].mkind == *(enum mkind *)arg;
}

static bool is_malloc_big(size_t i, void *arg)
{
	(void)arg;
	return live[i].kind == K_MALLOC && live[i].mkind != MB_CLASS;
}

static bool is_malloc(size_t i, void *arg)
{
	(void)arg;
	return live[i].kind == K_MALLOC;
}

/* Up to `want` other live objects of x's cache (or of its class, for a
 * class block), into pl->others. */
static size_t pick_others(struct plan *pl, size_t xi, size_t want)
{
	size_t n = 0, xu = live[xi].kind == K_MALLOC ? uslab_malloc_usable_size(live[xi].p) : 0;
	for (size_t j = 0; j < nlive && n < want; j++) {
		if (j == xi || live[j].kind != live[xi].kind)
			continue;
		if (live[j].kind == K_CACHE ? live[j].cache == live[xi].cache
					    : live[j].mkind == MB_CLASS && uslab_malloc_usable_size(live[j].p) == xu)
			pl->others[n++] = live[j].p;
	}
	return n;
}

/* Decide the expectation from the table; false: the row does not apply here
 * (classic mode, no suitable object, a case the model cannot decide). */
static bool plan_cache_double(struct plan *pl, size_t xi, unsigned extra)
{
	struct cstate st;
	cstate_of(pl->c, &st);
	/* [a]: a first free that empties x's slab may give the slab back
	 * (the node keeps min_partial already): the second finds free pages */
	pl->text2 = "free of a freed block";
	pl->when = AT_MISUSE;   /* the mark: at the second free, every mode */
	pl->text = "double free";
	switch (pl->row) {
	case R_RECENT: case R_FAR: {
		/* x freed into an emptied CPU part, then the others (live
		 * ones, topped up by fresh ones), then x */
		size_t want = pl->row == R_RECENT ? extra % 4 : 4 + extra % 40;
		pl->nothers = pick_others(pl, xi, want);
		pl->fresh = pl->row == R_FAR || (extra >> 4) % 2 ? want - pl->nothers : 0;
		return true;
	}
	case R_SLAB: {
		if (st.shared)
			return false;   /* other caches' objects in its slabs */
		int sh = slab_shared(xi, &st);
		if (sh < 0)
			return false;
		if (!sh) {   /* x was its slab's last object: the slab is gone [b] */
			pl->text = "free of a freed block";
			pl->text2 = "invalid free";
		}
		return true;
	}
	case R_BULK: {   /* x twice among up to BULK_MAX - 2 others */
		size_t m = pick_others(pl, xi, extra % (BULK_MAX - 1)), n = m + 2;
		size_t a = (extra >> 6) % n, b = (extra >> 11) % n, k = 0;
		void *v[BULK_MAX + 1];
		if (a == b)
			b = (a + 1) % n;
		for (size_t i = 0; i < n; i++)
			v[i] = i == a || i == b ? pl->x : pl->others[k++];
		memcpy(pl->others, v, n * sizeof v[0]);
		pl->nothers = n;
		return true;
	}
	default:
		return false;
	}
}

static void op_misuse(struct in *in)
{
	unsigned r = u8(in), extra = u16(in);
	size_t start = u16(in);
	size_t off = u16(in);
	if (misuse_this_input || (!selftesting && (!misuse_every || misuse_runs * misuse_every >= execs)))
		return;
	struct plan pl;
	memset(&pl, 0, sizeof pl);
	pl.row = (enum row)(r % NROWS);
	pl.sub = (int)(r / NROWS);
	size_t xi = SIZE_MAX;
	switch (pl.row) {
	case R_RECENT: case R_FAR: case R_SLAB: case R_BULK: case R_INTERIOR: case R_WRONG:
		if (!nlive || (xi = find_obj(start, is_cache_obj, NULL)) == SIZE_MAX)
			return;
		pl.x = live[xi].p;
		pl.c = caches[live[xi].cache].c;
		if (pl.row == R_INTERIOR) {
			size_t size = caches[live[xi].cache].size;
			if (size < 2)
				return;
			pl.off = 1 + off % (size - 1);
			pl.when = AT_MISUSE;
			pl.text = "invalid free";
		} else if (pl.row == R_WRONG) {
			int k = (int)((unsigned)pl.sub % NCACHES);
			if (!caches[k].c || (unsigned)k == live[xi].cache)
				return;
			struct cstate a, b;
			cstate_of(pl.c, &a);
			cstate_of(caches[k].c, &b);
			pl.c = caches[k].c;
			pl.when = strcmp(a.root, b.root) ? AT_MISUSE : NEVER;   /* an alias is the same cache */
			pl.text = "wrong cache";
		} else if (!plan_cache_double(&pl, xi, extra)) {
			return;
		}
		break;
	case R_STACK: {
		int k = (int)(start % NCACHES);
		if (!caches[k].c)
			return;
		pl.c = caches[k].c;
		pl.off = off;
		pl.when = AT_MISUSE;
		pl.text = "invalid free";
		break;
	}
#ifdef USLAB_HAVE_MALLOC
	case R_M_RECENT: {
		enum mkind mk = MB_CLASS;
		if (!nlive || (xi = find_obj(start, is_malloc_kind, &mk)) == SIZE_MAX)
			return;
		pl.x = live[xi].p;
		char root[USLAB_NAME_MAX + 1];
		unsigned cap;
		if (!class_state(uslab_malloc_usable_size(pl.x), root, sizeof root, &cap))
			return;
		size_t want = extra % 24;   /* glibc's tcache pattern (20 between) included */
		pl.nothers = pick_others(&pl, xi, want);
		pl.fresh = want - pl.nothers;   /* topped up with fresh blocks of the class */
		pl.fresh_size = uslab_malloc_usable_size(pl.x);
		pl.when = AT_MISUSE;   /* the mark, every mode */
		pl.text = "double free";
		pl.text2 = "free of a freed block";   /* [a] */
		break;
	}
	case R_M_BIG:
		if (!nlive || (xi = find_obj(start, is_malloc_big, NULL)) == SIZE_MAX)
			return;
		pl.x = live[xi].p;
		pl.when = AT_MISUSE;
		pl.text = "double free";
		break;
	case R_M_INVALID:
		if (pl.sub % 2 == 0) {   /* inside a live block */
			if (!nlive || (xi = find_obj(start, is_malloc, NULL)) == SIZE_MAX)
				return;
			pl.x = live[xi].p;
			size_t u = uslab_malloc_usable_size(pl.x);
			if (u < 2)
				return;
			pl.off = 1 + (off | (size_t)extra << 16) % (u - 1);
			pl.sub = -1;
		} else {
			pl.off = off;
			pl.sub /= 2;
		}
		pl.when = AT_MISUSE;
		pl.text = "invalid free";
		break;
	case R_M_TO_CACHE: {
		int k = (int)((unsigned)pl.sub % NCACHES);
		if (!caches[k].c || !nlive || (xi = find_obj(start, is_malloc, NULL)) == SIZE_MAX)
			return;
		pl.x = live[xi].p;
		pl.c = caches[k].c;
		if (live[xi].mkind == MB_CLASS) {
			char root[USLAB_NAME_MAX + 1];
			unsigned cap;
			struct cstate st;
			if (!class_state(uslab_malloc_usable_size(pl.x), root, sizeof root, &cap))
				return;
			cstate_of(pl.c, &st);
			pl.when = strcmp(root, st.root) ? AT_MISUSE : NEVER;   /* the class is the cache's root */
			pl.text = "wrong cache";
		} else {
			pl.when = AT_MISUSE;
			pl.text = "invalid free";
		}
		break;
	}
	case R_C_TO_FREE:
		if (!nlive || (xi = find_obj(start, is_cache_obj, NULL)) == SIZE_MAX)
			return;
		pl.x = live[xi].p;
		pl.when = NEVER;   /* freed to its cache, as the kernel's kfree() */
		break;
#endif
	default:
		return;
	}
	misuse_this_input = true;
	run_misuse(&pl);
}

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
	if (caches[TMP].c) {   /* an input's temporary cache ends with it */
		uslab_cache_destroy(caches[TMP].c);
		caches[TMP].c = NULL;
	}
}

/* Every row of the table at start, from inputs made here (so that each run
 * checks them all, whatever its corpus): objects of a cache, three blocks of
 * msize bytes, a large and a huge block, then the misuse. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void misuse_case(unsigned k, unsigned nobj, unsigned msize, unsigned row, unsigned sub, unsigned extra,
			unsigned start, unsigned off)
{
	uint8_t b[128];
	size_t n = 0;
	for (unsigned i = 0; i < nobj; i++) {   /* op_alloc: cache k */
		b[n++] = 0;
		b[n++] = (uint8_t)k;
		b[n++] = (uint8_t)(0x40 + i);
	}
	for (unsigned i = 0; i < 3; i++) {      /* op_malloc: msize bytes */
		const uint8_t m[] = { 14, 0, 0, (uint8_t)msize, 0x50 };
		memcpy(b + n, m, sizeof m);
		n += sizeof m;
	}
	static const uint8_t big[] = { 14, 0, 3, 1, 0xa0, 0x86, 0x51,    /* 100000 bytes: large */
				       14, 0, 3, 48, 0, 0, 0x52 };       /* 3 MiB: huge */
	if (row >= R_M_RECENT && row != R_C_TO_FREE) {   /* (checking 3 MiB byte by byte takes a while) */
		memcpy(b + n, big, sizeof big);
		n += sizeof big;
	}
	uint8_t mis[] = { 0xff, (uint8_t)(row + NROWS * sub), (uint8_t)extra, (uint8_t)(extra >> 8), (uint8_t)start,
			  (uint8_t)(start >> 8), (uint8_t)off, (uint8_t)(off >> 8) };
	memcpy(b + n, mis, sizeof mis);
	n += sizeof mis;
	unsigned long before = misuse_runs;
	LLVMFuzzerTestOneInput(b, n);
	if (misuse_runs != before + 1)
		fail("self-test: the misuse case did not run", NULL, row, k);
}

static void misuse_selftest(void)
{
	selftesting = true;
	unsigned long runs = misuse_runs;
	double t0 = now_s();
	/* live[]: 0..nobj-1 the cache's objects, then 3 blocks of 100 bytes,
	 * the large block, the huge block */
	static const unsigned ks[] = { 3, 6 };   /* fz_ctor_96 (never merged), fz_dbg_48 (slub_debug) */
	for (unsigned i = 0; i < 2; i++) {
		unsigned k = ks[i];
		for (unsigned j = 0; j < 4; j++)
			misuse_case(k, 6, 100, R_RECENT, 0, j | (j & 1) << 4, 0, 0);   /* 0..3 between, fresh ones too */
		misuse_case(k, 6, 100, R_FAR, 0, 6, 0, 0);                           /* 10 between: 5 live, 5 fresh */
		misuse_case(k, 6, 100, R_FAR, 0, 16, 0, 0);                          /* 20 between: glibc's tcache test */
		misuse_case(k, 6, 100, R_SLAB, 0, 0, 0, 0);                          /* the slab stays */
		misuse_case(k, 1, 100, R_SLAB, 0, 0, 0, 0);                          /* its last object: the slab goes */
		misuse_case(k, 6, 100, R_BULK, 0, 4 | 1 << 6 | 2 << 11, 0, 0);        /* x at 1 and 2 */
		misuse_case(k, 6, 100, R_BULK, 0, 5 | 0 << 6 | 6 << 11, 0, 0);        /* x at 0 and 6 */
		misuse_case(k, 6, 100, R_INTERIOR, 0, 0, 0, 8);
		for (unsigned sub = 0; sub < 3; sub++)                          /* stack, global, heap */
			misuse_case(k, 6, 100, R_STACK, sub, 0, k, 5);
		misuse_case(k, 6, 100, R_WRONG, 2, 0, 0, 0);                         /* to fz_200_hw */
		misuse_case(k, 6, 100, R_C_TO_FREE, 0, 0, 0, 0);
	}
#ifdef USLAB_HAVE_MALLOC
	misuse_case(1, 6, 100, R_M_RECENT, 0, 2, 6, 0);    /* 2 between */
	misuse_case(1, 6, 100, R_M_RECENT, 0, 9, 6, 0);    /* 9 between: 2 live, 7 fresh */
	misuse_case(1, 6, 100, R_M_RECENT, 0, 20, 6, 0);   /* 20 between: glibc's tst-tcfree2 */
	misuse_case(1, 6, 100, R_M_BIG, 0, 0, 9, 0);       /* large */
	misuse_case(1, 6, 100, R_M_BIG, 0, 0, 10, 0);      /* huge */
	for (unsigned sub = 0; sub < 6; sub++)        /* inside a class, a large, a huge block; stack, global, heap */
		misuse_case(1, 6, 100, R_M_INVALID, sub, 0, 6 + (sub / 2) * 3 + (sub / 4), 24);
	for (unsigned i = 0; i < 3; i++)              /* a class, large, huge block to fz_64 and to fz_200_hw */
		for (unsigned k = 1; k <= 2; k++)
			misuse_case(1, 6, 100, R_M_TO_CACHE, k, 0, 6 + (i ? 2 + i : 0), 0);
	misuse_case(1, 6, 64, R_M_TO_CACHE, 1, 0, 6, 0);   /* kmalloc-64 is an alias of fz_64: accepted */
#endif
	fprintf(stderr, "fuzz_ops: self-test: %lu misuse cases as the table says%s (%.2f s)\n", misuse_runs - runs,
		hardened ? " (hardened)" : "", now_s() - t0);
	selftesting = false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	if (!ready) {
		ready = true;
		os_clock_hold(true);   /* the file comment, "Time and state" */
		/* and no uslab thread, whatever FUZZ_USLAB_OPTIONS says: its
		 * passes would run between an input's ops, on the real clock */
		if (uslab_background_thread(0) != 0)
			abort();
		setup();
		misuse_selftest();
	}
	start_state();
	struct in in = { data, size, 0 };
	execs++;
	misuse_this_input = false;
	while (more(&in)) {
		unsigned op = u8(&in);
		if (op == 0xff) {   /* one op byte in 256 (and at most one input in misuse_every) */
			op_misuse(&in);
			continue;
		}
		switch (op % 16) {
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
