/*
 * conn_pool: a small server loop whose connections and requests live in
 * uslab object caches, the way a kernel subsystem keeps its objects in
 * kmem_caches.
 *
 * The server accepts TCP connections on 127.0.0.1 in an epoll loop. Each
 * connection is a struct conn from the "conn" cache; its constructor puts
 * every object in the closed state once, when its slab is made, so that
 * accepting a connection only fills in what changes. Each request line is
 * parsed into a struct request from the "request" cache, answered and
 * freed: short-lived objects, the allocation pattern slab caches are best
 * at. Client threads open, use and close connections; at the end the
 * program checks that every request was answered and that both caches are
 * empty again, prints their statistics and destroys them.
 *
 *   conn_pool [client-threads [rounds]]     (default 4 threads, 200 rounds)
 *
 * Build against an installed uslab:
 *   cc -O2 -o conn_pool conn_pool.c $(pkg-config --cflags --libs uslab) -pthread
 * or with CMake: find_package(uslab) and target_link_libraries(... uslab::uslab).
 */
#include <uslab.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define CONNS_PER_CLIENT 4      /* connections a client holds open at once */
#define REQUESTS_PER_CONN 8     /* requests on each before it closes */

struct conn {
	int fd;                 /* socket, -1 while the object is free */
	unsigned long served;   /* requests answered on this connection */
	size_t in_len;          /* bytes of an unfinished request line in `in` */
	char in[128];
};

struct request {
	unsigned long id;       /* the number the client sent */
	char verb[8];           /* "PING" */
};

static struct uslab_cache *conn_cache, *request_cache;
static unsigned short port;
static int nclients = 4, rounds = 200;

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* The constructor runs once per object, when its slab is created (not on
 * every allocation): objects are freed back in this state. */
static void conn_ctor(void *p)
{
	struct conn *c = p;
	c->fd = -1;
	c->served = 0;
	c->in_len = 0;
}

static void conn_close(int ep, struct conn *c)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;             /* back to the constructed state */
	c->served = 0;
	c->in_len = 0;
	uslab_cache_free(conn_cache, c);
}

/* Parse one request line ("PING 42") into an object of the request cache. */
static struct request *request_parse(const char *line)
{
	struct request *r = uslab_cache_alloc(request_cache);
	if (!r)
		return NULL;
	if (sscanf(line, "%7s %lu", r->verb, &r->id) != 2 || strcmp(r->verb, "PING")) {
		uslab_cache_free(request_cache, r);
		return NULL;
	}
	return r;
}

/* Answer every complete line in c->in; returns 0, or -1 to drop the connection. */
static int conn_serve(struct conn *c, unsigned long *answered)
{
	char *start = c->in, *nl;
	while ((nl = memchr(start, '\n', c->in_len - (size_t)(start - c->in)))) {
		*nl = 0;
		struct request *r = request_parse(start);
		if (!r)
			return -1;
		char out[32];
		int n = snprintf(out, sizeof out, "PONG %lu\n", r->id);
		uslab_cache_free(request_cache, r);
		if (write(c->fd, out, (size_t)n) != n)
			return -1;
		c->served++;
		(*answered)++;
		start = nl + 1;
	}
	c->in_len -= (size_t)(start - c->in);
	memmove(c->in, start, c->in_len);
	return c->in_len == sizeof c->in ? -1 : 0;
}

/* The server loop: accept, read, answer, close, until stop_fd is readable. */
static unsigned long serve(int lfd, int stop_fd)
{
	int ep = epoll_create1(0);
	if (ep < 0)
		die("epoll_create1");
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev))
		die("epoll_ctl");
	ev.data.ptr = &stop_fd;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, stop_fd, &ev))
		die("epoll_ctl");
	unsigned long answered = 0, open_conns = 0;
	int stopping = 0;
	while (!stopping || open_conns) {
		struct epoll_event evs[64];
		int n = epoll_wait(ep, evs, 64, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("epoll_wait");
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == &stop_fd) {   /* finish the open connections, then stop */
				stopping = 1;
				epoll_ctl(ep, EPOLL_CTL_DEL, stop_fd, NULL);
				continue;
			}
			if (!evs[i].data.ptr) {      /* the listening socket */
				int fd = accept(lfd, NULL, NULL);
				if (fd < 0)
					continue;
				struct conn *c = uslab_cache_alloc(conn_cache);
				if (!c) {            /* out of memory: refuse, keep serving */
					close(fd);
					continue;
				}
				c->fd = fd;
				struct epoll_event cev = { .events = EPOLLIN, .data.ptr = c };
				if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev))
					die("epoll_ctl");
				open_conns++;
				continue;
			}
			struct conn *c = evs[i].data.ptr;
			ssize_t got = read(c->fd, c->in + c->in_len, sizeof c->in - c->in_len);
			if (got <= 0 || (c->in_len += (size_t)got, conn_serve(c, &answered))) {
				conn_close(ep, c);   /* closed by the client, or a bad request */
				open_conns--;
			}
		}
	}
	close(ep);
	return answered;
}

struct server_args {
	int lfd, stop_fd;
	unsigned long answered;   /* out */
};

/* The server runs in a thread of its own; the clients are other threads. */
static void *server_main(void *arg)
{
	struct server_args *sa = arg;
	sa->answered = serve(sa->lfd, sa->stop_fd);
	return NULL;
}

static int connect_local(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a))
		die("connect");
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

/* A client: `rounds` times, open CONNS_PER_CLIENT connections, send
 * REQUESTS_PER_CONN requests on each and check every answer, close them. */
static void *client(void *arg)
{
	unsigned long id = (unsigned long)(size_t)arg * 1000000000UL;
	for (int r = 0; r < rounds; r++) {
		int fds[CONNS_PER_CLIENT];
		for (int i = 0; i < CONNS_PER_CLIENT; i++)
			fds[i] = connect_local();
		for (int q = 0; q < REQUESTS_PER_CONN; q++) {
			for (int i = 0; i < CONNS_PER_CLIENT; i++) {
				char buf[64];
				int n = snprintf(buf, sizeof buf, "PING %lu\n", ++id);
				if (write(fds[i], buf, (size_t)n) != n)
					die("write");
				char want[64];
				int m = snprintf(want, sizeof want, "PONG %lu\n", id);
				size_t have = 0;
				while (have < (size_t)m) {
					ssize_t got = read(fds[i], buf + have, (size_t)m - have);
					if (got <= 0)
						die("read");
					have += (size_t)got;
				}
				if (memcmp(buf, want, (size_t)m)) {
					fprintf(stderr, "conn_pool: wrong answer\n");
					exit(1);
				}
			}
		}
		for (int i = 0; i < CONNS_PER_CLIENT; i++)
			close(fds[i]);
	}
	return NULL;
}

static void print_cache(struct uslab_cache *c)
{
	struct uslab_cache_info info = { .version = USLAB_CACHE_INFO_VERSION };
	if (uslab_cache_get_info(c, &info))
		die("uslab_cache_get_info");
	/* allocs, frees and their fast-path parts are totals that mean the
	 * same in every per-CPU mode (a mode's own events[] count only the
	 * paths that mode has: ALLOC_FASTPATH stays 0 in sheaves mode, for
	 * one) */
	printf("%-8s %4zu-byte objects (stride %zu), %llu in use, %llu slabs, %llu allocations (%llu on the fast path), "
	       "%llu frees (%llu on the fast path)\n",
	       info.name, info.object_size, info.slab_object_size,
	       (unsigned long long)info.active_objects, (unsigned long long)info.slabs,
	       (unsigned long long)info.allocs, (unsigned long long)info.allocs_fast,
	       (unsigned long long)info.frees, (unsigned long long)info.frees_fast);
}

static unsigned long long active(struct uslab_cache *c)
{
	struct uslab_cache_info info = { .version = USLAB_CACHE_INFO_VERSION };
	if (uslab_cache_get_info(c, &info))
		die("uslab_cache_get_info");
	return (unsigned long long)info.active_objects;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		nclients = atoi(argv[1]);
	if (argc > 2)
		rounds = atoi(argv[2]);
	if (nclients < 1 || nclients > 64 || rounds < 1) {
		fprintf(stderr, "usage: conn_pool [client-threads (1..64) [rounds]]\n");
		return 2;
	}

	conn_cache = uslab_cache_create("conn", sizeof(struct conn), 0, USLAB_HWCACHE_ALIGN, conn_ctor);
	request_cache = uslab_cache_create("request", sizeof(struct request), 0, 0, NULL);
	if (!conn_cache || !request_cache)
		die("uslab_cache_create");

	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof a;
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 128) ||
	    getsockname(lfd, (struct sockaddr *)&a, &alen))
		die("listen");
	port = ntohs(a.sin_port);

	int stop[2];
	if (pipe(stop))
		die("pipe");
	struct server_args sa = { lfd, stop[0], 0 };
	pthread_t server_thread, t[64];
	if (pthread_create(&server_thread, NULL, server_main, &sa))
		die("pthread_create");
	for (int i = 0; i < nclients; i++)
		if (pthread_create(&t[i], NULL, client, (void *)(size_t)(i + 1)))
			die("pthread_create");
	for (int i = 0; i < nclients; i++)
		pthread_join(t[i], NULL);
	if (write(stop[1], "", 1) != 1)
		die("write");
	pthread_join(server_thread, NULL);

	unsigned long want = (unsigned long)nclients * (unsigned long)rounds * CONNS_PER_CLIENT * REQUESTS_PER_CONN;
	printf("conn_pool: %d clients answered %lu requests on %lu connections\n", nclients, sa.answered,
	       (unsigned long)nclients * (unsigned long)rounds * CONNS_PER_CLIENT);
	print_cache(conn_cache);
	print_cache(request_cache);
	if (sa.answered != want || active(conn_cache) || active(request_cache)) {
		fprintf(stderr, "conn_pool: expected %lu answers and empty caches\n", want);
		return 1;
	}
	uslab_cache_destroy(request_cache);
	uslab_cache_destroy(conn_cache);
	close(lfd);
	return 0;
}
