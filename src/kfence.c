/*
 * Sampled guard pages (KFENCE in user space): not built yet. With
 * kfence_interval 0 nothing is ever sampled and no pointer is the pool's.
 */
#include "kfence.h"
#include "slab.h"

unsigned kfence_interval;

void kfence_init(void) {}
unsigned kfence_next_skip(void) { return 0; }
void *kfence_alloc_slow(struct uslab_cache *s, size_t asked, void *caller)
{
	(void)caller;
	cpu_tls.kf_left = 0;
	return slab_alloc_slow(s, cpu_this(s), __builtin_return_address(0), asked);
}
bool kfence_owns(const void *p) { (void)p; return false; }
void kfence_free(void *p, struct uslab_cache *named, void *caller) { (void)p, (void)named, (void)caller; }
size_t kfence_usable(const void *p, const char *what) { (void)p, (void)what; return 0; }
