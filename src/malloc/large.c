/*
 * Blocks above the largest kmalloc class.
 *
 * Large blocks (up to 2 MiB): whole pages from the page allocator. A block
 * of order O is cut to a multiple of 1/8 of 2^O pages and the tail goes back
 * to the page allocator at once, so no block wastes more than 12.5 % (plus
 * the last page). The head descriptor gets kind PK_LARGE, `npages` = pages
 * kept, `order` = the order of its first piece; the kept pages are the
 * binary decomposition of `npages` (pieces of 2^a, 2^b, ... pages in
 * falling order, each aligned to its size), and every later piece's head
 * descriptor is marked (PK_PIECE, its order) so that the buddy allocator
 * never merges a free neighbour into it, and so that page_block() walks
 * past it to the block's head. Freeing gives each piece back.
 * Freed pages stay with the page allocator, which gives them to the OS only
 * after page_purge_delay_ms (so a free/malloc cycle does not fault).
 *
 * Huge blocks (above 2 MiB, or aligned above 2 MiB): their own mappings,
 * SEG_SIZE aligned and a multiple of SEG_SIZE long. The registry is an
 * open-addressing hash table keyed by the block's address (its own mapping,
 * grown by doubling), so free finds a block in O(1) and tells foreign
 * pointers from ours; metadata never sits in front of user memory. Freed
 * mappings go to a cache of free ranges (coalesced when adjacent, split on
 * reuse, best fit), and are unmapped once unused for page_purge_delay_ms or
 * when the cache outgrows huge_pad (HUGE_CACHE_BYTES unless mallopt's
 * M_TOP_PAD says otherwise) + live/4. Allocators that unmap at once pay for
 * faulting every page in again on the next allocation.
 *
 * mallopt's M_MMAP_THRESHOLD sets release_min: blocks of at least that size
 * go back to the OS when freed, large ones by decommitting their pages
 * before the page allocator takes them (it purges them once more later,
 * which costs a cheap madvise), huge ones by unmapping them instead of
 * caching them.
 *
 * Locking: H.lock protects the registry and the range cache. It is a leaf:
 * nothing else is taken under it, and it is never held across a call into
 * the OS layer (maps happen before, unmaps after).
 */
#include "kmalloc.h"
#include "fork.h"
#include "mallopt.h"

#include <errno.h>
#include <string.h>

/* ---- large blocks ------------------------------------------------------- */

static _Atomic uint64_t large_bytes, large_blocks;
/* M_MMAP_THRESHOLD (relaxed: a stale value for one free is harmless) */
static _Atomic size_t release_min = SIZE_MAX;

void large_set_release_min(size_t bytes)
{
	atomic_store_explicit(&release_min, bytes, memory_order_relaxed);
}

static unsigned order_of_pages(size_t pages)
{
	unsigned o = 0;
	while (((size_t)1 << o) < pages)
		o++;
	return o;
}

/* Mark the pieces of the first `keep` pages of the block at seg->page[idx]:
 * each piece head gets its order; all but the first are PK_PIECE. */
static void mark_kept(struct segment *seg, unsigned idx, unsigned keep)
{
	unsigned off = 0;
	for (int b = PAGE_MAX_ORDER; b >= 0; b--) {
		if (!(keep & (1U << b)))
			continue;
		struct page *p = &seg->page[idx + off];
		p->order = (uint8_t)b;
		if (off)
			page_set_kind(p, PK_PIECE);
		off += 1U << b;
	}
}

/* Give pages [from, to) of seg back to the page allocator as aligned
 * pieces. All piece heads are marked busy first, so that no piece merges
 * with one not yet freed. */
static void free_pages(struct segment *seg, unsigned from, unsigned to)
{
	void *pieces[2 * (PAGE_MAX_ORDER + 1)];
	unsigned n = 0;
	for (unsigned off = from; off < to;) {
		unsigned b = MIN((unsigned)__builtin_ctz(off), (unsigned)PAGE_MAX_ORDER);
		while (off + (1U << b) > to)
			b--;
		struct page *p = &seg->page[off];
		p->order = (uint8_t)b;
		page_set_kind(p, PK_BUSY);
		pieces[n++] = page_address(p);
		off += 1U << b;
	}
	for (unsigned i = 0; i < n; i++)
		page_free(pieces[i]);
}

/* Pages to keep for `pages`: a multiple of 1/8 of the block's order. */
static unsigned keep_pages(size_t pages)
{
	unsigned o = order_of_pages(pages);
	size_t g = o >= 3 ? (size_t)1 << (o - 3) : 1;
	return (unsigned)ALIGN_UP(pages, g);
}

static void *block_alloc(size_t size, size_t align)
{
	size_t pages = MAX((size + PAGE_SIZE - 1) >> PAGE_SHIFT, (size_t)1);
	unsigned order = order_of_pages(pages);
	if (align > PAGE_SIZE)
		order = MAX(order, order_of_pages(align >> PAGE_SHIFT));
	void *addr = page_alloc(order);
	if (!addr)
		return NULL;
	struct page *d = page_desc(addr);
	struct segment *seg = page_segment(d);
	unsigned idx = (unsigned)(d - seg->page);
	unsigned keep = keep_pages(pages);
	d->npages = (uint16_t)keep;
	mark_kept(seg, idx, keep);
	page_set_kind(d, PK_LARGE);
	if (keep < (1U << order))
		free_pages(seg, idx + keep, idx + (1U << order));
	atomic_fetch_add_explicit(&large_bytes, (uint64_t)keep << PAGE_SHIFT, memory_order_relaxed);
	atomic_fetch_add_explicit(&large_blocks, 1, memory_order_relaxed);
	return page_address(d);
}

void large_free(struct page *d, void *p)
{
	struct segment *seg = page_segment(d);
	unsigned idx = (unsigned)(d - seg->page), keep = d->npages;
	atomic_fetch_sub_explicit(&large_bytes, (uint64_t)keep << PAGE_SHIFT, memory_order_relaxed);
	atomic_fetch_sub_explicit(&large_blocks, 1, memory_order_relaxed);
	if (unlikely(((size_t)keep << PAGE_SHIFT) >= atomic_load_explicit(&release_min, memory_order_relaxed)))
		os_decommit(p, (size_t)keep << PAGE_SHIFT);   /* M_MMAP_THRESHOLD: see the top */
	free_pages(seg, idx, idx + keep);
}

bool large_resize(struct page *d, void *p, size_t size)
{
	size_t pages = (size + PAGE_SIZE - 1) >> PAGE_SHIFT;
	unsigned keep = d->npages;
	if (pages > keep)
		return false;
	/* Shrinking by a quarter or more gives the tail back. */
	if (pages && pages <= keep - keep / 4) {
		unsigned nk = keep_pages(pages);
		if (nk < keep) {
			struct segment *seg = page_segment(d);
			unsigned idx = (unsigned)(d - seg->page);
			mark_kept(seg, idx, nk);
			d->npages = (uint16_t)nk;
			atomic_fetch_sub_explicit(&large_bytes, (uint64_t)(keep - nk) << PAGE_SHIFT,
						  memory_order_relaxed);
			int e = errno;
			free_pages(seg, idx + nk, idx + keep);
			errno = e;
		}
	}
	return true;
}

/* ---- huge blocks: registry and range cache -------------------------------- */

#define HUGE_TAB_MIN      512              /* first table: 512 entries, 12 KiB */
#define HUGE_CACHE_SLOTS  32               /* free ranges kept */
#define HUGE_CACHE_BYTES  (64UL << 20)     /* kept beyond live/4 */

/* M_TOP_PAD: bytes kept beyond live/4 (relaxed, read under H.lock) */
static _Atomic size_t huge_pad = HUGE_CACHE_BYTES;

void large_set_huge_pad(size_t bytes)
{
	atomic_store_explicit(&huge_pad, bytes, memory_order_relaxed);
}

struct huge_ent {
	uintptr_t addr;   /* start of the block and of its mapping; 0 = empty slot */
	size_t len;       /* bytes mapped (multiple of SEG_SIZE) */
	size_t usable;    /* bytes the user may use (page-rounded request; <= len) */
};

struct range {
	uintptr_t base;
	size_t len;
	uint64_t time;    /* when it was freed (ms) */
};

static struct {
	pthread_mutex_t lock;                  /* see the top of the file */
	struct huge_ent *tab;                  /* cap entries, at most half used */
	size_t cap, n;
	struct range cache[HUGE_CACHE_SLOTS];  /* free ranges, unordered */
	unsigned ncache;
	uint64_t cached_bytes, live_bytes;
	uint64_t max_blocks, max_bytes;
} H = { .lock = PTHREAD_MUTEX_INITIALIZER };

static inline size_t hash_slot(uintptr_t addr, size_t cap)
{
	return (size_t)(((uint64_t)(addr >> SEG_SHIFT) * 0x9e3779b97f4a7c15ULL) >> 32) & (cap - 1);
}

/* Slot of addr, or -1 (lock held). */
static long tab_find_locked(uintptr_t addr)
{
	if (!H.tab)
		return -1;
	for (size_t i = hash_slot(addr, H.cap);; i = (i + 1) & (H.cap - 1)) {
		if (H.tab[i].addr == addr)
			return (long)i;
		if (!H.tab[i].addr)
			return -1;
	}
}

static void tab_put_locked(struct huge_ent *tab, size_t cap, const struct huge_ent *e)
{
	size_t i = hash_slot(e->addr, cap);
	while (tab[i].addr)
		i = (i + 1) & (cap - 1);
	tab[i] = *e;
}

/* Remove slot i, shifting back the entries of its probe run. */
static void tab_del_locked(size_t i)
{
	size_t j = i;
	for (;;) {
		H.tab[i].addr = 0;
		for (;;) {
			j = (j + 1) & (H.cap - 1);
			if (!H.tab[j].addr)
				return;
			size_t k = hash_slot(H.tab[j].addr, H.cap);
			/* move j to i unless its home k lies cyclically in (i, j] */
			if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
				continue;
			break;
		}
		H.tab[i] = H.tab[j];
		i = j;
	}
}

/* Make room for one more entry; false with ENOMEM. Takes and drops the lock
 * around the map of a bigger table. */
static bool tab_reserve(void)
{
	for (;;) {
		pthread_mutex_lock(&H.lock);
		if ((H.n + 1) * 2 <= H.cap)
			return true;   /* lock held */
		size_t ncap = H.cap ? H.cap * 2 : HUGE_TAB_MIN;
		pthread_mutex_unlock(&H.lock);
		struct huge_ent *nt = os_map_aligned(ncap * sizeof *nt, PAGE_SIZE);
		if (!nt)
			return false;
		pthread_mutex_lock(&H.lock);
		struct huge_ent *old = NULL;
		size_t ocap = H.cap;
		if (ncap > H.cap) {
			for (size_t i = 0; i < H.cap; i++)
				if (H.tab[i].addr)
					tab_put_locked(nt, ncap, &H.tab[i]);
			old = H.tab;
			H.tab = nt;
			H.cap = ncap;
			nt = NULL;
		}
		pthread_mutex_unlock(&H.lock);
		if (old)
			os_unmap(old, ocap * sizeof *old);
		if (nt)
			os_unmap(nt, ncap * sizeof *nt);
	}
}

static void cache_del_locked(unsigned i)
{
	H.cached_bytes -= H.cache[i].len;
	H.cache[i] = H.cache[--H.ncache];
}

/* Best fit of len bytes aligned to align; the rest stays cached. */
static uintptr_t cache_take_locked(size_t len, size_t align)
{
	long best = -1;
	for (unsigned i = 0; i < H.ncache; i++) {
		struct range *r = &H.cache[i];
		if (r->len >= len && !(r->base & (align - 1)) && (best < 0 || r->len < H.cache[best].len))
			best = i;
	}
	if (best < 0)
		return 0;
	struct range *r = &H.cache[best];
	uintptr_t base = r->base;
	if (r->len == len) {
		cache_del_locked((unsigned)best);
	} else {
		r->base += len;
		r->len -= len;
		H.cached_bytes -= len;
	}
	return base;
}

/* Ranges to unmap once the lock is dropped. */
struct unmap_list {
	struct range r[HUGE_CACHE_SLOTS + 2];
	unsigned n;
};

static void evict_locked(unsigned i, struct unmap_list *ul)
{
	ul->r[ul->n++] = H.cache[i];
	cache_del_locked(i);
}

/* Unmap ranges unused for the purge delay, and the oldest while the cache
 * holds more than its budget. */
static void cache_decay_locked(uint64_t now, struct unmap_list *ul)
{
	for (unsigned i = 0; i < H.ncache && ul->n < HUGE_CACHE_SLOTS;) {
		if (now - H.cache[i].time >= page_purge_delay_ms)
			evict_locked(i, ul);
		else
			i++;
	}
	size_t pad = atomic_load_explicit(&huge_pad, memory_order_relaxed);
	while (H.ncache && ul->n < HUGE_CACHE_SLOTS && H.cached_bytes > H.live_bytes / 4 &&
	       H.cached_bytes - H.live_bytes / 4 > pad) {
		unsigned old = 0;
		for (unsigned i = 1; i < H.ncache; i++)
			if (H.cache[i].time < H.cache[old].time)
				old = i;
		evict_locked(old, ul);
	}
}

static void cache_put_locked(uintptr_t base, size_t len, uint64_t now, struct unmap_list *ul)
{
	/* Coalesce with neighbours (munmap of a range spanning adjacent
	 * mappings is fine, and the kernel often merges them anyway). */
	for (unsigned i = 0; i < H.ncache;) {
		struct range *r = &H.cache[i];
		if (r->base + r->len == base || base + len == r->base) {
			base = MIN(base, r->base);
			len += r->len;
			cache_del_locked(i);
			i = 0;
			continue;
		}
		i++;
	}
	if (H.ncache == HUGE_CACHE_SLOTS) {
		unsigned old = 0;
		for (unsigned i = 1; i < H.ncache; i++)
			if (H.cache[i].time < H.cache[old].time)
				old = i;
		evict_locked(old, ul);
	}
	H.cache[H.ncache++] = (struct range){ base, len, now };
	H.cached_bytes += len;
	cache_decay_locked(now, ul);
}

static void unmap_all(struct unmap_list *ul)
{
	for (unsigned i = 0; i < ul->n; i++)
		os_unmap((void *)ul->r[i].base, ul->r[i].len);
	ul->n = 0;
}

static void *huge_alloc(size_t size, size_t align, bool *zeroed)
{
	if (size > MALLOC_MAX_REQUEST) {
		errno = ENOMEM;
		return NULL;
	}
	size_t len = ALIGN_UP(MAX(size, (size_t)1), SEG_SIZE);
	align = MAX(align, SEG_SIZE);
	struct unmap_list ul = { .n = 0 };
	uint64_t now = os_now_ms();
	if (!tab_reserve())
		return NULL;
	/* lock held */
	uintptr_t a = cache_take_locked(len, align);
	bool fresh = false;
	if (!a) {
		pthread_mutex_unlock(&H.lock);
		a = (uintptr_t)os_map_aligned(len, align);
		if (!a) {
			/* Perhaps the cache holds the address space or memory: give it
			 * all back and try once more. */
			if (!huge_release_all() || !(a = (uintptr_t)os_map_aligned(len, align))) {
				errno = ENOMEM;
				return NULL;
			}
		}
		fresh = true;
		if (!tab_reserve()) {
			os_unmap((void *)a, len);
			return NULL;
		}
	}
	struct huge_ent e = { a, len, ALIGN_UP(MAX(size, (size_t)1), PAGE_SIZE) };
	tab_put_locked(H.tab, H.cap, &e);
	H.n++;
	H.live_bytes += len;
	H.max_blocks = MAX(H.max_blocks, H.n);
	H.max_bytes = MAX(H.max_bytes, H.live_bytes);
	cache_decay_locked(now, &ul);
	pthread_mutex_unlock(&H.lock);
	unmap_all(&ul);
	if (zeroed)
		*zeroed = fresh;
	return (void *)a;
}

bool huge_free(void *p)
{
	struct unmap_list ul = { .n = 0 };
	uint64_t now = os_now_ms();
	pthread_mutex_lock(&H.lock);
	long i = tab_find_locked((uintptr_t)p);
	if (i < 0) {
		pthread_mutex_unlock(&H.lock);
		return false;
	}
	size_t len = H.tab[i].len, usable = H.tab[i].usable;
	tab_del_locked((size_t)i);
	H.n--;
	H.live_bytes -= len;
	if (unlikely(usable >= atomic_load_explicit(&release_min, memory_order_relaxed)))
		ul.r[ul.n++] = (struct range){ (uintptr_t)p, len, now };   /* M_MMAP_THRESHOLD: unmapped, not cached */
	else
		cache_put_locked((uintptr_t)p, len, now, &ul);
	pthread_mutex_unlock(&H.lock);
	unmap_all(&ul);
	return true;
}

size_t huge_usable(const void *p)
{
	pthread_mutex_lock(&H.lock);
	long i = tab_find_locked((uintptr_t)p);
	size_t n = i < 0 ? 0 : H.tab[i].usable;
	pthread_mutex_unlock(&H.lock);
	return n;
}

bool huge_is_freed(const void *p)
{
	bool freed = false;
	pthread_mutex_lock(&H.lock);
	for (unsigned i = 0; i < H.ncache; i++)
		if ((uintptr_t)p >= H.cache[i].base && (uintptr_t)p - H.cache[i].base < H.cache[i].len)
			freed = true;
	pthread_mutex_unlock(&H.lock);
	return freed;
}

/*
 * In place: within the mapping; growing past it by taking the cached free
 * range that starts where the mapping ends; shrinking by whole segments
 * gives the tail to the cache.
 */
bool huge_resize(void *p, size_t size)
{
	if (size > MALLOC_MAX_REQUEST)
		return false;
	struct unmap_list ul = { .n = 0 };
	bool ok = false;
	size_t need = ALIGN_UP(MAX(size, (size_t)1), SEG_SIZE);
	pthread_mutex_lock(&H.lock);
	long i = tab_find_locked((uintptr_t)p);
	if (i >= 0) {
		struct huge_ent *e = &H.tab[i];
		if (need > e->len) {
			uintptr_t end = e->addr + e->len;
			for (unsigned k = 0; k < H.ncache; k++) {
				struct range *r = &H.cache[k];
				if (r->base == end && r->len >= need - e->len) {
					size_t take = need - e->len;
					if (r->len == take) {
						cache_del_locked(k);
					} else {
						r->base += take;
						r->len -= take;
						H.cached_bytes -= take;
					}
					e->len = need;
					H.live_bytes += take;
					H.max_bytes = MAX(H.max_bytes, H.live_bytes);
					break;
				}
			}
		}
		if (need <= e->len) {
			if (need < e->len) {
				size_t tail = e->len - need;
				e->len = need;
				H.live_bytes -= tail;
				cache_put_locked(e->addr + need, tail, os_now_ms(), &ul);
			}
			e->usable = ALIGN_UP(MAX(size, (size_t)1), PAGE_SIZE);
			ok = true;
		}
	}
	pthread_mutex_unlock(&H.lock);
	unmap_all(&ul);
	return ok;
}

size_t huge_release_all(void)
{
	struct unmap_list ul = { .n = 0 };
	size_t bytes = 0;
	pthread_mutex_lock(&H.lock);
	while (H.ncache) {
		bytes += H.cache[H.ncache - 1].len;
		evict_locked(H.ncache - 1, &ul);
	}
	pthread_mutex_unlock(&H.lock);
	unmap_all(&ul);
	return bytes;
}

bool huge_decay(void)
{
	struct unmap_list ul = { .n = 0 };
	pthread_mutex_lock(&H.lock);
	cache_decay_locked(os_now_ms(), &ul);
	bool more = H.ncache != 0;
	pthread_mutex_unlock(&H.lock);
	unmap_all(&ul);
	return more;
}

/* ---- the entry point and accounting ------------------------------------------ */

void *large_alloc(size_t size, size_t align, bool *zeroed)
{
	if (zeroed)
		*zeroed = false;
	if (size <= HUGE_MIN_SIZE && align <= HUGE_MIN_SIZE)
		return block_alloc(size, align);
	return huge_alloc(size, align, zeroed);
}

void large_get_info(struct large_info *li)
{
	memset(li, 0, sizeof *li);
	li->large_bytes = atomic_load_explicit(&large_bytes, memory_order_relaxed);
	li->large_blocks = atomic_load_explicit(&large_blocks, memory_order_relaxed);
	pthread_mutex_lock(&H.lock);
	li->huge_bytes = H.live_bytes;
	li->huge_blocks = H.n;
	li->huge_cached = H.cached_bytes;
	li->huge_max_blocks = H.max_blocks;
	li->huge_max_bytes = H.max_bytes;
	pthread_mutex_unlock(&H.lock);
}

pthread_mutex_t *large_fork_lock(void)
{
	return &H.lock;
}
