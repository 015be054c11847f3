/*
 * Page allocator: segments, per-page descriptors, buddy blocks, delayed
 * return of free memory to the OS; the slab records' home. See page.h for
 * the picture.
 *
 * Locking: page_lock protects the free lists, every descriptor of a free
 * block, the segment list and the segment counters. It is a leaf lock: the
 * node list locks may be held when it is taken, nothing is taken under it,
 * and it is never held across a call into the OS layer (maps, madvise and
 * unmaps happen after the blocks concerned are taken off the lists).
 * grow_lock serializes mapping new segments (it is held across that mmap,
 * and taken before page_lock), so that threads that run out together map
 * one segment, not one each.
 */
#include "page.h"
#include "fork.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#define SEG_MAGIC 0x75736c6162736567ULL   /* "uslabseg" */

_Atomic uint8_t page_seg_map[SEG_MAP_BITS];
struct slab slab_foreign;
unsigned page_purge_delay_ms = 1000;
/* Free pages kept dirty at most, whatever their age, in MiB (or half the
 * pages in use, if more: dirty_max_pages): a burst of frees gives the rest
 * back while it runs (USLAB_OPTIONS=decay_dirty_max). */
unsigned page_dirty_max_mb = 8;

static struct {
	pthread_mutex_t lock;                      /* see the top of the file */
	/* free blocks by order, doubly linked: dirty ones first (newest at the
	 * head), then clean ones. So allocation reuses dirty pages first (no
	 * fault), and a purge looks at dirty blocks only. */
	struct page *free[PAGE_MAX_ORDER + 1];
	struct page *free_tail[PAGE_MAX_ORDER + 1];
	uint64_t nfree[PAGE_MAX_ORDER + 1];
	struct segment *segs;                      /* all segments */
	uint64_t nsegs;
	uint64_t used_pages, dirty_pages;
	uint64_t next_purge;                       /* ms; 0 = nothing to purge */
	/* Pages the dirty bound has learned to keep: grown by every page that
	 * a purge for the bound gave back and the program allocated again
	 * within page_purge_delay_ms (a purge wasted: a madvise and a fault
	 * per page), halved for each such period without one. regret_start:
	 * when the current period began; regret_seen: a wasted purge in it.
	 * All three under the page lock, as the free lists they come from. */
	uint64_t learned_pages, regret_start;
	bool regret_seen;
} P = { .lock = PTHREAD_MUTEX_INITIALIZER };
static pthread_mutex_t grow_lock = PTHREAD_MUTEX_INITIALIZER;   /* see the top of the file */

static inline unsigned desc_index(const struct page *d)
{
	return (unsigned)(d - page_segment(d)->page);
}

static void seg_map_set(struct segment *seg, bool on)
{
	atomic_store_explicit(&page_seg_map[(uintptr_t)seg >> SEG_SHIFT], on, memory_order_relaxed);
}

/* ---- free lists (page lock held) ------------------------------------- */

/* The dirty counters are kept here: dirty bytes are the sizes of the free
 * blocks with d->dirty set (a block merged from dirty and clean parts counts
 * whole; purging it makes it clean). */
static void free_list_add(struct page *d, unsigned order)
{
	if (d->dirty) {
		page_segment(d)->dirty_pages += 1U << order;
		P.dirty_pages += 1U << order;
	}
	page_set_kind(d, PK_FREE);
	d->order = (uint8_t)order;
	if (d->dirty || !P.free[order]) {   /* at the head */
		d->prev = NULL;
		d->next = P.free[order];
		if (d->next)
			d->next->prev = d;
		else
			P.free_tail[order] = d;
		P.free[order] = d;
	} else {                            /* clean: at the tail */
		d->next = NULL;
		d->prev = P.free_tail[order];
		d->prev->next = d;
		P.free_tail[order] = d;
	}
	P.nfree[order]++;
}

static void free_list_del(struct page *d)
{
	if (d->prev)
		d->prev->next = d->next;
	else
		P.free[d->order] = d->next;
	if (d->next)
		d->next->prev = d->prev;
	else
		P.free_tail[d->order] = d->prev;
	P.nfree[d->order]--;
	d->next = d->prev = NULL;
	if (d->dirty) {
		page_segment(d)->dirty_pages -= 1U << d->order;
		P.dirty_pages -= 1U << d->order;
	}
}

/* Insert a free block, merging it with free buddies. The upper half of
 * each merge stops being a head (PK_TAIL): only a block's first page is
 * one (page.h). */
static void free_block_insert(struct page *d, unsigned order, bool dirty, uint64_t when)
{
	struct segment *seg = page_segment(d);
	unsigned idx = desc_index(d);
	while (order < PAGE_MAX_ORDER) {
		unsigned bidx = idx ^ (1U << order);
		if (bidx + (1U << order) > SEG_PAGES)
			break;
		struct page *b = &seg->page[bidx];
		if (page_kind(b) != PK_FREE || b->order != order)
			break;
		free_list_del(b);
		dirty |= b->dirty;
		when = MAX(when, b->free_time);
		page_set_kind(&seg->page[idx | (1U << order)], PK_TAIL);
		idx &= ~(1U << order);
		order++;
	}
	d = &seg->page[idx];
	d->dirty = dirty;
	d->free_time = when;
	free_list_add(d, order);
}

static void seg_add_blocks(struct segment *seg, unsigned from)
{
	for (unsigned i = from; i < SEG_PAGES;) {
		unsigned o = PAGE_MAX_ORDER;
		while ((i & ((1U << o) - 1)) || i + (1U << o) > SEG_PAGES)
			o--;
		seg->page[i].dirty = 0;
		seg->page[i].free_time = 0;
		free_list_add(&seg->page[i], o);
		i += 1U << o;
	}
}

/* ---- allocation ------------------------------------------------------ */

/* A clean block of n pages, given back for the dirty bound at `purged` (0:
 * never, or for its age, or by a trim), is allocated again at `now` (page
 * lock held): within the delay, that purge was wasted (a madvise, and a
 * fault per page to come), and the bound learns to keep n more. Purges for
 * age are decay_ms at work and teach nothing. */
static void note_regret(uint64_t purged, uint64_t now, unsigned n)
{
	if (purged && now - MIN(now, purged) < page_purge_delay_ms) {
		P.learned_pages += n;
		P.regret_seen = true;
	}
}

/* Each period of page_purge_delay_ms without a wasted purge halves what
 * the bound learned (page lock held): a program that stopped reusing what
 * it frees gets its bound back within a few periods. */
static void regret_decay(uint64_t now)
{
	uint64_t periods = page_purge_delay_ms ? (now - MIN(now, P.regret_start)) / page_purge_delay_ms : 64;
	if (!periods)
		return;
	if (P.regret_seen)
		periods--;
	P.learned_pages = periods >= 64 ? 0 : P.learned_pages >> periods;
	P.regret_seen = false;
	P.regret_start = now;
}

static struct page *take_block(unsigned order, uint64_t now)
{
	unsigned o = order;
	while (o <= PAGE_MAX_ORDER && !P.free[o])
		o++;
	if (o > PAGE_MAX_ORDER)
		return NULL;
	struct page *d = P.free[o];
	free_list_del(d);
	if (!d->dirty)   /* (a clean block's free_time is when a purge gave it back) */
		note_regret(d->free_time, now, 1U << order);
	struct segment *seg = page_segment(d);
	unsigned idx = desc_index(d);
	/* Split: the upper halves go back as free blocks with the same state. */
	while (o > order) {
		o--;
		struct page *hi = &seg->page[idx + (1U << o)];
		hi->dirty = d->dirty;
		hi->free_time = d->free_time;
		free_list_add(hi, o);
	}
	unsigned n = 1U << order;
	seg->used_pages += n;
	P.used_pages += n;
	page_set_kind(d, PK_BUSY);
	d->order = (uint8_t)order;
	d->dirty = 0;
	return d;
}

static struct segment *seg_new(void)
{
	struct segment *seg = os_map_aligned(SEG_SIZE, SEG_SIZE);
	if (!seg)
		return NULL;
	/* Fresh anonymous memory is zero: page descriptors start as PK_META
	 * and slab records as SK_NONE ("no slab here"), and header pages are
	 * touched only as their descriptors are. */
	seg->magic = SEG_MAGIC;
	return seg;
}

void *page_alloc(unsigned order)
{
	if (order > PAGE_MAX_ORDER) {
		errno = ENOMEM;
		return NULL;
	}
	uint64_t now = os_now_ms();
	pthread_mutex_lock(&P.lock);
	struct page *d = take_block(order, now);
	pthread_mutex_unlock(&P.lock);
	if (d)
		return page_address(d);

	/* One thread maps a segment while the others wait and then find its
	 * blocks: without this, threads starting together each map one. */
	pthread_mutex_lock(&grow_lock);
	pthread_mutex_lock(&P.lock);
	d = take_block(order, now);
	pthread_mutex_unlock(&P.lock);
	if (d) {
		pthread_mutex_unlock(&grow_lock);
		return page_address(d);
	}
	struct segment *seg = seg_new();   /* the page lock is not held across the OS call */
	if (!seg) {
		pthread_mutex_unlock(&grow_lock);
		return NULL;
	}
	pthread_mutex_lock(&P.lock);
	seg->next = P.segs;
	seg->prev = NULL;
	if (P.segs)
		P.segs->prev = seg;
	P.segs = seg;
	P.nsegs++;
	seg_add_blocks(seg, SEG_HEADER_PAGES);
	seg_map_set(seg, true);
	d = take_block(order, now);
	pthread_mutex_unlock(&P.lock);
	pthread_mutex_unlock(&grow_lock);
	return d ? page_address(d) : NULL;
}

/* ---- freeing and purging --------------------------------------------- */

static void page_purge(bool all);

/* The dirty bound (page lock held): decay_dirty_max, half the pages in
 * use, or what the bound has learned (pages that purges gave back and the
 * program soon allocated again), whichever is most. So a program that
 * frees and reuses blocks at a steady rate (a realloc-heavy one, a big
 * live set turning over) is not made to give back and fault in again the
 * pages it is about to reuse; a burst of frees that nothing reuses still
 * gives back nearly everything as it runs, since what is in use falls
 * with it and nothing is learned. */
static inline uint64_t dirty_max_pages(void)
{
	uint64_t fixed = (uint64_t)__atomic_load_n(&page_dirty_max_mb, __ATOMIC_RELAXED) << (20 - PAGE_SHIFT);
	return MAX(MAX(fixed, P.used_pages / 2), P.learned_pages);
}

uint64_t page_dirty_learned(void)
{
	pthread_mutex_lock(&P.lock);
	uint64_t b = P.learned_pages << PAGE_SHIFT;
	pthread_mutex_unlock(&P.lock);
	return b;
}

uint64_t page_dirty_bound(void)
{
	pthread_mutex_lock(&P.lock);
	uint64_t b = dirty_max_pages() << PAGE_SHIFT;
	pthread_mutex_unlock(&P.lock);
	return b;
}

void page_free(void *p)
{
	struct page *d = page_desc(p);
	struct segment *seg = page_segment(d);
	unsigned n = 1U << d->order;
	uint64_t now = os_now_ms();
	pthread_mutex_lock(&P.lock);
	regret_decay(now);
	seg->used_pages -= n;
	P.used_pages -= n;
	if (!seg->used_pages)
		seg->empty_since = now;
	free_block_insert(d, d->order, true, now);
	if (!P.next_purge)
		P.next_purge = now + page_purge_delay_ms;
	bool purge = now >= P.next_purge || P.dirty_pages > dirty_max_pages();
	pthread_mutex_unlock(&P.lock);
	if (purge)
		page_purge(false);
	else
		mem_dirty_notify();   /* a sleeping background thread has something to decay */
}

void page_age_since(uint64_t since)
{
	uint64_t delay = __atomic_load_n(&page_purge_delay_ms, __ATOMIC_RELAXED);
	bool aged = false;
	pthread_mutex_lock(&P.lock);
	for (unsigned o = 0; o <= PAGE_MAX_ORDER; o++)
		for (struct page *d = P.free[o]; d && d->dirty; d = d->next)   /* (dirty blocks lead) */
			if (d->free_time >= since) {
				d->free_time = since - MIN(since, delay);
				aged = true;
			}
	if (aged)
		P.next_purge = since - MIN(since, delay) + delay;   /* due now */
	pthread_mutex_unlock(&P.lock);
}

uint64_t page_decay(void)
{
	page_purge(false);
	pthread_mutex_lock(&P.lock);
	uint64_t next = P.next_purge;
	pthread_mutex_unlock(&P.lock);
	return next;
}

/*
 * Give back free memory: with `all`, every dirty block and every empty
 * segment; otherwise those that have been free for page_purge_delay_ms,
 * and younger ones too when more than page_dirty_max bytes are dirty (down
 * to half of it).
 * Blocks are taken off the free lists (marked PK_PURGING) under the lock,
 * given back without it, and reinserted clean.
 */
/* Age buckets of free blocks (ms since freed): 0, 1, 2-3, 4-7, ... */
#define AGE_BUCKETS 24
static inline unsigned age_bucket(uint64_t age_ms)
{
	unsigned b = age_ms ? 64 - (unsigned)__builtin_clzll(age_ms) : 0;
	return MIN(b, AGE_BUCKETS - 1);
}

/* The youngest age bucket such that the dirty blocks of it and older
 * buckets hold at least `bytes` (page lock held): one walk of the dirty
 * blocks, a histogram. */
static unsigned age_cut(uint64_t now, uint64_t bytes)
{
	uint64_t hist[AGE_BUCKETS] = { 0 };
	for (unsigned o = 0; o <= PAGE_MAX_ORDER; o++)
		for (struct page *d = P.free[o]; d && d->dirty; d = d->next)
			hist[age_bucket(now - MIN(now, d->free_time))] += PAGE_SIZE << o;
	uint64_t sum = 0;
	for (unsigned b = AGE_BUCKETS; b-- > 0;) {
		sum += hist[b];
		if (sum >= bytes)
			return b;
	}
	return 0;
}

static void page_purge(bool all)
{
	enum { BATCH = 64 };
	struct page *batch[BATCH];
	bool for_bound[BATCH];         /* given back for the bound, not for its age */
	struct segment *dead = NULL;
	uint64_t now = os_now_ms();
	uint64_t floor = UINT64_MAX;   /* dirty pages to keep: set by the first round */
	bool by_age = false;           /* old blocks are due too (not only the bound) */
	unsigned oldest = 0;           /* for the bound: blocks of this age bucket and older */
	bool more;
	do {
		unsigned nb = 0;
		more = false;
		pthread_mutex_lock(&P.lock);
		/* Wholly free segments first: they go back entirely. */
		for (struct segment *seg = P.segs, *nx; seg; seg = nx) {
			nx = seg->next;
			if (seg->used_pages || (!all && now - seg->empty_since < page_purge_delay_ms))
				continue;
			for (unsigned i = SEG_HEADER_PAGES; i < SEG_PAGES; i += 1U << seg->page[i].order) {
				if (page_kind(&seg->page[i]) != PK_FREE)
					break;   /* a block is being purged by another thread: try later */
				if (i + (1U << seg->page[i].order) >= SEG_PAGES) {
					/* every block free and on the lists: unlink them all */
					for (unsigned j = SEG_HEADER_PAGES; j < SEG_PAGES; j += 1U << seg->page[j].order)
						free_list_del(&seg->page[j]);
					if (seg->prev)
						seg->prev->next = seg->next;
					else
						P.segs = seg->next;
					if (seg->next)
						seg->next->prev = seg->prev;
					P.nsegs--;
					seg_map_set(seg, false);
					seg->next = dead;
					dead = seg;
					break;
				}
			}
		}
		uint64_t earliest = 0;
		/* Above the bound, purge down to half of it, so that a steady
		 * stream of frees purges once per half a bound's worth of pages,
		 * not at every free. The oldest blocks go first: allocation
		 * reuses the newest (the list heads), so the oldest are the ones
		 * least likely to be wanted again soon. */
		if (floor == UINT64_MAX) {
			uint64_t max = dirty_max_pages();
			floor = P.dirty_pages > max ? max / 2 : max;
			by_age = all || (P.next_purge && now >= P.next_purge);
			if (P.dirty_pages > floor)
				oldest = age_cut(now, (P.dirty_pages - floor) << PAGE_SHIFT);
		}
		uint64_t over = P.dirty_pages > floor ? (P.dirty_pages - floor) << PAGE_SHIFT : 0;
		if (!over && !by_age && !all && !dead) {
			pthread_mutex_unlock(&P.lock);
			break;
		}
		for (unsigned o = PAGE_MAX_ORDER + 1; o-- > 0 && nb < BATCH;) {   /* big blocks first */
			/* the dirty blocks lead each list: stop at the first clean one */
			for (struct page *d = P.free[o], *nx; d && d->dirty && nb < BATCH; d = nx) {
				nx = d->next;
				uint64_t age = now - MIN(now, d->free_time);
				bool bound = false;
				if (over && age_bucket(age) >= oldest) {   /* above the bound: the oldest */
					over = over > (PAGE_SIZE << o) ? over - (PAGE_SIZE << o) : 0;
					bound = !all && age < page_purge_delay_ms;
				} else if (!all && !(by_age && age >= page_purge_delay_ms)) {
					if (by_age) {
						uint64_t due = d->free_time + page_purge_delay_ms;
						if (!earliest || due < earliest)
							earliest = due;
					}
					continue;
				}
				free_list_del(d);
				page_set_kind(d, PK_PURGING);
				for_bound[nb] = bound;
				batch[nb++] = d;
			}
		}
		more = nb == BATCH;
		/* The next purge by age: when the oldest young block is due, but
		 * not sooner than an eighth of the delay from now (blocks age
		 * continuously under a steady stream of frees; a walk per due
		 * block would be a walk per free). So blocks go back within
		 * 1.125 x the delay. */
		if (by_age && !more)   /* a purge for the bound only leaves the deadline as it was */
			P.next_purge = earliest ? MAX(earliest, now + MAX(page_purge_delay_ms / 8, 1U)) : 0;
		pthread_mutex_unlock(&P.lock);

		for (unsigned i = 0; i < nb; i++)
			os_decommit(page_address(batch[i]), PAGE_SIZE << batch[i]->order);
		while (dead) {
			struct segment *nx = dead->next;
			os_unmap(dead, SEG_SIZE);
			dead = nx;
		}

		if (nb) {
			pthread_mutex_lock(&P.lock);
			for (unsigned i = 0; i < nb; i++) {
				struct page *d = batch[i];
				/* a clean block's free_time: when the bound gave it
				 * back (note_regret), else 0 */
				free_block_insert(d, d->order, false, for_bound[i] ? now : 0);
			}
			if (!P.next_purge)
				P.next_purge = now + page_purge_delay_ms;
			pthread_mutex_unlock(&P.lock);
		}
	} while (more);
}

void page_release_all(void)
{
	page_purge(true);
}

void page_get_info(struct page_info *pi)
{
	memset(pi, 0, sizeof *pi);
	pthread_mutex_lock(&P.lock);
	pi->segments = P.nsegs;
	pi->mapped_bytes = P.nsegs * SEG_SIZE;
	pi->used_bytes = P.used_pages << PAGE_SHIFT;
	pi->dirty_bytes = P.dirty_pages << PAGE_SHIFT;
	for (unsigned o = 0; o <= PAGE_MAX_ORDER; o++)
		pi->free_blocks[o] = P.nfree[o];
	pthread_mutex_unlock(&P.lock);
}

unsigned page_fork_locks(pthread_mutex_t **out)
{
	out[0] = &grow_lock;
	out[1] = &P.lock;
	return 2;
}

void page_for_each_slab(void (*fn)(struct slab *d, void *arg), void *arg)
{
	pthread_mutex_lock(&P.lock);
	for (struct segment *seg = P.segs; seg; seg = seg->next)
		for (unsigned i = 0; i < SEG_SLOTS; i++) {
			struct slab *d = &seg->slab[i];
			/* acquire: pairs with the release that made it a slab after
			 * its fields were set (slab.c's new_slab), so fn sees them */
			if (atomic_load_explicit(&d->kind, memory_order_acquire) == SK_SLAB)
				fn(d, arg);
		}
	pthread_mutex_unlock(&P.lock);
}

struct page *page_block(const void *p)
{
	struct segment *seg = page_segment(p);
	unsigned i = (unsigned)(((uintptr_t)p & SEG_MASK) >> PAGE_SHIFT);
	if (i < SEG_HEADER_PAGES)
		return NULL;
	/* Back to the nearest head: at most a largest block's pages. A racy
	 * walk (no lock): the answer is for reports and for blocks the caller
	 * owns, whose heads do not change under it. */
	for (unsigned k = 0; k < (1U << PAGE_MAX_ORDER) && i >= SEG_HEADER_PAGES; k++, i--) {
		unsigned kind = page_kind(&seg->page[i]);
		if (kind != PK_TAIL && kind != PK_META && kind != PK_PIECE)
			return &seg->page[i];
	}
	return NULL;
}

bool page_is_freed(const void *p)
{
	if (!page_ours(p))
		return false;
	struct page *b = page_block(p);
	unsigned k = b ? page_kind(b) : PK_META;
	return (k == PK_FREE || k == PK_PURGING) && (uintptr_t)p - (uintptr_t)page_address(b) < (PAGE_SIZE << b->order);
}
