/*
 * Process options in kernel boot-parameter syntax, from one environment
 * variable read once at start:
 *
 *   USLAB_OPTIONS="slab_nomerge slub_max_order=1 skbuff:cpu_partial=256"
 *
 * Tokens are separated by white space. Each process option is declared once
 * in OPTIONS below (name, kind, field, range) and the parser and the
 * defaults come from it (man/uslab-options.7 documents them; keep it in
 * step). "NAME:key=value" tunes the cache called
 * NAME when it is created (keys as uslab_cache_tune_set()). An unknown or
 * malformed token gets one warning line naming it and is ignored. Nothing
 * here allocates: the per-cache table is static.
 */
#include "cpu.h"
#include "debug.h"
#include "bgthread.h"

#include <stdlib.h>
#include <string.h>

struct uslab_opts opt = {
	.max_order = SLUB_MAX_ORDER_DEFAULT,
	.cpu_partial = -1,
	.sheaf_capacity = -1,
	.cpu_mode = -1,
	.barn_full = -1,
	.barn_empty = -1,
	.cpu_backend = CPU_BACKEND_AUTO,
};

/* X(name, alias, kind, field, max): kind FLAG sets field to 1 and takes
 * no value; UINT takes a decimal value in [0, max]. */
#define OPTIONS(X) \
	X("slab_nomerge",     "slub_nomerge",     FLAG, nomerge,     1) \
	X("slub_max_order",   "slab_max_order",   UINT, max_order,   PAGE_MAX_ORDER) \
	X("slub_min_order",   "slab_min_order",   UINT, min_order,   PAGE_MAX_ORDER) \
	X("slub_min_objects", "slab_min_objects", UINT, min_objects, SLAB_MAX_OBJECTS) \
	X("slub_cpu_partial", "slab_cpu_partial", UINT, cpu_partial, 65535) \
	X("slub_sheaf_capacity", "slab_sheaf_capacity", UINT, sheaf_capacity, SHEAF_MAX_CAPACITY) \
	X("slub_cpu_mode",    "slab_cpu_mode",    UINT, cpu_mode,    CPU_NR_MODES - 1) \
	X("slub_barn_full",   "slab_barn_full",   UINT, barn_full,   BARN_MAX_SHEAVES) \
	X("slub_barn_empty",  "slab_barn_empty",  UINT, barn_empty,  BARN_MAX_SHEAVES) \
	X("show_stats",       "show_stats",       FLAG, show_stats,  1) \
	X("export",           "export",           FLAG, export_stats, 1) \
	X("report_continue",  "report_continue",  FLAG, report_continue, 1) \
	X("slab_freelist_random", "slub_freelist_random", FLAG, freelist_random, 1) \
	X("hardened",         "hardened",         FLAG, hardened,    1)

/* Options of other modules' variables: X(name, alias, kind, var, max,
 * bare), var an lvalue; OPTUINT takes =N in [0, max] or nothing (then
 * `bare`). KFENCE (kfence.c): on by default, or "kfence": one allocation
 * every kfence_ms (100); kfence=N about one in N; kfence=0 (or
 * kfence_ms=0) none; kfence_pool=N objects in the pool (0: the default). background_thread (bgthread.c):
 * bare or =1 on, =0 off, not given -1 (the library's default). */
#define MODULE_OPTIONS(X) \
	X("kfence",           "kfence",           OPTUINT, kfence_interval, KFENCE_INTERVAL_MAX, KFENCE_BY_TIME) \
	X("kfence_ms",        "kfence_ms",        UINT, kfence_ms, KFENCE_MS_MAX, 0) \
	X("kfence_pool",      "kfence_pool",      UINT, kfence_pool_objects, KFENCE_POOL_MAX, 0) \
	X("decay_ms",         "dirty_decay_ms",   UINT, page_purge_delay_ms, 3600000, 0) \
	X("decay_dirty_max",  "decay_dirty_max",  UINT, page_dirty_max_mb, 1048576, 0) \
	X("background_thread", "background_thread", OPTUINT, bg_option, 1, 1)

enum opt_kind { FLAG, UINT, OPTUINT };

/* Per-cache settings from "NAME:key=value", applied at creation. */
#define CACHE_OPTS_MAX 32
static struct cache_opt {
	char name[USLAB_NAME_MAX + 1];
	char key[16];
	unsigned long value;
} cache_opts[CACHE_OPTS_MAX];
static unsigned nr_cache_opts;

static bool parse_ulong(const char *s, size_t n, unsigned long *out)
{
	unsigned long v = 0;
	if (!n)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9' || v > (~0UL - 9) / 10)
			return false;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	*out = v;
	return true;
}

static bool streq_n(const char *a, size_t n, const char *lit)
{
	return strlen(lit) == n && !memcmp(a, lit, n);
}

static void warn(const char *tok, size_t n, const char *why)
{
	char t[96];
	size_t k = MIN(n, sizeof t - 1);
	memcpy(t, tok, k);
	t[k] = 0;
	report_line("USLAB_OPTIONS: ignoring '%s%s': %s", t, n > k ? "..." : "", why);
}

/*
 * slub_debug[=LETTERS[,cache,...]]: LETTERS from F Z P U T (case-insensitive;
 * none or "=" alone: FZPU), then the caches it applies to (none: all), as
 * the kernel's boot option. "slub_debug=-" turns it off.
 */
static bool parse_debug(const char *tok, size_t n)
{
	size_t klen = 0;
	while (klen < n && tok[klen] != '=')
		klen++;
	if (!streq_n(tok, klen, "slub_debug") && !streq_n(tok, klen, "slab_debug"))
		return false;
	const char *v = klen < n ? tok + klen + 1 : tok + n, *end = tok + n;
	unsigned flags = 0;
	bool any = false;
	for (; v < end && *v != ','; v++) {
		switch (*v | 0x20) {
		case 'f': flags |= DBG_F; break;
		case 'z': flags |= DBG_Z; break;
		case 'p': flags |= DBG_P; break;
		case 'u': flags |= DBG_U; break;
		case 't': flags |= DBG_T; break;
		case '-': flags = 0; any = true; continue;
		default:
			warn(tok, n, "unknown slub_debug letter (F, Z, P, U, T)");
			return true;
		}
		any = true;
	}
	if (!any)
		flags = DBG_F | DBG_Z | DBG_P | DBG_U;
	size_t list = (size_t)(end - v);   /* ",a,b" or empty */
	if (list + 2 > sizeof opt.debug_caches) {
		warn(tok, n, "cache list too long");
		return true;
	}
	opt.debug = flags;
	opt.debug_caches[0] = 0;
	if (list > 1) {
		memcpy(opt.debug_caches, v, list);
		opt.debug_caches[list] = ',';
		opt.debug_caches[list + 1] = 0;
	}
	return true;
}

static void parse_token(const char *tok, size_t n)
{
	if (parse_debug(tok, n))
		return;
	const char *eq = memchr(tok, '=', n);
	const char *colon = memchr(tok, ':', eq ? (size_t)(eq - tok) : n);
	size_t klen = eq ? (size_t)(eq - tok) : n;
	unsigned long v = 0;
	bool has_val = eq != NULL;
	int mode;
	if (streq_n(tok, klen, "cpu_backend")) {   /* auto, rseq (per CPU) or tls (per thread) */
		static const char *const names[] = { "auto", "rseq", "tls" };
		for (unsigned i = 0; has_val && i < 3; i++)
			if (streq_n(eq + 1, n - klen - 1, names[i])) {
				opt.cpu_backend = (int)i;
				return;
			}
		warn(tok, n, "expected cpu_backend=auto, rseq or tls");
		return;
	}
	if (has_val && klen >= 8 && streq_n(eq - 8, 8, "cpu_mode") &&
	    (mode = cpu_mode_parse(eq + 1, n - klen - 1)) >= 0)
		v = (unsigned long)mode;   /* a mode by name: slub_cpu_mode=slqb, NAME:cpu_mode=home */
	else if (has_val && !parse_ulong(eq + 1, n - klen - 1, &v)) {
		warn(tok, n, "the value is not a decimal number");
		return;
	}
	if (colon) {
		size_t nlen = (size_t)(colon - tok), keylen = klen - nlen - 1;
		if (!nlen || nlen > USLAB_NAME_MAX || !has_val) {
			warn(tok, n, "expected NAME:key=value");
			return;
		}
		if (!cache_tune_known(colon + 1, keylen)) {
			warn(tok, n, "unknown cache tunable (cpu_mode, sheaf_capacity, barn_full, barn_empty, "
				     "cpu_partial, min_partial, order, freebatch, hiwater, limit, batchcount, "
				     "sharedfactor)");
			return;
		}
		if (nr_cache_opts == CACHE_OPTS_MAX) {
			warn(tok, n, "too many per-cache options");
			return;
		}
		struct cache_opt *co = &cache_opts[nr_cache_opts++];
		memcpy(co->name, tok, nlen);
		co->name[nlen] = 0;
		memcpy(co->key, colon + 1, keylen);
		co->key[keylen] = 0;
		co->value = v;
		return;
	}
#define XV(name, alias, kind, var, hi, bare) \
	if (streq_n(tok, klen, name) || streq_n(tok, klen, alias)) { \
		if (kind != OPTUINT && (kind == FLAG) == has_val) { \
			warn(tok, n, kind == FLAG ? "takes no value" : "needs =N"); \
		} else if (kind != FLAG && v > (unsigned long)(hi)) { \
			warn(tok, n, "value out of range"); \
		} else { \
			var = (__typeof__(var))(has_val ? v : (unsigned long)(bare)); \
		} \
		return; \
	}
#define X(name, alias, kind, field, hi) XV(name, alias, kind, opt.field, hi, 1)
	OPTIONS(X)
	MODULE_OPTIONS(XV)
#undef XV
#undef X
	warn(tok, n, "unknown option");
}

void options_parse(const char *s)
{
	while (s && *s) {
		while (*s == ' ' || *s == '\t' || *s == '\n')
			s++;
		const char *t = s;
		while (*s && *s != ' ' && *s != '\t' && *s != '\n')
			s++;
		if (s > t)
			parse_token(t, (size_t)(s - t));
	}
}

static const char *const mode_names[CPU_NR_MODES] = {
	[CPU_CLASSIC] = "classic", [CPU_SHEAVES] = "sheaves", [CPU_HOME] = "home", [CPU_SLQB] = "slqb",
	[CPU_SLAB] = "slab",
};

int cpu_mode_parse(const char *v, size_t n)
{
	for (unsigned m = 0; m < CPU_NR_MODES; m++)
		if (streq_n(v, n, mode_names[m]))
			return (int)m;
	return -1;
}

const char *cpu_mode_name(unsigned mode)
{
	return mode < CPU_NR_MODES ? mode_names[mode] : "?";
}

void options_init(void)
{
	options_parse(getenv("USLAB_OPTIONS"));
}

void options_apply_cache(struct uslab_cache *s)
{
	for (unsigned i = 0; i < nr_cache_opts; i++) {
		struct cache_opt *co = &cache_opts[i];
		if (strcmp(co->name, s->name))
			continue;
		if (cache_tune_set(s, co->key, co->value))
			report_line("USLAB_OPTIONS: ignoring '%s:%s=%lu': value out of range for cache '%s'",
				    co->name, co->key, co->value, s->name);
	}
}

bool options_names_cache(const char *name)
{
	for (unsigned i = 0; i < nr_cache_opts; i++)
		if (!strcmp(cache_opts[i].name, name))
			return true;
	return false;
}
