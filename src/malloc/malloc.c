/*
 * The malloc family with C and glibc semantics, as hidden mf_* functions
 * (override.c gives them the libc names; the uslab_* API below wraps them).
 *
 * Decisions (docs/testing.md, "Decisions that differ"):
 *   - realloc(p, 0) frees p and returns NULL, as glibc; realloc(NULL, n) is
 *     malloc(n). realloc keeps the pointer whenever the new size fits the
 *     block's usable size; a failed realloc leaves the old block intact.
 *   - Impossible sizes (above PTRDIFF_MAX less a little, or n * size
 *     overflowing) return NULL with ENOMEM without touching anything.
 *   - Every failure sets errno, as glibc: ENOMEM when memory cannot be had
 *     or the size is impossible, EINVAL for a bad alignment.
 *   - posix_memalign: EINVAL for an alignment that is not a power of two
 *     multiple of sizeof(void *), *out and errno untouched; ENOMEM returned
 *     and set in errno. aligned_alloc: EINVAL for an alignment that is not
 *     a power of two (0 included), as glibc 2.38 and C17 (glibc 2.36
 *     treats it as memalign). memalign: alignments above SIZE_MAX/2+1 are
 *     EINVAL, other non-powers of two are rounded up (as glibc). A power of
 *     two too large to be had is ENOMEM everywhere.
 *   - usable size is the class stride (slab), the kept pages (large) or the
 *     page-rounded request (huge).
 *   - Misuse is reported and aborts: free/realloc/malloc_usable_size of a
 *     pointer that is not the start of a live block ("invalid free"), an
 *     immediate double free ("double free").
 *   - free never changes errno.
 *   - mallopt takes glibc's parameters (mf_mallopt below; README has the
 *     table). M_PERTURB, as glibc: allocations but calloc's are filled with
 *     the byte's complement over the size asked, frees fill the block's
 *     usable bytes with the byte (huge blocks excepted: their mappings are
 *     not touched, as glibc leaves its mmapped chunks). When it is off it
 *     costs nothing: the inline paths compare sizes and segments with
 *     limits that M_PERTURB sets to 0 (kmalloc.h).
 */
#include "kmalloc.h"
#include "mallopt.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <string.h>
#include <unistd.h>

/* ---- M_PERTURB ------------------------------------------------------------- */

/* kmalloc.c keeps the byte: kmalloc() and kfree() fill while it is on, at
 * no cost to their inline paths (kmalloc.h, struct kmalloc_lims). */
static inline int perturb_on(void)
{
	return __atomic_load_n(&kmalloc_perturb, __ATOMIC_RELAXED);
}

void *mf_malloc(size_t n)
{
	return kmalloc(n);   /* a tail call on every path */
}

void mf_free(void *p)
{
	kfree(p);   /* its every way out a tail call: no frame here */
}

void *mf_calloc(size_t n, size_t size)
{
	size_t total;
	if (unlikely(__builtin_mul_overflow(n, size, &total))) {
		errno = ENOMEM;
		return NULL;
	}
	if (likely(total <= KMALLOC_MAX_SIZE)) {
		void *p = kmalloc(total);
		if (likely(p != NULL))
			memset(p, 0, total);
		return p;
	}
	bool zeroed = false;
	void *p = kmalloc_big(total, 0, &zeroed);
	if (p && !zeroed)
		memset(p, 0, total);
	return p;
}

/* Usable size of p for realloc, or fatal. */
static size_t usable_or_die(void *p)
{
	return kmalloc_usable(p, "realloc");
}

void *mf_realloc(void *p, size_t n)
{
	if (!p)
		return mf_malloc(n);
	if (n == 0) {
		mf_free(p);
		return NULL;
	}
	size_t old;
	struct slab *d = slab_of(p);
	struct page *b;
	if (likely(slab_kind(d) == SK_SLAB)) {
		struct uslab_cache *s = d->cache;
		if (unlikely(!slab_obj_valid(s, d, p)))
			report_fatal("invalid realloc at %p (not the start of an object of cache '%s')", p, s->name);
		old = kmalloc_obj_usable(s, p);
		if (n <= (unlikely(s->debug) ? s->object_size : old)) {
			if (unlikely(s->debug))   /* the red zone starts at the new size */
				debug_set_orig_size(s, p, n);
			return p;
		}
	} else if ((b = large_block(p)) != NULL) {
		if (n <= MALLOC_MAX_REQUEST && large_resize(b, p, n))
			return p;
		old = large_usable(b);
	} else if (d == &slab_foreign && kfence_owns(p)) {
		old = kfence_usable(p, "realloc");   /* a sampled block: in place as a slab object, */
		if (n <= old)                        /* moved to grow (new, copy, free through kfence) */
			return p;
	} else if (d == &slab_foreign && !kmalloc_is_boot(p)) {
		if (huge_resize(p, n))
			return p;
		old = usable_or_die(p);
	} else {
		old = usable_or_die(p);   /* boot memory, or a fatal report */
	}
	if (n > MALLOC_MAX_REQUEST) {
		errno = ENOMEM;
		return NULL;
	}
	void *q = kmalloc(n);
	if (!q)
		return NULL;
	memcpy(q, p, MIN(old, n));
	if (unlikely(perturb_on()) && n > old)
		kmalloc_perturb_alloc((char *)q + old, n - old);   /* as glibc's moved block */
	mf_free(p);
	return q;
}

void *mf_reallocarray(void *p, size_t n, size_t size)
{
	size_t total;
	if (__builtin_mul_overflow(n, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return mf_realloc(p, total);
}

static void *aligned(size_t n, size_t align)
{
	void *p = kmalloc_aligned(n, align);
	if (unlikely(perturb_on()))
		return kmalloc_perturb_alloc(p, n);
	return p;
}

void *mf_memalign(size_t align, size_t n)
{
	if (align > SIZE_MAX / 2 + 1) {
		errno = EINVAL;
		return NULL;
	}
	if (align & (align - 1)) {
		size_t a = 1;
		while (a < align)
			a <<= 1;
		align = a;
	}
	return aligned(n, align);
}

int mf_posix_memalign(void **out, size_t align, size_t n)
{
	if (align < sizeof(void *) || (align & (align - 1)))
		return EINVAL;   /* errno untouched, as glibc */
	void *p = aligned(n, align);
	if (!p)
		return ENOMEM;   /* and in errno, as glibc */
	*out = p;
	return 0;
}

void *mf_aligned_alloc(size_t align, size_t n)
{
	if (!align || (align & (align - 1))) {
		errno = EINVAL;
		return NULL;
	}
	return aligned(n, align);
}

void *mf_valloc(size_t n)
{
	return aligned(n, PAGE_SIZE);
}

void *mf_pvalloc(size_t n)
{
	if (n > SIZE_MAX - PAGE_SIZE) {
		errno = ENOMEM;
		return NULL;
	}
	return aligned(ALIGN_UP(n, PAGE_SIZE), PAGE_SIZE);
}

size_t mf_usable_size(void *p)
{
	return p ? kmalloc_usable(p, "malloc_usable_size") : 0;
}

void mf_free_sized(void *p, size_t n)
{
	mf_free(p);
}

void mf_free_aligned_sized(void *p, size_t align, size_t n)
{
	mf_free(p);
}

/* ---- mallopt ------------------------------------------------------------------ */

/* page.c's purge delay before mallopt changed it (0: not changed yet). */
static _Atomic unsigned purge_delay_default;

/*
 * glibc's parameters (its values: malloc.h). glibc reads every value as a
 * size_t, so a negative one is huge. What each means here (README has the
 * table): M_TRIM_THRESHOLD: 0 gives free memory back at once (purge delay
 * 0), a negative value never on its own (only malloc_trim), any other the
 * default delay; M_TOP_PAD: bytes of freed huge mappings kept beyond a
 * quarter of the live ones; M_MMAP_THRESHOLD: freed blocks from this size
 * go back to the OS at once; M_PERTURB: see the top. M_MXFAST, M_MMAP_MAX,
 * M_CHECK_ACTION, M_ARENA_TEST, M_ARENA_MAX and SVID's M_NLBLKS, M_GRAIN,
 * M_KEEP have nothing to set and are accepted, with glibc's result (M_MXFAST
 * above 80 * sizeof(size_t) / 4 is 0). Any other parameter: 0 (glibc
 * returns 1 for those too).
 */
int mf_mallopt(int param, int value)
{
	switch (param) {
	case M_TRIM_THRESHOLD: {
		unsigned def = atomic_load_explicit(&purge_delay_default, memory_order_relaxed);
		if (!def) {
			unsigned expected = 0, now = page_purge_delay_ms;
			atomic_compare_exchange_strong(&purge_delay_default, &expected, now ? now : 1);
			def = atomic_load_explicit(&purge_delay_default, memory_order_relaxed);
		}
		unsigned ms = value == 0 ? 0 : value < 0 ? UINT_MAX : def;
		__atomic_store_n(&page_purge_delay_ms, ms, __ATOMIC_RELAXED);
		if (!ms)
			page_release_all();   /* also restarts the purge clock, which ran on the old delay */
		return 1;
	}
	case M_TOP_PAD:
		large_set_huge_pad((size_t)(long)value);
		return 1;
	case M_MMAP_THRESHOLD:
		large_set_release_min((size_t)(long)value);
		return 1;
	case M_PERTURB:
		kmalloc_set_perturb(value);
		return 1;
	case M_MXFAST:
		return (size_t)(long)value <= 80 * sizeof(size_t) / 4;
	case M_MMAP_MAX:
	case M_CHECK_ACTION:
	case M_ARENA_TEST:
	case M_ARENA_MAX:
	case M_NLBLKS:
	case M_GRAIN:
	case M_KEEP:
		return 1;
	default:
		return 0;
	}
}

/* ---- trim, mallinfo, malloc_stats ------------------------------------------ */

int mf_trim(size_t pad)
{
	struct page_info before, after;
	page_get_info(&before);
	unsigned long slabs = kmalloc_shrink_all();
	page_release_all();
	size_t huge = huge_release_all();
	page_get_info(&after);
	return slabs || huge || before.dirty_bytes || after.mapped_bytes < before.mapped_bytes;
}

void mf_get_info(struct mf_info *mi)
{
	struct page_info pi;
	struct large_info li;
	memset(mi, 0, sizeof *mi);
	page_get_info(&pi);
	large_get_info(&li);
	mi->arena = pi.mapped_bytes;
	for (unsigned o = 0; o <= PAGE_MAX_ORDER; o++)
		mi->ordblks += pi.free_blocks[o];
	mi->hblks = li.huge_blocks;
	mi->hblkhd = li.huge_bytes;
	mi->uordblks = kmalloc_slab_bytes_in_use() + li.large_bytes;
	mi->fordblks = mi->arena > mi->uordblks ? mi->arena - mi->uordblks : 0;
	mi->keepcost = pi.dirty_bytes + li.huge_cached;
	mi->max_hblks = li.huge_max_blocks;
	mi->max_hblkhd = li.huge_max_bytes;
}

void mf_stats_print(int fd)
{
	struct mf_info mi;
	char buf[512];
	mf_get_info(&mi);
	size_t n = fmt_buf(buf, sizeof buf,
			   "Arena 0:\nsystem bytes     = %10zu\nin use bytes     = %10zu\n"
			   "Total (incl. mmap):\nsystem bytes     = %10zu\nin use bytes     = %10zu\n"
			   "max mmap regions = %10zu\nmax mmap bytes   = %10zu\n",
			   mi.arena, mi.uordblks, mi.arena + mi.hblkhd, mi.uordblks + mi.hblkhd, mi.max_hblks,
			   mi.max_hblkhd);
	int e = errno;
	for (size_t off = 0; off < n;) {
		ssize_t w = write(fd, buf + off, n - off);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	errno = e;
}

/* ---- the uslab_* API (include/uslab.h, "malloc family") ------------------ */

void *uslab_malloc(size_t size) { return mf_malloc(size); }
void uslab_free(void *p) { mf_free(p); }
void *uslab_calloc(size_t n, size_t size) { return mf_calloc(n, size); }
void *uslab_realloc(void *p, size_t size) { return mf_realloc(p, size); }
void *uslab_reallocarray(void *p, size_t n, size_t size) { return mf_reallocarray(p, n, size); }
int uslab_posix_memalign(void **out, size_t align, size_t size) { return mf_posix_memalign(out, align, size); }
void *uslab_aligned_alloc(size_t align, size_t size) { return mf_aligned_alloc(align, size); }
void *uslab_memalign(size_t align, size_t size) { return mf_memalign(align, size); }
void *uslab_valloc(size_t size) { return mf_valloc(size); }
void *uslab_pvalloc(size_t size) { return mf_pvalloc(size); }
size_t uslab_malloc_usable_size(void *p) { return mf_usable_size(p); }
void uslab_free_sized(void *p, size_t size) { mf_free_sized(p, size); }
void uslab_free_aligned_sized(void *p, size_t align, size_t size) { mf_free_aligned_sized(p, align, size); }
int uslab_malloc_trim(size_t pad) { return mf_trim(pad); }
void uslab_malloc_stats_print_fd(int fd) { mf_stats_print(fd); }

int uslab_malloc_get_info(struct uslab_malloc_info *info)
{
	if (!info || info->version != USLAB_MALLOC_INFO_VERSION) {
		errno = EINVAL;
		return -1;
	}
	struct mf_info mi;
	mf_get_info(&mi);
	info->segment_bytes = mi.arena;
	info->in_use_bytes = mi.uordblks + mi.hblkhd;
	info->huge_blocks = mi.hblks;
	info->huge_bytes = mi.hblkhd;
	info->cached_bytes = mi.keepcost;
	return 0;
}
