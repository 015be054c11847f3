/*
 * fork() in a threaded program: the child gets one thread and a copy of
 * every lock as it was. Before fork we take every allocator lock (in the
 * documented order), so that the child's copies are unlocked states of a
 * consistent heap; parent and child then release them. Slabs that other
 * threads held as CPU slabs stay allocated in the child (those threads do
 * not exist there); their objects can still be freed.
 */
#include "slab.h"

static void fork_prepare(void)
{
	pthread_mutex_lock(&cache_mutex);
	for (struct uslab_cache *s = cache_list; s; s = s->next)
		pthread_mutex_lock(&s->node.list_lock);
	pthread_mutex_lock(&cache_cache.node.list_lock);
	pthread_mutex_lock(&cache_cpu_cache.node.list_lock);
	pthread_mutex_lock(&cache_thread_cache.node.list_lock);
	pthread_mutex_lock(&cache_queue_cache.node.list_lock);
	page_fork_prepare();
}

static void fork_release(void)
{
	page_fork_release();
	pthread_mutex_unlock(&cache_queue_cache.node.list_lock);
	pthread_mutex_unlock(&cache_thread_cache.node.list_lock);
	pthread_mutex_unlock(&cache_cpu_cache.node.list_lock);
	pthread_mutex_unlock(&cache_cache.node.list_lock);
	for (struct uslab_cache *s = cache_list; s; s = s->next)
		pthread_mutex_unlock(&s->node.list_lock);
	pthread_mutex_unlock(&cache_mutex);
}

void fork_init(void)
{
	pthread_atfork(fork_prepare, fork_release, fork_release);
}
