/*
 * kmalloc: the size classes of the malloc family, as slab caches.
 *
 * Classes: 8 .. 128 in steps of 8, then four per power of two up to
 * KMALLOC_MAX_SIZE (160, 192, 224, 256, 320, ... 28672, 32768): at most 25 %
 * of a block is waste, and 8-byte steps keep small objects tight (as
 * mimalloc and tcmalloc do). Classes that are not a multiple of 16 are 8-byte
 * aligned (an object of 24 or 40 bytes cannot hold a type that needs 16);
 * every other class is 16-byte aligned, and the power-of-two classes are
 * aligned to their size, which aligned allocation relies on.
 *
 * The class caches are ordinary caches ("kmalloc-N"; they merge with user
 * caches of the same layout, as in the kernel). They are created together on
 * the first call, which may come before constructors run, from the dynamic
 * linker, or re-entrantly from inside the creation itself (a preloaded
 * library that hooks mmap and calls dlsym, which calls calloc). The
 * re-entrant calls are served from a static bootstrap arena that is never
 * freed; a failed creation (no memory) is retried on the next call.
 *
 * Locking: init_lock serializes creation; it is taken before cache_mutex
 * (init_lock -> cache_mutex -> ...), and fork.c holds it across fork.
 */
#include "kmalloc.h"
#include "fork.h"

#include <errno.h>
#include <string.h>

struct uslab_cache *kmalloc_caches[KMALLOC_NR_CLASSES];
uint8_t kmalloc_idx_small[KMALLOC_SMALL_MAX / 8 + 1];
uint8_t kmalloc_idx_big[KMALLOC_MAX_SIZE / 128 + 1];
uint32_t kmalloc_class_size[KMALLOC_NR_CLASSES];

static struct {
	pthread_mutex_t lock;                         /* init_lock: see the top of the file */
	struct uslab_cache *made[KMALLOC_NR_CLASSES]; /* created so far (init_lock) */
	_Atomic bool ready;                           /* kmalloc_caches is filled */
	_Atomic bool running;                         /* creation under way, by `owner` */
	pthread_t owner;
} K = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* ---- the bootstrap arena ------------------------------------------------ */

#define BOOT_SIZE (256 * 1024)
#define BOOT_HDR  16   /* the block's size, before it */
static char boot_arena[BOOT_SIZE] __attribute__((aligned(64)));
static _Atomic size_t boot_used;

static void *boot_alloc(size_t size, size_t align)
{
	align = MAX(align, (size_t)BOOT_HDR);
	size_t old = atomic_load_explicit(&boot_used, memory_order_relaxed), start, end;
	do {
		start = ALIGN_UP(old + BOOT_HDR, align);
		end = start + ALIGN_UP(MAX(size, (size_t)1), BOOT_HDR);
		if (size > BOOT_SIZE || end > BOOT_SIZE) {
			errno = ENOMEM;
			return NULL;
		}
	} while (!atomic_compare_exchange_weak_explicit(&boot_used, &old, end, memory_order_relaxed,
							memory_order_relaxed));
	*(size_t *)(boot_arena + start - BOOT_HDR) = end - start;
	return boot_arena + start;   /* static memory starts zeroed and is never reused */
}

bool kmalloc_is_boot(const void *p)
{
	return (const char *)p >= boot_arena && (const char *)p < boot_arena + BOOT_SIZE;
}

size_t kmalloc_boot_usable(const void *p)
{
	return *(const size_t *)((const char *)p - BOOT_HDR);
}

/* ---- classes and their creation ------------------------------------------ */

static void build_tables(void)
{
	unsigned n = 0;
	for (unsigned sz = 8; sz <= 128; sz += 8)
		kmalloc_class_size[n++] = sz;
	for (unsigned base = 128; base < KMALLOC_MAX_SIZE; base *= 2)
		for (unsigned q = 1; q <= 4; q++)
			kmalloc_class_size[n++] = base + q * (base / 4);
	unsigned c = 0;
	for (unsigned i = 0; i <= KMALLOC_SMALL_MAX / 8; i++) {
		while (kmalloc_class_size[c] < i * 8)
			c++;
		kmalloc_idx_small[i] = (uint8_t)c;
	}
	c = 0;
	for (unsigned i = 0; i <= KMALLOC_MAX_SIZE / 128; i++) {
		while (kmalloc_class_size[c] < i * 128)
			c++;
		kmalloc_idx_big[i] = (uint8_t)c;
	}
}

static bool in_init_here(void)
{
	return atomic_load_explicit(&K.running, memory_order_acquire) && pthread_equal(K.owner, pthread_self());
}

static struct uslab_cache *class_create(unsigned i)
{
	unsigned size = kmalloc_class_size[i];
	char name[USLAB_NAME_MAX + 1];
	fmt_buf(name, sizeof name, "kmalloc-%u", size);
	struct uslab_cache *s = uslab_cache_create(name, size, size % 16 ? 8 : 16, 0, NULL);
	if (!s || s->root)
		return s;   /* merged into another cache: its settings stand */
	/* The big classes: at least four objects a slab (the default order cap
	 * of 3 would give one), and few empty slabs kept, for RSS. */
	if (size > 8192) {
		unsigned order = 0;
		while ((PAGE_SIZE << order) < 4UL * size)
			order++;
		cache_tune_set(s, "order", order);
	}
	if (size >= 2048)
		cache_tune_set(s, "min_partial", 2);
	options_apply_cache(s);   /* USLAB_OPTIONS="kmalloc-64:..." still wins */
	return s;
}

bool kmalloc_init(void)
{
	if (atomic_load_explicit(&K.ready, memory_order_acquire))
		return true;
	pthread_mutex_lock(&K.lock);
	bool ok = true;
	if (atomic_load_explicit(&K.ready, memory_order_relaxed))
		goto out;
	K.owner = pthread_self();
	atomic_store_explicit(&K.running, true, memory_order_release);
	if (!kmalloc_class_size[0])
		build_tables();
	for (unsigned i = 0; i < KMALLOC_NR_CLASSES && ok; i++)
		if (!K.made[i] && !(K.made[i] = class_create(i)))
			ok = false;
	if (ok) {
		/* One allocation before publishing: this thread's CPU part and the
		 * first segment are made now, so that whatever they call re-entrant
		 * (pthread_setspecific, a hooked mmap) still finds the boot arena. */
		struct uslab_cache *s = cache_root(K.made[0]);
		void *x = cpu_alloc_fast_at(s, cpu_this(s), 0, __builtin_return_address(0));
		if (x)
			slab_free_fast(s, x);
		for (unsigned i = 0; i < KMALLOC_NR_CLASSES; i++)
			kmalloc_caches[i] = cache_root(K.made[i]);
		/* that allocation's per-CPU part was made before the classes
		 * were known: malloc's slots of its CPU get it now (before,
		 * malloc's sizes of that class on that CPU all took the slow
		 * path: 27% of sh6bench's allocations on the CPU that started) */
		pcpu_publish_kmalloc();
		atomic_store_explicit(&K.ready, true, memory_order_release);
	} else {
		errno = ENOMEM;
	}
	atomic_store_explicit(&K.running, false, memory_order_release);
out:
	pthread_mutex_unlock(&K.lock);
	return ok;
}

pthread_mutex_t *kmalloc_fork_lock(void)
{
	return &K.lock;
}

bool kmalloc_fork_cache(unsigned i, struct uslab_cache **s)
{
	if (i >= KMALLOC_NR_CLASSES)
		return false;
	*s = __atomic_load_n(&kmalloc_caches[i], __ATOMIC_RELAXED);
	return true;
}

/* ---- M_PERTURB ---------------------------------------------------------------- */

/* Relaxed: mallopt sets them between calls; a call racing with the change
 * may fill or not, as with glibc's perturb_byte. */
struct kmalloc_lims kmalloc_lim = { KMALLOC_SMALL_MAX + 1, KMALLOC_MAX_SIZE + 1, SEG_MAP_BITS };
int kmalloc_perturb;

void kmalloc_set_perturb(int value)
{
	bool on = value != 0;
	__atomic_store_n(&kmalloc_perturb, value, __ATOMIC_RELAXED);
	__atomic_store_n(&kmalloc_lim.small, on ? 0 : KMALLOC_SMALL_MAX + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&kmalloc_lim.mid, on ? 0 : KMALLOC_MAX_SIZE + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&kmalloc_lim.seg, on ? 0 : SEG_MAP_BITS, __ATOMIC_RELAXED);
}

void *kmalloc_perturb_alloc(void *p, size_t n)
{
	int v = __atomic_load_n(&kmalloc_perturb, __ATOMIC_RELAXED);
	if (p && v)
		memset(p, (v ^ 0xff) & 0xff, n);
	return p;
}

void kmalloc_perturb_free(void *p)
{
	int v = __atomic_load_n(&kmalloc_perturb, __ATOMIC_RELAXED);
	struct slab *d;
	struct page *b;
	size_t n;
	if (!v || !page_ours(p))
		return;
	if (slab_kind(d = slab_of(p)) == SK_SLAB)
		n = kmalloc_usable(p, "free");   /* (checked as free would) */
	else if ((b = large_block(p)) != NULL)
		n = large_usable(b);
	else
		return;
	memset(p, v & 0xff, n);
}

/* ---- allocation ------------------------------------------------------------ */

static NOINLINE void *kmalloc_filled(size_t size);

/* Any size, M_PERTURB aside: set up first if need be, then the class's
 * cache or a page/huge block. */
static inline __attribute__((always_inline)) void *kmalloc_plain(size_t size)
{
	if (unlikely(!atomic_load_explicit(&K.ready, memory_order_acquire))) {
		if (in_init_here())
			return boot_alloc(size, 16);
		if (!kmalloc_init())
			return NULL;
	}
	if (size <= KMALLOC_MAX_SIZE)
		return slab_alloc_fast_sized(kmalloc_caches[kmalloc_index(size)], size);
	return kmalloc_big(size, 0, NULL);
}

void *kmalloc_slow(size_t size)
{
	if (unlikely(__atomic_load_n(&kmalloc_perturb, __ATOMIC_RELAXED)))
		return kmalloc_filled(size);
	return kmalloc_plain(size);
}

/* M_PERTURB on: kmalloc()'s inline paths send every size here. */
static NOINLINE void *kmalloc_filled(size_t size)
{
	return kmalloc_perturb_alloc(kmalloc_plain(size), size);
}

void *kmalloc_class_slow(size_t size, struct cpu_cache *c)
{
	/* tail-called, and tail-calling: the slow path's return address is the API call's */
	if (unlikely(!atomic_load_explicit(&K.ready, memory_order_acquire)))
		return kmalloc_slow(size);
	struct uslab_cache *s = kmalloc_caches[kmalloc_index(size)];
	if (unlikely(c->cache != s))
		c = cpu_this(s);   /* cpu_empty: its first use; the slow path makes one */
	return cpu_alloc_fast(s, c, size);
}

void *kmalloc_big(size_t size, size_t align, bool *zeroed)
{
	if (unlikely(!atomic_load_explicit(&K.ready, memory_order_acquire))) {
		if (in_init_here()) {
			if (zeroed)
				*zeroed = true;
			return boot_alloc(size, align);
		}
		if (!kmalloc_init())
			return NULL;
	}
	if (size > MALLOC_MAX_REQUEST || align > MALLOC_MAX_REQUEST) {
		errno = ENOMEM;
		return NULL;
	}
	return large_alloc(size, align, zeroed);
}

void *kmalloc_aligned(size_t size, size_t align)
{
	if (align <= 8)
		return kmalloc(size);
	if (size > MALLOC_MAX_REQUEST || align > MALLOC_MAX_REQUEST) {
		errno = ENOMEM;
		return NULL;
	}
	if (unlikely(!atomic_load_explicit(&K.ready, memory_order_acquire))) {
		if (in_init_here())
			return boot_alloc(size, align);
		if (!kmalloc_init())
			return NULL;
	}
	size_t n = ALIGN_UP(MAX(size, (size_t)1), align);
	if (n <= KMALLOC_MAX_SIZE) {
		/* A class whose stride is a multiple of align has every object
		 * aligned (slabs are aligned to at least their stride's block);
		 * else the power-of-two class at or above n, aligned to its size. */
		unsigned i = kmalloc_index(n);
		if (kmalloc_class_size[i] % align) {
			size_t p2 = 1;
			while (p2 < n)
				p2 <<= 1;
			i = kmalloc_index(p2);
		}
		/* Debug caches put a red zone before each object: no alignment
		 * beyond 8 there, so aligned blocks come from whole pages. */
		if (likely(!kmalloc_caches[i]->debug))   /* n: a sampled (KFENCE) block keeps the alignment */
			return slab_alloc_fast_sized(kmalloc_caches[i], n);
	}
	return kmalloc_big(size, align, NULL);
}

/* ---- free and size of what is not a slab object ---------------------------- */

/* kfree() for a pointer in one of our segments (M_PERTURB on: kfree()'s
 * inline path sends every pointer to kfree_other()). */
static NOINLINE void kfree_ours(void *p)
{
	slab_free_fast_rec(slab_record(p), p, kfree_other);
}

void kfree_other(void *p, struct slab *d)
{
	if (unlikely(!p))
		return;   /* free(NULL): the inline path leaves it to us */
	if (unlikely(d == &slab_foreign) && unlikely(__atomic_load_n(&kmalloc_perturb, __ATOMIC_RELAXED)) &&
	    page_ours(p)) {
		kmalloc_perturb_free(p);
		kfree_ours(p);
		return;
	}
	if (slab_kind(d) == SK_TAIL) {   /* a later slot of a slab of several: its record's path */
		cpu_free_other(NULL, d, p);
		return;
	}
	struct page *b = large_block(p);
	if (b) {
		int e = errno;
		large_free(b, p);
		errno = e;
		return;
	}
	if (d == &slab_foreign) {
		if (kfence_owns(p)) {   /* a sampled object (kfence.c) */
			kfence_free(p, NULL, __builtin_return_address(0), USLAB_STAT_FREE_SLOWPATH);
			return;
		}
		if (kmalloc_is_boot(p))
			return;   /* bootstrap memory is never reused */
		int e = errno;
		bool ok = huge_free(p);
		errno = e;
		if (ok)
			return;
		if (huge_is_freed(p))
			report_fatal("double free at %p (huge block)", p);
		report_fatal("invalid free at %p (not allocated by uslab)", p);
	}
	if (slab_kind(d) == SK_SLAB)   /* a live slab's slot, which the inline path did not take */
		report_fatal("invalid free at %p (not the start of a live block)", p);
	b = page_block(p);
	if (page_is_freed(p)) {   /* a block whose pages are free now (a large block, a slab) */
		if (p == page_address(b))
			report_fatal("double free at %p (a freed block: its pages are free)", p);
		report_fatal("free of a freed block at %p (its pages are free: a double free, or a stale pointer)", p);
	}
	if (b && page_kind(b) == PK_LARGE)
		report_fatal("invalid free at %p (inside the large block at %p)", p, page_address(b));
	report_fatal("invalid free at %p (not the start of a live block)", p);
}

size_t kmalloc_usable(const void *p, const char *what)
{
	struct slab *d = slab_of(p);
	if (likely(slab_kind(d) == SK_SLAB)) {
		struct uslab_cache *s = d->cache;
		if (likely(slab_obj_valid(s, d, p)))
			return kmalloc_obj_usable(s, (void *)p);
		report_fatal("invalid %s at %p (not the start of an object of cache '%s')", what, p, s->name);
	}
	struct page *b = large_block(p);
	if (b)
		return large_usable(b);
	if (d == &slab_foreign) {
		if (kfence_owns(p))
			return kfence_usable(p, what);
		if (kmalloc_is_boot(p))
			return kmalloc_boot_usable(p);
		size_t n = huge_usable(p);
		if (n)
			return n;
		if (huge_is_freed(p))
			report_fatal("invalid %s at %p (freed huge block)", what, p);
		report_fatal("invalid %s at %p (not allocated by uslab)", what, p);
	}
	if (page_is_freed(p))
		report_fatal("invalid %s at %p (a freed block: its pages are free)", what, p);
	report_fatal("invalid %s at %p (not the start of a live block)", what, p);
}

/* ---- trim and accounting ------------------------------------------------------ */

unsigned long kmalloc_shrink_all(void)
{
	/* every cache, not only the classes: malloc_trim gives every empty
	 * slab back, and what other threads hold unused (decay.c) */
	return mem_take_back(NULL, true);
}

uint64_t kmalloc_slab_bytes_in_use(void)
{
	uint64_t sum = 0;
	if (!atomic_load_explicit(&K.ready, memory_order_acquire))
		return 0;
	for (unsigned i = 0; i < KMALLOC_NR_CLASSES; i++) {
		struct uslab_cache_info info;
		memset(&info, 0, sizeof info);
		info.version = USLAB_CACHE_INFO_VERSION;
		if (uslab_cache_get_info(kmalloc_caches[i], &info))
			continue;
		/* KFENCE's samples are counted at their usable size, the size
		 * asked for (malloc_usable_size says so), not the class's */
		uint64_t kbytes;
		uint64_t kn = kfence_cache_live_bytes(kmalloc_caches[i], &kbytes);
		kn = MIN(kn, info.active_objects);
		sum += (info.active_objects - kn) * info.slab_object_size + kbytes;
	}
	return sum;
}
