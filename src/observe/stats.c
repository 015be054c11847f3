/*
 * Statistics: stat item names, per-cache snapshots, and the printers: a
 * table like the kernel's slabinfo tool, /proc/slabinfo 2.1, and JSON.
 * Counters live in each CPU part (written by its thread alone) and, for
 * parts that are gone and for CPU-less paths, in the cache's stat_gone.
 * Readers take cache_mutex so that parts cannot vanish while summed.
 */
#include "cpu.h"
#include "observe.h"
#include "debug.h"

#include <errno.h>
#include <stddef.h>
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
 * The fast paths count into the part's alloc_fast, free_fast, alloc_pcs
 * and free_pcs (one unlocked add each, slab.h's cpu_tick); everything else
 * into stat[]. Read relaxed: a moment old for live threads, exact at
 * quiet points.
 */
static void sum_events_locked(struct uslab_cache *s, uint64_t *ev)
{
	for (unsigned i = 0; i < USLAB_NR_STAT_ITEMS; i++)
		ev[i] = atomic_load_explicit(&s->stat_gone[i], memory_order_relaxed);
	for (struct cpu_cache *c = s->cpu_list; c; c = c->cnext) {
		for (unsigned i = 0; i < USLAB_NR_STAT_ITEMS; i++)
			ev[i] += atomic_load_explicit(&c->stat[i], memory_order_relaxed);
		ev[USLAB_STAT_ALLOC_FASTPATH] += cpu_ctr(&c->alloc_fast);
		ev[USLAB_STAT_FREE_FASTPATH] += cpu_ctr(&c->free_fast);
		ev[USLAB_STAT_ALLOC_PCS] += cpu_ctr(&c->alloc_pcs);
		ev[USLAB_STAT_FREE_PCS] += cpu_ctr(&c->free_pcs);
	}
	pcpu_sum_events(s, ev);   /* the parts of CPUs */
}

void stats_fill_info_locked(struct uslab_cache *named, struct uslab_cache_info *info)
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
	if (cache_cpu_mode(s) == CPU_SLAB) {   /* slab mode lays its slabs out its own way (array.c) */
		unsigned o, objs;
		array_slab_shape(s, &o, &objs);
		oo = o << 16 | objs;
		info->order = o;
		info->objects_per_slab = objs;
	}
	info->cpu_partial = TUNE(s, cpu_partial);
	info->min_partial = (unsigned)TUNE(s, min_partial);
	long slabs = atomic_load_explicit(&s->node.nr_slabs, memory_order_relaxed);
	long objs = atomic_load_explicit(&s->node.total_objects, memory_order_relaxed);
	info->slabs = slabs > 0 ? (uint64_t)slabs : 0;
	info->total_objects = objs > 0 ? (uint64_t)objs : 0;
	info->partial_slabs = atomic_load_explicit(&s->node.nr_partial, memory_order_relaxed);
	sum_events_locked(s, info->events);
	const uint64_t *e = info->events;
	uint64_t allocs = e[USLAB_STAT_ALLOC_FASTPATH] + e[USLAB_STAT_ALLOC_PCS] + e[USLAB_STAT_ALLOC_SLOWPATH] +
			  e[USLAB_STAT_ALLOC_BULK];
	uint64_t frees = e[USLAB_STAT_FREE_FASTPATH] + e[USLAB_STAT_FREE_SLOWPATH] + e[USLAB_STAT_FREE_PCS] +
			 e[USLAB_STAT_FREE_BULK];
	info->allocs = allocs;
	info->allocs_fast = e[USLAB_STAT_ALLOC_FASTPATH] + e[USLAB_STAT_ALLOC_PCS];
	info->frees = frees;
	info->frees_fast = e[USLAB_STAT_FREE_FASTPATH] + e[USLAB_STAT_FREE_PCS];
	info->active_objects = allocs > frees ? allocs - frees : 0;   /* (KFENCE's samples counted too) */
	/* Slabs of mixed orders (after a fallback) make this an estimate. */
	uint64_t per = oo_objects(oo) ? oo_objects(oo) : 1;
	info->slab_bytes = (info->total_objects + per - 1) / per * (PAGE_SIZE << oo_order(oo));
	/* version 2. Another thread's c->slab and sheaf counts are read
	 * without its owner's knowledge: relaxed loads of aligned words, never
	 * dereferenced, so at worst the numbers are a moment old. */
	for (struct cpu_cache *c = s->cpu_list; c; c = c->cnext) {
		if (__atomic_load_n(&c->slab, __ATOMIC_RELAXED))
			info->cpu_slabs++;
		info->cpu_parts++;
		info->owned_slabs += atomic_load_explicit(&c->own_slabs, memory_order_relaxed);
		info->sheaf_objects += __atomic_load_n(&c->n, __ATOMIC_RELAXED) +
				       atomic_load_explicit(&c->spare_n, memory_order_relaxed);
	}
	pcpu_count(s, &info->cpu_parts, &info->sheaf_objects);   /* the parts of CPUs */
	info->cpu_queue = 0;
	info->has_ctor = s->ctor != NULL;
	/* version 3 */
	info->sheaf_capacity = TUNE(s, sheaf_capacity);
	/* version 4 */
	info->cpu_mode = cache_cpu_mode(s);
	info->freebatch = TUNE(s, freebatch);
	info->hiwater = TUNE(s, hiwater);
	info->barn_full_max = TUNE(s, barn_full_max);
	info->barn_empty_max = TUNE(s, barn_empty_max);
	/* version 5 */
	info->limit = TUNE(s, limit);
	info->batchcount = TUNE(s, batchcount);
	info->sharedfactor = TUNE(s, sharedfactor);
	info->free_slabs = atomic_load_explicit(&s->array.nr_free, memory_order_relaxed);
	/* the barn's counts together, under its lock (a leaf: fine under
	 * cache_mutex) */
	pthread_mutex_lock(&s->node.barn.lock);
	info->barn_full = atomic_load_explicit(&s->node.barn.nr_full, memory_order_relaxed);
	info->barn_empty = atomic_load_explicit(&s->node.barn.nr_empty, memory_order_relaxed);
	info->barn_objects = atomic_load_explicit(&s->node.barn.objects, memory_order_relaxed);
	pthread_mutex_unlock(&s->node.barn.lock);
}

/* Versions 1 and 2: events[] had the first 30 stat items. */
#define V2_EVENTS 30
struct cache_info_v2 {
	unsigned version;
	char name[USLAB_NAME_MAX + 1];
	char alias_of[USLAB_NAME_MAX + 1];
	unsigned aliases;
	unsigned long flags;
	size_t object_size, slab_object_size, align;
	unsigned order, min_order, objects_per_slab, cpu_partial, min_partial;
	uint64_t slabs, partial_slabs, total_objects, active_objects, slab_bytes;
	uint64_t events[V2_EVENTS];
	uint64_t cpu_slabs;   /* version 2 from here */
	unsigned cpu_queue, has_ctor;
};
_Static_assert(USLAB_NR_STAT_ITEMS <= USLAB_STAT_EVENTS_MAX, "room for every stat item");
_Static_assert(USLAB_STAT_ALLOC_FAILED == V2_EVENTS - 1, "the first 30 stat items keep their places");

int uslab_cache_get_info(struct uslab_cache *s, struct uslab_cache_info *info)
{
	if (!s || !info || info->version < 1 || info->version > USLAB_CACHE_INFO_VERSION) {
		errno = EINVAL;
		return -1;
	}
	unsigned version = info->version;
	struct uslab_cache_info full;
	pthread_mutex_lock(&cache_mutex);
	stats_fill_info_locked(s, &full);
	pthread_mutex_unlock(&cache_mutex);
	if (version == USLAB_CACHE_INFO_VERSION) {
		memcpy(info, &full, sizeof full);
		return 0;
	}
	if (version == 3 || version == 4) {   /* each version's fields end where the next's begin */
		memcpy(info, &full, version == 3 ? offsetof(struct uslab_cache_info, cpu_mode)
						 : offsetof(struct uslab_cache_info, limit));
		info->version = version;
		return 0;
	}
	/* an older caller's layout: never written past its own fields */
	struct cache_info_v2 old;
	memset(&old, 0, sizeof old);
	old.version = version;
	memcpy(old.name, full.name, sizeof old.name);
	memcpy(old.alias_of, full.alias_of, sizeof old.alias_of);
	old.aliases = full.aliases;
	old.flags = full.flags;
	old.object_size = full.object_size;
	old.slab_object_size = full.slab_object_size;
	old.align = full.align;
	old.order = full.order;
	old.min_order = full.min_order;
	old.objects_per_slab = full.objects_per_slab;
	old.cpu_partial = full.cpu_partial;
	old.min_partial = full.min_partial;
	old.slabs = full.slabs;
	old.partial_slabs = full.partial_slabs;
	old.total_objects = full.total_objects;
	old.active_objects = full.active_objects;
	old.slab_bytes = full.slab_bytes;
	memcpy(old.events, full.events, sizeof old.events);
	old.cpu_slabs = full.cpu_slabs;
	old.has_ctor = full.has_ctor;
	memcpy(info, &old, version == 1 ? offsetof(struct cache_info_v2, cpu_slabs) : sizeof old);
	return 0;
}

/* The n-th entry of the walk "each real cache, then its aliases" (list
 * order); false past the end. cache_mutex is taken and dropped per entry so
 * that printers call their output function without allocator locks. */
static bool nth_info(unsigned n, struct uslab_cache_info *info)
{
	bool found = false;
	pthread_mutex_lock(&cache_mutex);
	for (struct uslab_cache *s = cache_list; s && !found; s = s->next) {
		struct uslab_cache *hit = NULL;
		if (n-- == 0)
			hit = s;
		for (struct uslab_cache *a = s->aliases; a && !hit; a = a->alias_next)
			if (n-- == 0)
				hit = a;
		if (hit) {
			stats_fill_info_locked(hit, info);
			found = true;
		}
	}
	pthread_mutex_unlock(&cache_mutex);
	return found;
}

/* The kernel slabinfo tool's store_size(): 24.8M, 999.4K, or plain bytes. */
static size_t stats_fmt_size(char *buf, size_t size, uint64_t v)
{
	uint64_t div = 1;
	char unit = 0;
	if (v > 1000000000ULL) {
		div = 100000000ULL;
		unit = 'G';
	} else if (v > 1000000ULL) {
		div = 100000ULL;
		unit = 'M';
	} else if (v > 1000ULL) {
		div = 100;
		unit = 'K';
	}
	if (!unit)
		return fmt_buf(buf, size, "%llu", (unsigned long long)v);
	v /= div;
	return fmt_buf(buf, size, "%llu.%llu%c", (unsigned long long)(v / 10), (unsigned long long)(v % 10), unit);
}

/* The kernel slabinfo tool's Flg letters. */
static size_t stats_fmt_flags(char *buf, size_t size, unsigned long flags, unsigned aliases)
{
	char f[16];
	size_t n = 0;
	if (aliases)
		f[n++] = '*';
	if (flags & USLAB_HWCACHE_ALIGN)
		f[n++] = 'A';
	if (flags & USLAB_POISON)
		f[n++] = 'P';
	if (flags & USLAB_RED_ZONE)
		f[n++] = 'Z';
	if (flags & USLAB_CONSISTENCY_CHECKS)
		f[n++] = 'F';
	if (flags & USLAB_STORE_USER)
		f[n++] = 'U';
	if (flags & USLAB_TRACE)
		f[n++] = 'T';
	f[n] = 0;
	return fmt_buf(buf, size, "%s", f);
}

/* Copy a cache name for /proc/slabinfo: white space becomes '_'. */
static void slabinfo_name(char *dst, const char *src)
{
	size_t i = 0;
	for (; src[i] && i < USLAB_NAME_MAX; i++)
		dst[i] = (src[i] == ' ' || src[i] == '\t' || src[i] == '\n' || src[i] == '\r') ? '_' : src[i];
	dst[i] = 0;
}

/* JSON string (quoted, escaped) into buf. */
static size_t stats_json_str(char *buf, size_t size, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;
#define PUT(c) do { if (n + 1 < size) buf[n] = (c); n++; } while (0)
	PUT('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			PUT('\\');
			PUT((char)*p);
		} else if (*p < 0x20 || *p == 0x7f) {
			PUT('\\'); PUT('u'); PUT('0'); PUT('0');
			PUT(hex[*p >> 4]); PUT(hex[*p & 15]);
		} else {
			PUT((char)*p);
		}
	}
	PUT('"');
#undef PUT
	if (size)
		buf[n < size ? n : size - 1] = 0;
	return n < size ? n : (size ? size - 1 : 0);
}

/* Percentage of allocations and frees the fast paths made, in tenths, of
 * all the program made (bulk calls included: the totals uslabinfo's %Fast
 * divides by too). */
static unsigned fast_pct10(const struct uslab_cache_info *info)
{
	uint64_t all = info->allocs + info->frees;
	return all ? (unsigned)((info->allocs_fast + info->frees_fast) * 1000 / all) : 0;
}

static void print_table(void (*write_fn)(void *, const char *), void *arg, unsigned long opts)
{
	char line[320], space[32], dist[48], flg[16];
	struct uslab_cache_info info;
	write_fn(arg, "Name                   Objects Objsize           Space Slabs/Part/Cpu  O/S O %Fr %Ef Fast% Flg\n");
	for (unsigned i = 0; nth_info(i, &info); i++) {
		if (info.alias_of[0])
			continue;
		stats_fmt_size(space, sizeof space, info.slab_bytes);
		fmt_buf(dist, sizeof dist, "%llu/%llu/%llu", (unsigned long long)info.slabs,
			(unsigned long long)info.partial_slabs, (unsigned long long)info.cpu_slabs);
		stats_fmt_flags(flg, sizeof flg, info.flags, info.aliases);
		unsigned fr = info.slabs ? (unsigned)(info.partial_slabs * 100 / info.slabs) : 100;
		unsigned ef = info.slab_bytes ? (unsigned)(info.active_objects * info.object_size * 100 / info.slab_bytes)
					      : 100;
		unsigned f10 = fast_pct10(&info);
		fmt_buf(line, sizeof line, "%-21s %8llu %7zu %15s %14s %4u %1u %3u %3u %3u.%u %s\n", info.name,
			(unsigned long long)info.active_objects, info.object_size, space, dist, info.objects_per_slab,
			info.order, fr, ef, f10 / 10, f10 % 10, flg);
		write_fn(arg, line);
	}
	for (unsigned i = 0; nth_info(i, &info); i++) {
		if (!info.alias_of[0])
			continue;
		fmt_buf(line, sizeof line, "alias %s -> %s\n", info.name, info.alias_of);
		write_fn(arg, line);
	}
	struct uslab_process_info pi = { .version = USLAB_PROCESS_INFO_VERSION };
	if (!uslab_process_get_info(&pi)) {
		char m[32], r[32], u[32];
		stats_fmt_size(m, sizeof m, pi.mapped_bytes);
		stats_fmt_size(r, sizeof r, pi.rss_bytes);
		stats_fmt_size(u, sizeof u, pi.used_bytes);
		size_t k = fmt_buf(line, sizeof line, "process: mapped %s in %llu segments, resident %s, in use %s", m,
				   (unsigned long long)pi.segments, r, u);
		if (pi.kfence_ms)
			k += fmt_buf(line + k, sizeof line - k, "; KFENCE every %u ms", pi.kfence_ms);
		else if (pi.kfence_interval)
			k += fmt_buf(line + k, sizeof line - k, "; KFENCE 1 in %u", pi.kfence_interval);
		if (pi.kfence_interval) {
			char kb[32];
			stats_fmt_size(kb, sizeof kb, pi.kfence_pool_bytes);
			k += fmt_buf(line + k, sizeof line - k, ": %llu sampled, %llu in the pool of %u (%s), %llu reports",
				     (unsigned long long)pi.kfence_allocs, (unsigned long long)pi.kfence_in_use,
				     pi.kfence_slots, kb, (unsigned long long)pi.kfence_reports);
		}
		fmt_buf(line + k, sizeof line - k, "\n");
		write_fn(arg, line);
	}
}

static void print_slabinfo(void (*write_fn)(void *, const char *), void *arg)
{
	char line[320], name[USLAB_NAME_MAX + 1];
	struct uslab_cache_info info;
	/* mm/slab_common.c: print_slabinfo_header() */
	write_fn(arg, "slabinfo - version: 2.1\n");
	write_fn(arg, "# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab>"
		      " : tunables <limit> <batchcount> <sharedfactor>"
		      " : slabdata <active_slabs> <num_slabs> <sharedavail>\n");
	/* cache_show(): SLUB reports no tunables and every slab as active;
	 * slab mode, as the kernel's SLAB: its limit, batchcount and
	 * sharedfactor, slabs other than free ones as active, and the
	 * objects in the shared array */
	for (unsigned i = 0; nth_info(i, &info); i++) {
		if (info.alias_of[0])
			continue;
		slabinfo_name(name, info.name);
		bool slab = info.cpu_mode == USLAB_CPU_SLAB;
		uint64_t free_slabs = slab ? info.free_slabs : 0;
		unsigned long active_slabs = info.slabs > free_slabs ? (unsigned long)(info.slabs - free_slabs) : 0;
		fmt_buf(line, sizeof line, "%-17s %6lu %6lu %6u %4u %4d : tunables %4u %4u %4u : slabdata %6lu %6lu %6lu\n",
			name, (unsigned long)MIN(info.active_objects, info.total_objects), (unsigned long)info.total_objects,
			(unsigned)info.slab_object_size, info.objects_per_slab, 1 << info.order, slab ? info.limit : 0,
			slab ? info.batchcount : 0, slab ? info.sharedfactor : 0, active_slabs, (unsigned long)info.slabs,
			slab ? (unsigned long)info.barn_objects : 0UL);
		write_fn(arg, line);
	}
}

static void print_json(void (*write_fn)(void *, const char *), void *arg)
{
	char line[1024], q[2 * 6 * (USLAB_NAME_MAX + 1)], q2[sizeof q];
	struct uslab_cache_info info;
	struct uslab_process_info pi = { .version = USLAB_PROCESS_INFO_VERSION };
	uslab_process_get_info(&pi);
	fmt_buf(line, sizeof line,
		"{\"version\":1,\"process\":{\"cpu_backend\":\"%s\",\"segments\":%llu,\"mapped_bytes\":%llu,"
		"\"used_bytes\":%llu,\"dirty_bytes\":%llu,\"rss_bytes\":%llu,\"free_blocks\":[",
		uslab_cpu_backend(),
		(unsigned long long)pi.segments, (unsigned long long)pi.mapped_bytes,
		(unsigned long long)pi.used_bytes, (unsigned long long)pi.dirty_bytes,
		(unsigned long long)pi.rss_bytes);
	write_fn(arg, line);
	for (unsigned o = 0; o < 10; o++) {
		fmt_buf(line, sizeof line, "%s%llu", o ? "," : "", (unsigned long long)pi.free_blocks[o]);
		write_fn(arg, line);
	}
	fmt_buf(line, sizeof line,
		"],\"kfence\":{\"interval\":%u,\"ms\":%u,\"pool_bytes\":%llu,\"slots\":%u,\"allocs\":%llu,"
		"\"missed\":%llu,\"in_use\":%llu,\"reports\":%llu}",
		pi.kfence_interval, pi.kfence_ms, (unsigned long long)pi.kfence_pool_bytes, pi.kfence_slots,
		(unsigned long long)pi.kfence_allocs,
		(unsigned long long)pi.kfence_missed, (unsigned long long)pi.kfence_in_use,
		(unsigned long long)pi.kfence_reports);
	write_fn(arg, line);
	write_fn(arg, "},\"caches\":[");
	bool first = true;
	for (unsigned i = 0; nth_info(i, &info); i++) {
		if (info.alias_of[0])
			continue;
		stats_json_str(q, sizeof q, info.name);
		fmt_buf(line, sizeof line,
			"%s{\"name\":%s,\"object_size\":%zu,\"slab_object_size\":%zu,\"align\":%zu,\"order\":%u,"
			"\"min_order\":%u,\"objects_per_slab\":%u,\"cpu_partial\":%u,\"min_partial\":%u,"
			"\"sheaf_capacity\":%u,\"barn_full_max\":%u,\"barn_empty_max\":%u,"
			"\"cpu_mode\":%u,\"limit\":%u,\"batchcount\":%u,\"sharedfactor\":%u,\"free_slabs\":%llu,"
			"\"aliases\":%u,\"flags\":%lu,\"ctor\":%s,",
			first ? "" : ",", q, info.object_size, info.slab_object_size, info.align, info.order,
			info.min_order, info.objects_per_slab, info.cpu_partial, info.min_partial, info.sheaf_capacity,
			info.barn_full_max, info.barn_empty_max, info.cpu_mode, info.limit, info.batchcount,
			info.sharedfactor, (unsigned long long)info.free_slabs, info.aliases, info.flags,
			info.has_ctor ? "true" : "false");
		write_fn(arg, line);
		fmt_buf(line, sizeof line,
			"\"slabs\":%llu,\"partial_slabs\":%llu,\"cpu_slabs\":%llu,\"total_objects\":%llu,"
			"\"active_objects\":%llu,\"slab_bytes\":%llu,\"cpu_parts\":%u,\"sheaf_objects\":%llu,"
			"\"barn_full\":%llu,\"barn_empty\":%llu,\"barn_objects\":%llu,\"events\":{",
			(unsigned long long)info.slabs, (unsigned long long)info.partial_slabs,
			(unsigned long long)info.cpu_slabs, (unsigned long long)info.total_objects,
			(unsigned long long)info.active_objects, (unsigned long long)info.slab_bytes, info.cpu_parts,
			(unsigned long long)info.sheaf_objects, (unsigned long long)info.barn_full,
			(unsigned long long)info.barn_empty, (unsigned long long)info.barn_objects);
		write_fn(arg, line);
		for (unsigned k = 0; k < USLAB_NR_STAT_ITEMS; k++) {
			fmt_buf(line, sizeof line, "%s\"%s\":%llu", k ? "," : "", stat_names[k],
				(unsigned long long)info.events[k]);
			write_fn(arg, line);
		}
		write_fn(arg, "}}");
		first = false;
	}
	write_fn(arg, "],\"aliases\":[");
	first = true;
	for (unsigned i = 0; nth_info(i, &info); i++) {
		if (!info.alias_of[0])
			continue;
		stats_json_str(q, sizeof q, info.name);
		stats_json_str(q2, sizeof q2, info.alias_of);
		fmt_buf(line, sizeof line, "%s{\"name\":%s,\"alias_of\":%s,\"object_size\":%zu}", first ? "" : ",", q, q2,
			info.object_size);
		write_fn(arg, line);
		first = false;
	}
	write_fn(arg, "]}\n");
}

void uslab_stats_print(void (*write_fn)(void *arg, const char *text), void *arg, unsigned long opts)
{
	if (!write_fn)
		return;
	switch (opts & USLAB_STATS_FORM_MASK) {
	case USLAB_STATS_JSON:
		print_json(write_fn, arg);
		break;
	case USLAB_STATS_SLABINFO:
		print_slabinfo(write_fn, arg);
		break;
	default:
		print_table(write_fn, arg, opts);
		break;
	}
}

static void write_fd(void *arg, const char *text)
{
	int fd = (int)(intptr_t)arg;
	size_t n = strlen(text);
	while (n) {
		ssize_t w = write(fd, text, n);
		if (w <= 0) {
			if (w < 0 && errno == EINTR)
				continue;
			return;
		}
		text += w;
		n -= (size_t)w;
	}
}

void uslab_stats_print_fd_opts(int fd, unsigned long opts)
{
	int e = errno;
	uslab_stats_print(write_fd, (void *)(intptr_t)fd, opts);
	errno = e;
}

void uslab_stats_print_fd(int fd)
{
	uslab_stats_print_fd_opts(fd, USLAB_STATS_TABLE);
}

int uslab_process_get_info(struct uslab_process_info *info)
{
	if (!info || info->version < 1 || info->version > USLAB_PROCESS_INFO_VERSION) {
		errno = EINVAL;
		return -1;
	}
	/* version 1 callers' struct ends before the KFENCE fields: write
	 * nothing past it */
	unsigned version = info->version;
	size_t size = version == 1   ? offsetof(struct uslab_process_info, kfence_interval)
		      : version == 2 ? offsetof(struct uslab_process_info, kfence_ms)
				     : sizeof *info;
	struct page_info pi;
	page_get_info(&pi);
	memset(info, 0, size);
	info->version = version;
	info->segments = pi.segments;
	info->mapped_bytes = pi.mapped_bytes;
	info->used_bytes = pi.used_bytes;
	info->dirty_bytes = pi.dirty_bytes;
	_Static_assert(sizeof info->free_blocks / sizeof info->free_blocks[0] == PAGE_MAX_ORDER + 1,
		       "free_blocks covers every order");
	memcpy(info->free_blocks, pi.free_blocks, sizeof info->free_blocks);
	info->rss_bytes = os_rss();
	if (version >= 2) {
		struct kfence_stats ks;
		kfence_get_stats(&ks);
		info->kfence_interval = ks.interval;
		info->kfence_slots = ks.slots;
		info->kfence_allocs = ks.allocs;
		info->kfence_missed = ks.missed;
		info->kfence_in_use = ks.in_use;
		info->kfence_reports = ks.reports;
		if (version >= 3) {
			info->kfence_ms = ks.ms;
			info->kfence_pool_bytes = ks.pool_bytes;
		}
	}
	return 0;
}
