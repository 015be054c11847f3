// C++ operator new/delete of libuslab-malloc (docs/testing.md row 14): every
// form allocates from uslab (malloc_usable_size accepts the pointer), aligned
// forms align, new of an impossible size throws std::bad_alloc, nothrow
// forms return nullptr, and the new_handler is called before giving up.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <malloc.h>
#include <new>

#define CHECK(c) do { if (!(c)) { std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); std::exit(1); } } while (0)

struct alignas(256) Wide { char b[300]; };

static int handler_calls;
static void handler() { handler_calls++; std::set_new_handler(nullptr); }

int main()
{
	for (std::size_t n : { 1UL, 100UL, 5000UL, 100000UL, 3000000UL }) {
		char *a = new char[n];
		CHECK(malloc_usable_size(a) >= n);
		delete[] a;
		int *b = new int(7);
		CHECK(*b == 7 && malloc_usable_size(b) >= sizeof(int));
		delete b;
		void *c = ::operator new(n, std::nothrow);
		CHECK(c);
		::operator delete(c, std::nothrow);
		void *d = ::operator new(n);
		::operator delete(d, n);
		for (std::size_t al : { 32UL, 256UL, 4096UL, 1UL << 21, 1UL << 23 }) {
			void *e = ::operator new(n, std::align_val_t(al));
			CHECK(((std::uintptr_t)e & (al - 1)) == 0 && malloc_usable_size(e) >= n);
			::operator delete(e, n, std::align_val_t(al));
			void *f = ::operator new[](n, std::align_val_t(al), std::nothrow);
			CHECK(f && ((std::uintptr_t)f & (al - 1)) == 0);
			::operator delete[](f, std::align_val_t(al), std::nothrow);
			void *g = ::operator new[](n, std::align_val_t(al));
			::operator delete[](g, n, std::align_val_t(al));
			void *h = ::operator new(n, std::align_val_t(al), std::nothrow);
			::operator delete(h, std::align_val_t(al));
		}
	}
	Wide *w = new Wide[3];
	CHECK(((std::uintptr_t)w & 255) == 0);
	delete[] w;
	bool threw = false;
	try {
		void *p = ::operator new(SIZE_MAX - 100);
		::operator delete(p);
	} catch (const std::bad_alloc &) {
		threw = true;
	}
	CHECK(threw);
	CHECK(::operator new(SIZE_MAX / 2, std::nothrow) == nullptr);
	CHECK(::operator new[](SIZE_MAX / 2, std::align_val_t(64), std::nothrow) == nullptr);
	std::set_new_handler(handler);
	threw = false;
	try {
		(void)::operator new[](SIZE_MAX / 4);
	} catch (const std::bad_alloc &) {
		threw = true;
	}
	CHECK(threw && handler_calls == 1);
	std::printf("PASS test_malloc_cpp\n");
	return 0;
}
