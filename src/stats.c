/*
 * Statistics: stat item names, per-cache snapshots, the table printer.
 * Counters live in each CPU part (written by its thread alone) and, for
 * parts that are gone and for CPU-less paths, in the cache's stat_gone.
 * Readers take cache_mutex so that parts cannot vanish while summed.
 */
#include "slab.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

static const char *const stat_names[] = {
#define X(n, d) #n,
	USLAB_STAT_ITEMS(X)
#undef X
};
static const char *const stat_descs[] = {
#define X(n, d) d,
	USLAB_STAT_ITEMS(X)
#undef X
};

const char *uslab_stat_name(enum uslab_stat_item i)
{
	return (unsigned)i < USLAB_NR_STAT_ITEMS ? stat_names[i] : NULL;
}

const char *uslab_stat_desc(enum uslab_stat_item i)
{
	return (unsigned)i < USLAB_NR_STAT_ITEMS ? stat_descs[i] : NULL;
}

/*
 * Fast-path allocations of a CPU part: what went onto its free list (slow
 * path refills less slow-path pops and flushes, plus fast frees) less what
 * is on it now. Only the owner can walk its list; another thread's list is
 * counted as allocated, as the kernel's slabinfo counts CPU slabs as full,
 * so such a sum runs ahead by at most one slab per live thread until that
 * thread's next slow path, flush or exit.
 */
uint64_t cpu_alloc_fastpath(struct cpu_cache *c)
{
	uint64_t n = atomic_load_explicit(&c->fl_in, memory_order_relaxed) +
		     atomic_load_explicit(&c->stat[USLAB_STAT_FREE_FASTPATH], memory_order_relaxed);
	if (c->thread && c->thread == cpu_tls.thread)
		for (void *p = c->freelist; p; p = get_freepointer(c->cache, p))
			n--;
	return n;
}

static void sum_events_locked(struct uslab_cache *s, uint64_t *ev)
{
	for (unsigned i = 0; i < USLAB_NR_STAT_ITEMS; i++)
		ev[i] = atomic_load_explicit(&s->stat_gone[i], memory_order_relaxed);
	for (struct cpu_cache *c = s->cpu_list; c; c = c->cnext) {
		for (unsigned i = 0; i < USLAB_NR_STAT_ITEMS; i++)
			ev[i] += atomic_load_explicit(&c->stat[i], memory_order_relaxed);
		ev[USLAB_STAT_ALLOC_FASTPATH] += cpu_alloc_fastpath(c);
	}
}

static void fill_info_locked(struct uslab_cache *named, struct uslab_cache_info *info)
{
	struct uslab_cache *s = cache_root(named);
	memset(info, 0, sizeof *info);
	info->version = USLAB_CACHE_INFO_VERSION;
	memcpy(info->name, named->name, sizeof info->name);
	if (named != s)
		memcpy(info->alias_of, s->name, sizeof info->alias_of);
	for (struct uslab_cache *a = s->aliases; a; a = a->alias_next)
		info->aliases++;
	info->object_size = named->object_size;
	info->flags = s->flags | debug_public_flags(s->debug);
	info->slab_object_size = s->size;
	info->align = named->align;   /* an alias: what it asked for, which its root guarantees */
	uint32_t oo = cache_oo(s);
	info->order = oo_order(oo);
	info->min_order = s->min_order;
	info->objects_per_slab = oo_objects(oo);
	info->cpu_partial = TUNE(s, cpu_partial);
	info->min_partial = (unsigned)TUNE(s, min_partial);
	long slabs = atomic_load_explicit(&s->node.nr_slabs, memory_order_relaxed);
	long objs = atomic_load_explicit(&s->node.total_objects, memory_order_relaxed);
	info->slabs = slabs > 0 ? (uint64_t)slabs : 0;
	info->total_objects = objs > 0 ? (uint64_t)objs : 0;
	info->partial_slabs = atomic_load_explicit(&s->node.nr_partial, memory_order_relaxed);
	sum_events_locked(s, info->events);
	const uint64_t *e = info->events;
	uint64_t allocs = e[USLAB_STAT_ALLOC_FASTPATH] + e[USLAB_STAT_ALLOC_SLOWPATH] + e[USLAB_STAT_ALLOC_PCS] +
			  e[USLAB_STAT_ALLOC_BULK];
	uint64_t frees = e[USLAB_STAT_FREE_FASTPATH] + e[USLAB_STAT_FREE_SLOWPATH] + e[USLAB_STAT_FREE_PCS] +
			 e[USLAB_STAT_FREE_BULK];
	info->active_objects = allocs > frees ? allocs - frees : 0;
	/* Slabs of mixed orders (after a fallback) make this an estimate. */
	uint64_t per = oo_objects(oo) ? oo_objects(oo) : 1;
	info->slab_bytes = (info->total_objects + per - 1) / per * (PAGE_SIZE << oo_order(oo));
}

int uslab_cache_get_info(struct uslab_cache *s, struct uslab_cache_info *info)
{
	if (!s || !info || info->version != USLAB_CACHE_INFO_VERSION) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cache_mutex);
	fill_info_locked(s, info);
	pthread_mutex_unlock(&cache_mutex);
	return 0;
}

void uslab_stats_print(void (*write_fn)(void *arg, const char *text), void *arg, unsigned long opts)
{
	char line[256];
	struct uslab_cache_info info;
	fmt_buf(line, sizeof line, "%-24s %10s %8s %8s %8s %5s %5s %6s\n", "Name", "Objects", "Objsize",
		"Slabs", "Partial", "Order", "O/S", "Fast%");
	write_fn(arg, line);
	pthread_mutex_lock(&cache_mutex);
	for (struct uslab_cache *s = cache_list; s; s = s->next) {
		fill_info_locked(s, &info);
		const uint64_t *e = info.events;
		/* lock- and atomic-free paths: CPU free list and CPU queue */
		uint64_t fast = e[USLAB_STAT_ALLOC_FASTPATH] + e[USLAB_STAT_FREE_FASTPATH] +
				e[USLAB_STAT_ALLOC_PCS] + e[USLAB_STAT_FREE_PCS];
		uint64_t all = fast + e[USLAB_STAT_ALLOC_SLOWPATH] + e[USLAB_STAT_FREE_SLOWPATH];
		unsigned pct10 = all ? (unsigned)(fast * 1000 / all) : 0;
		fmt_buf(line, sizeof line, "%-24s %10llu %8zu %8llu %8llu %5u %5u %4u.%u\n", info.name,
			(unsigned long long)info.active_objects, info.object_size,
			(unsigned long long)info.slabs, (unsigned long long)info.partial_slabs, info.order,
			info.objects_per_slab, pct10 / 10, pct10 % 10);
		write_fn(arg, line);
	}
	for (struct uslab_cache *s = cache_list; s; s = s->next)
		for (struct uslab_cache *a = s->aliases; a; a = a->alias_next) {
			fmt_buf(line, sizeof line, "alias %s -> %s\n", a->name, s->name);
			write_fn(arg, line);
		}
	pthread_mutex_unlock(&cache_mutex);
}

static void write_fd(void *arg, const char *text)
{
	int fd = (int)(intptr_t)arg;
	size_t n = strlen(text);
	while (n) {
		ssize_t w = write(fd, text, n);
		if (w <= 0)
			return;
		text += w;
		n -= (size_t)w;
	}
}

void uslab_stats_print_fd(int fd)
{
	uslab_stats_print(write_fd, (void *)(intptr_t)fd, 0);
}

int uslab_process_get_info(struct uslab_process_info *info)
{
	if (!info || info->version != USLAB_PROCESS_INFO_VERSION) {
		errno = EINVAL;
		return -1;
	}
	struct page_info pi;
	page_get_info(&pi);
	memset(info, 0, sizeof *info);
	info->version = USLAB_PROCESS_INFO_VERSION;
	info->segments = pi.segments;
	info->mapped_bytes = pi.mapped_bytes;
	info->used_bytes = pi.used_bytes;
	info->dirty_bytes = pi.dirty_bytes;
	_Static_assert(sizeof info->free_blocks / sizeof info->free_blocks[0] == PAGE_MAX_ORDER + 1,
		       "free_blocks covers every order");
	memcpy(info->free_blocks, pi.free_blocks, sizeof info->free_blocks);
	info->rss_bytes = os_rss();
	return 0;
}
