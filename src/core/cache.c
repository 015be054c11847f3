/*
 * Caches: creation (sizes, alignment, slab order), destruction, shrinking,
 * and the alloc/free fast paths of the public API.
 *
 * cache_mutex protects the cache list, the id map, every cache's list of
 * CPU parts and the folding of their counters. It is held across flushes of
 * CPU parts (destroy, thread exit), so it comes first in the lock order:
 * cache_mutex -> node list_lock -> slab CAS -> page lock.
 */
#include "slab.h"

#include <errno.h>
#include <string.h>

pthread_mutex_t cache_mutex = PTHREAD_MUTEX_INITIALIZER;
struct uslab_cache *cache_list;

/* uslab's own metadata lives in caches that never use CPU parts. */
struct uslab_cache cache_cache;            /* struct uslab_cache */
struct uslab_cache cache_cpu_cache;        /* struct cpu_cache */
struct uslab_cache cache_thread_cache;     /* struct cpu_thread */

static uint64_t id_map[CACHE_ID_MAX / 64]; /* ids in use (cache_mutex) */

void (*_Atomic cache_list_hook)(void);

/* A cache was made or destroyed (no lock held): tell the export, so that a
 * reader never sees a process with live caches as having none. */
static void cache_changed(void)
{
	void (*hook)(void) = atomic_load_explicit(&cache_list_hook, memory_order_acquire);
	if (hook)
		hook();
}
static pthread_once_t init_once = PTHREAD_ONCE_INIT;


/* ---- sizes and orders ---------------------------------------------------- */

#define MIN_PARTIAL_DEFAULT 2UL   /* cache_tunables() */

/* The mode new caches get: slub_cpu_mode, else what
 * slub_sheaf_capacity=N meant before there were other modes (sheaves, and
 * classic for 0), else the default. */
static unsigned default_cpu_mode(void)
{
	if (opt.cpu_mode >= 0)
		return (unsigned)opt.cpu_mode;
	if (opt.sheaf_capacity >= 0)
		return opt.sheaf_capacity ? (unsigned)CPU_SHEAVES : (unsigned)CPU_CLASSIC;
	return CPU_MODE_DEFAULT;
}

/* Smallest order whose slab holds `bytes`. */
static unsigned get_order(size_t bytes)
{
	unsigned o = 0;
	while ((PAGE_SIZE << o) < bytes)
		o++;
	return o;
}

static unsigned order_objects(unsigned order, unsigned size)
{
	return (unsigned)((PAGE_SIZE << order) / size);
}

/* Smallest order in [min_order, max_order] that wastes at most 1/fract of
 * the slab; max_order + 1 if none. */
static unsigned calc_slab_order(unsigned size, unsigned min_order, unsigned max_order, unsigned fract)
{
	unsigned order;
	for (order = min_order; order <= max_order; order++) {
		size_t slab = PAGE_SIZE << order;
		if (slab % size <= slab / fract)
			break;
	}
	return order;
}

/*
 * The preferred order, in the spirit of the kernel's calculate_order(): at
 * most slub_max_order, and the least waste achievable, relaxing the waste
 * bound (1/16, 1/8, 1/4, 1/2) before giving up and using the smallest
 * order that holds one object. Every slab fills one 64 KiB slot at least
 * (floor_order >= SLAB_MIN_ORDER), which already holds 32 objects or more
 * up to 2 KiB; the kernel's rule of min_objects growing with the CPUs
 * would give objects of 5 KiB and more slabs of several slots, whose later
 * slots take the slower free path (page.h), so it applies only when
 * slub_min_objects asks for it.
 */
static unsigned calculate_order(unsigned size, unsigned floor_order)
{
	unsigned min_order = MAX(opt.min_order, floor_order);
	unsigned max_order = MAX(opt.max_order, min_order);   /* slub_min_order wins over slub_max_order */
	if (opt.min_objects) {
		unsigned min_objects = MIN(opt.min_objects, MAX(order_objects(max_order, size), 1U));
		min_order = MAX(min_order, get_order((size_t)min_objects * size));
	}
	min_order = MIN(min_order, max_order);
	while (min_order > floor_order && order_objects(min_order, size) > SLAB_MAX_OBJECTS)
		min_order--;
	for (unsigned fract = 16; fract > 1; fract /= 2) {
		unsigned order = calc_slab_order(size, min_order, max_order, fract);
		if (order <= max_order)
			return order;
	}
	return MAX(get_order(size), floor_order);
}

static void set_order(struct uslab_cache *s, unsigned order)
{
	unsigned objects = MIN(order_objects(order, s->size), SLAB_MAX_OBJECTS);
	atomic_store_explicit(&s->oo, order << 16 | objects, memory_order_relaxed);
}

/* Lay out objects and choose orders (calculate_sizes). */
static int cache_layout(struct uslab_cache *s, size_t size, size_t align, unsigned long flags)
{
	if (!align)
		align = size >= 16 ? 16 : 8;
	if (flags & USLAB_HWCACHE_ALIGN) {
		size_t ralign = CACHE_LINE;
		while (size <= ralign / 2)
			ralign /= 2;
		align = MAX(align, ralign);
	}
	align = MAX(align, sizeof(void *));
	size_t stride = ALIGN_UP(size, sizeof(void *));
	s->debug = s->internal ? 0 : core_hooks.debug_flags_for(s->name, flags);
	if (s->debug) {
		stride = core_hooks.debug_layout(s, size, align);
	} else if (s->ctor || USLAB_TRACKED) {
		/* The free pointer must not clobber constructed state (or, in a
		 * tracked build, a poisoned free object): after the object. */
		s->offset = (unsigned)stride;
		stride += sizeof(void *);
	} else {
		/* In the object's first cache line, one word in (objects of 16 bytes
		 * and more are 16-byte aligned unless their cache asks for less, so
		 * byte 8 is in the first line):
		 * free() prefetches that line for writing before it has found the
		 * cache, and reads and marks the word there; an allocation scrubs it
		 * in the line the program writes first. SLUB puts it mid-object
		 * (a small overflow of the previous object misses it); there it sat
		 * in another line than the prefetch's for every object of 128 bytes
		 * and more: churn 1.31 -> 1.09 s, xfree 0.28 -> 0.26, mthread 0.26 ->
		 * 0.24 with it here (medians of 11, 7, 7 interleaved). A word in, so
		 * that an off-by-one past the previous object lands on data, not on
		 * the link; links are encoded, so an overflow that reaches one is
		 * caught when the link is used, as it was mid-object. */
		s->offset = (unsigned)(MIN(size / 2, 8) & ~(sizeof(void *) - 1));
	}
	stride = ALIGN_UP(stride, align);
	/* Slabs are aligned to their size, so big alignments need big slabs;
	 * and every slab fills one slot at least, so that its record is found
	 * by a mask and a shift (page.h). */
	unsigned floor_order = align > PAGE_SIZE ? get_order(align) : 0;
	floor_order = MAX(floor_order, get_order(stride));
	floor_order = MAX(floor_order, (unsigned)SLAB_MIN_ORDER);
	if (floor_order > PAGE_MAX_ORDER)
		return -1;
	s->object_size = (unsigned)size;
	s->size = (unsigned)stride;
	s->align = (unsigned)align;
	slab_div_init((uint32_t)stride, &s->divinv, &s->divk);
	s->min_order = (uint8_t)floor_order;
	s->min_objects = (uint16_t)MIN(order_objects(s->min_order, s->size), SLAB_MAX_OBJECTS);
	set_order(s, calculate_order(s->size, floor_order));
	s->flags = flags;
	return 0;
}

/* The default sheaf capacity: the most objects that fill a storage bucket
 * (8-byte pointers after a 32-byte header: 12, 28, 60, 124, 252, 508 in
 * 128 .. 4096 bytes) and hold at most SHEAF_OBJ_BYTES of objects, at least
 * 12; big objects get small sheaves (at most 32 KiB of objects each, at
 * least two objects). A sheaf so holds about as many bytes whatever its
 * object size, and small objects as many objects as their runs need:
 * MicroQuill's sh6bench (runs of 50-250 blocks of one size, most under
 * 100 B, freed a ring at a time) ran 0.73 s with the old 60/28/12, 0.57 s
 * with 128 objects in every sheaf and 0.46 with 255, peak RSS unchanged
 * (bench/results/2026-11-26-sheaf-bytes.md). What a CPU keeps (two
 * sheaves per cache it used, and the barn's) stays bounded by bytes. */
#define SHEAF_OBJ_BYTES 16384U
static unsigned sheaf_default_capacity(unsigned size)
{
	if (size <= 2048) {
		unsigned cap = 12;
		for (unsigned c = 28; c <= SHEAF_MAX_CAPACITY && c * size <= SHEAF_OBJ_BYTES; c = 2 * c + 4)
			cap = c;
		return cap;
	}
	return MAX(2U, MIN(6U, 32768U / size));
}

/* Defaults of the kernel's set_cpu_partial() (the sizes of today's kernel,
 * which raised the 2011 thread's 2/6/13/30); min_partial in bytes rather
 * than slabs: the kernel's set_min_partial() keeps 5 to 10 slabs of 4 to
 * 32 KiB, and 2 slabs of a 64 KiB slot or more keep as much (10 would keep
 * 640 KiB of empty slabs per cache: 25 MiB over the kmalloc classes after
 * a burst of frees); the barn's empty bound as the kernel's (10), its
 * full bound what demand may earn it (sheaf.c: always 10, the kernel's,
 * up to BARN_FULL_DEFAULT). */
static void cache_tunables(struct uslab_cache *s)
{
	unsigned size = s->size;
	unsigned cp = size >= PAGE_SIZE ? 6 : size >= 1024 ? 24 : size >= 256 ? 52 : 120;
	if (opt.cpu_partial >= 0)
		cp = (unsigned)opt.cpu_partial;
	TUNE_SET(s, cpu_partial, cp);
	TUNE_SET(s, min_partial, MIN_PARTIAL_DEFAULT);
	unsigned sc = opt.sheaf_capacity >= 0 ? (unsigned)opt.sheaf_capacity : sheaf_default_capacity(size);
	TUNE_SET(s, sheaf_capacity, s->debug || s->internal ? 0 : sc);   /* debug caches: no sheaves */
	TUNE_SET(s, cpu_mode, s->debug || s->internal ? (unsigned)CPU_CLASSIC : default_cpu_mode());   /* no parts at all */
	/* SLQB's calculate_sizes(): freebatch by size, hiwater four times it */
	unsigned long fb = MAX(4UL * PAGE_SIZE / size, MIN(256UL, 64UL * PAGE_SIZE / size));
	TUNE_SET(s, freebatch, (unsigned)MAX(1UL, fb));
	TUNE_SET(s, hiwater, TUNE(s, freebatch) << 2);
	TUNE_SET(s, barn_full_max, opt.barn_full >= 0 ? (unsigned)opt.barn_full : (unsigned)BARN_FULL_DEFAULT);
	TUNE_SET(s, barn_empty_max, opt.barn_empty >= 0 ? (unsigned)opt.barn_empty : 10U);
	/* slab mode: its slabs' layout and enable_cpucache()'s defaults */
	core_hooks.array_cache_init(s);
}

static void cache_setup(struct uslab_cache *s, const char *name, void (*ctor)(void *))
{
	size_t n = strlen(name);
	memcpy(s->name, name, n + 1);
	s->ctor = ctor;
	s->real = s;
	s->fp_key = (uintptr_t)os_random();
	pthread_mutex_init(&s->node.list_lock, NULL);
	pthread_mutex_init(&s->node.barn.lock, NULL);
}

static void internal_cache(struct uslab_cache *s, const char *name, size_t size, size_t align)
{
	cache_setup(s, name, NULL);
	s->internal = true;   /* before the layout: uslab's own metadata is never debugged */
	cache_layout(s, size, align, 0);
	cache_tunables(s);
	s->id = UINT32_MAX;
}

static void init_once_fn(void)
{
	options_init();
	fork_init();
	for (void (*const *f)(void) = core_hooks.init; *f; f++)
		(*f)();   /* KFENCE, the export, the background thread (glue.c) */
	internal_cache(&cache_cache, "uslab_cache", sizeof(struct uslab_cache), 0);
	/* line-aligned: the fast paths' fields share one line */
	internal_cache(&cache_cpu_cache, "uslab_cpu_cache", core_hooks.part_size, core_hooks.part_align);
	internal_cache(&cache_thread_cache, "uslab_thread", core_hooks.thread_size, 0);
	static const char *const sheaf_names[SHEAF_CACHES] = {
		"uslab_sheaf_128", "uslab_sheaf_256", "uslab_sheaf_512",
		"uslab_sheaf_1024", "uslab_sheaf_2048", "uslab_sheaf_4096",
	};
	for (unsigned k = 0; k < SHEAF_CACHES; k++)
		internal_cache(&cache_sheaf_cache[k], sheaf_names[k], 128U << k, 64);
}

void cache_init(void)
{
	pthread_once(&init_once, init_once_fn);
}

/* ---- ids and the cache list (cache_mutex held) -------------------------- */

static int id_get_locked(void)
{
	for (unsigned w = 0; w < CACHE_ID_MAX / 64; w++) {
		if (id_map[w] != ~0ULL) {
			unsigned b = (unsigned)__builtin_ctzll(~id_map[w]);
			id_map[w] |= 1ULL << b;
			return (int)(w * 64 + b);
		}
	}
	return -1;
}

static void id_put_locked(unsigned id)
{
	id_map[id / 64] &= ~(1ULL << (id % 64));
}

/* ---- the API ------------------------------------------------------------ */

/*
 * A real cache that can serve objects of this layout (find_mergeable): no
 * constructors, no debugging, neither asks not to merge (nor is tuned by
 * name in USLAB_OPTIONS), the same stride give or take
 * less than a pointer, a stride that keeps every object aligned as asked.
 */
static struct uslab_cache *find_mergeable_locked(const struct uslab_cache *want)
{
	if (opt.nomerge || want->ctor || want->debug || (want->flags & USLAB_NO_MERGE) || want->align > PAGE_SIZE ||
	    options_names_cache(want->name))   /* tuned by name: it gets a cache of its own */
		return NULL;
	for (struct uslab_cache *s = cache_list; s; s = s->next) {
		if (s->ctor || s->debug || (s->flags & USLAB_NO_MERGE) || s->destroyed || s->size < want->size ||
		    s->size - want->size >= sizeof(void *) || s->size % want->align)
			continue;
		/* tracked builds poison whole free objects: the alias's object
		 * must end before the root's free pointer */
		if (USLAB_TRACKED && want->object_size > s->offset)
			continue;
		return s;
	}
	return NULL;
}

struct uslab_cache *uslab_cache_create(const char *name, size_t size, size_t align,
				       unsigned long flags, void (*ctor)(void *))
{
	if (!name || !*name || strnlen(name, USLAB_NAME_MAX + 1) > USLAB_NAME_MAX || !size ||
	    size > USLAB_CACHE_MAX_SIZE || (align & (align - 1)) || align > USLAB_CACHE_MAX_SIZE ||
	    (flags & ~(USLAB_HWCACHE_ALIGN | USLAB_NO_MERGE | USLAB_CONSISTENCY_CHECKS | USLAB_RED_ZONE |
		       USLAB_POISON | USLAB_STORE_USER | USLAB_TRACE))) {
		errno = EINVAL;
		return NULL;
	}
	cache_init();
	struct uslab_cache *s = slab_alloc_nocpu(&cache_cache);
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	memset(s, 0, sizeof *s);
	cache_setup(s, name, ctor);
	if (cache_layout(s, size, align, flags)) {
		slab_free_nocpu(&cache_cache, s);
		errno = EINVAL;
		return NULL;
	}
	pthread_mutex_lock(&cache_mutex);
	struct uslab_cache *root = find_mergeable_locked(s);
	if (root) {
		/* An alias: what the fast paths read comes from the root. */
		s->root = root;
		s->real = root;
		s->id = root->id;
		s->size = root->size;
		s->offset = root->offset;
		s->divinv = root->divinv;
		s->divk = root->divk;
		s->fp_key = root->fp_key;
		atomic_store_explicit(&s->pcpu_slot, atomic_load_explicit(&root->pcpu_slot, memory_order_relaxed),
				      memory_order_relaxed);
		atomic_store_explicit(&s->oo, cache_oo(root), memory_order_relaxed);
		s->alias_next = root->aliases;
		root->aliases = s;
		root->refs++;
		pthread_mutex_unlock(&cache_mutex);
		cache_changed();
		return s;
	}
	int id = id_get_locked();
	if (id < 0) {
		pthread_mutex_unlock(&cache_mutex);
		slab_free_nocpu(&cache_cache, s);
		errno = ENOMEM;
		return NULL;
	}
	s->id = (unsigned)id;
	s->refs = 1;
	cache_tunables(s);
	options_apply_cache(s);
	core_hooks.parts_retune(s);   /* (which backend its parts run on) */
	core_hooks.debug_cache_made(s);
	s->next = cache_list;
	if (cache_list)
		cache_list->prev = s;
	cache_list = s;
	pthread_mutex_unlock(&cache_mutex);
	cache_changed();
	return s;
}

/* Drop one reference to a real cache; the last one destroys it unless
 * objects are live. `named` is the cache the caller destroyed, for the
 * report. Called and returns with cache_mutex held. */
static void cache_put_locked(struct uslab_cache *s, struct uslab_cache *named)
{
	if (--s->refs)
		return;
	core_hooks.parts_orphan(s);   /* the CPU parts and the barn */
	unsigned long live = slab_count_live(s) + core_hooks.sampled_live(s);   /* sampled objects too */
	if (live) {
		s->refs = 1;   /* left in place, usable, as the kernel does */
		s->destroyed = false;
		report_line("cache '%s': destroy with %lu live object%s; cache left in place", named->name, live,
			    live == 1 ? "" : "s");
		core_hooks.debug_report_live(s);   /* (with slub_debug U: where they came from) */
		return;
	}
	if (s->prev)
		s->prev->next = s->next;
	else
		cache_list = s->next;
	if (s->next)
		s->next->prev = s->prev;
	id_put_locked(s->id);
	core_hooks.parts_release(s);
	slab_shrink_node(s);
	core_hooks.debug_cache_gone(s);
	pthread_mutex_destroy(&s->node.list_lock);
	pthread_mutex_destroy(&s->node.barn.lock);
	slab_free_nocpu(&cache_cache, s);
}

void uslab_cache_destroy(struct uslab_cache *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&cache_mutex);
	struct uslab_cache *root = s->root;
	if (root) {
		struct uslab_cache **pp = &root->aliases;
		while (*pp != s)
			pp = &(*pp)->alias_next;
		*pp = s->alias_next;
		cache_put_locked(root, s);
		slab_free_nocpu(&cache_cache, s);
	} else {
		s->destroyed = true;
		cache_put_locked(s, s);
	}
	pthread_mutex_unlock(&cache_mutex);
	cache_changed();
}

int uslab_cache_shrink(struct uslab_cache *s)
{
	s = cache_root(s);
	core_hooks.take_back(s, true);   /* ours, the barn, empty slabs, others' spares */
	page_release_all();
	return atomic_load_explicit(&s->node.nr_slabs, memory_order_relaxed) != 0;
}

const char *uslab_cache_name(const struct uslab_cache *s) { return s->name; }
size_t uslab_cache_size(const struct uslab_cache *s) { return s->object_size; }

/* ---- tunables ------------------------------------------------------------ */

/* The tunables, declared once: name, field, largest value. */
#define TUNABLES(X) \
	X("cpu_mode",       cpu_mode,       CPU_NR_MODES - 1) \
	X("freebatch",      freebatch,      65535) \
	X("hiwater",        hiwater,        1U << 20) \
	X("sheaf_capacity", sheaf_capacity, SHEAF_MAX_CAPACITY) \
	X("barn_full",      barn_full_max,  BARN_MAX_SHEAVES) \
	X("barn_empty",     barn_empty_max, BARN_MAX_SHEAVES) \
	X("cpu_partial",    cpu_partial,    65535) \
	X("min_partial",    min_partial,    1024) \
	X("limit",          limit,          SHEAF_MAX_CAPACITY) \
	X("batchcount",     batchcount,     SHEAF_MAX_CAPACITY) \
	X("sharedfactor",   sharedfactor,   BARN_MAX_SHEAVES)

bool cache_tune_known(const char *name, size_t n)
{
#define X(nm, field, hi) if (n == sizeof(nm) - 1 && !memcmp(name, nm, n)) return true;
	TUNABLES(X)
#undef X
	return n == 5 && !memcmp(name, "order", 5);
}

int cache_tune_set(struct uslab_cache *s, const char *name, unsigned long v)
{
	if (!strcmp(name, "order")) {
		/* any order that holds an object, up to the largest block */
		if (v < s->min_order || v > PAGE_MAX_ORDER)
			return -1;
		set_order(s, (unsigned)v);
		core_hooks.array_set_order(s, (unsigned)v);   /* slab mode's new slabs too */
		return 0;
	}
	if (!strcmp(name, "sheaf_capacity") && v && s->debug)
		return -1;   /* debug caches keep no objects per CPU */
	if (!strcmp(name, "cpu_mode") && v && s->debug)
		return -1;   /* debug caches keep no objects per CPU */
	if (!strcmp(name, "freebatch") && !v)
		return -1;
	/* slab mode's array: the kernel's do_tune_cpucache() rules (limit and
	 * batchcount at least 1, batchcount at most limit); a limit below
	 * the batchcount lowers it as enable_cpucache() would */
	if (!strcmp(name, "limit") && v >= 1 && v <= SHEAF_MAX_CAPACITY && TUNE(s, batchcount) > v)
		TUNE_SET(s, batchcount, (unsigned)(v + 1) / 2);
	if (!strcmp(name, "limit") && !v)
		return -1;
	if (!strcmp(name, "batchcount") && (!v || v > TUNE(s, limit)))
		return -1;
	/* as before there were other modes: a sheaf capacity selects sheaves,
	 * 0 classic mode */
	if (!strcmp(name, "sheaf_capacity") && v <= SHEAF_MAX_CAPACITY && !s->debug)
		TUNE_SET(s, cpu_mode, v ? (unsigned)CPU_SHEAVES : (unsigned)CPU_CLASSIC);
#define X(nm, field, hi) \
	if (!strcmp(name, nm)) { \
		if (v > (hi)) \
			return -1; \
		TUNE_SET(s, field, v); \
		return 0; \
	}
	TUNABLES(X)
#undef X
	return -1;
}

int uslab_cache_tune_set(struct uslab_cache *s, const char *name, unsigned long value)
{
	if (!s || !name) {
		errno = EINVAL;
		return -1;
	}
	cache_init();
	pthread_mutex_lock(&cache_mutex);
	int r = cache_tune_set_live(cache_root(s), name, value);
	pthread_mutex_unlock(&cache_mutex);
	if (r) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

int cache_tune_set_live(struct uslab_cache *s, const char *name, unsigned long v)
{
	if (cache_tune_set(s, name, v))
		return -1;
	if (!strcmp(name, "cpu_mode") || !strcmp(name, "sheaf_capacity"))
		core_hooks.parts_retune(s);   /* parts of CPUs take it up now, not at their next slow path */
	return 0;
}

int uslab_cache_tune_get(struct uslab_cache *s, const char *name, unsigned long *value)
{
	if (!s || !name || !value)
		goto inval;
	s = cache_root(s);
	if (!strcmp(name, "order")) {
		unsigned o = oo_order(cache_oo(s)), objs;
		if (cache_cpu_mode(s) == CPU_SLAB)
			core_hooks.array_slab_shape(s, &o, &objs);   /* what new slabs get in slab mode */
		*value = o;
		return 0;
	}
#define X(nm, field, hi) \
	if (!strcmp(name, nm)) { \
		*value = TUNE(s, field); \
		return 0; \
	}
	TUNABLES(X)
#undef X
inval:
	errno = EINVAL;
	return -1;
}

