// C++ operator new and delete for libuslab-malloc (every form: plain, array,
// nothrow, aligned (std::align_val_t), sized). new retries through the
// installed new_handler and throws std::bad_alloc when there is none, as
// the standard asks; the nothrow forms return nullptr. Sizes and alignments
// given to delete are not checked in this build.
//
// No link dependency on libstdc++: loading it costs a C program that
// preloads uslab 1.5 MiB of resident memory. The two libstdc++ functions
// used are weak references, bound when the program is C++ (the only kind
// that calls operator new); this file is built with -fno-exceptions. One
// consequence: a new_handler that throws during a nothrow new lets the
// exception through instead of turning it into nullptr.
#include <cstddef>
#include <cstdlib>
#include <new>

extern "C" {
__attribute__((visibility("hidden"))) void *mf_malloc(std::size_t n);
__attribute__((visibility("hidden"))) void mf_free(void *p);
__attribute__((visibility("hidden"))) void *mf_memalign(std::size_t align, std::size_t n);
__attribute__((visibility("hidden"), noreturn)) void report_fatal(const char *fmt, ...);
}

namespace std {
// libstdc++'s own: throws std::bad_alloc
[[noreturn]] void __throw_bad_alloc() __attribute__((weak));
new_handler get_new_handler() noexcept __attribute__((weak));
} // namespace std

#define EXPORT __attribute__((visibility("default")))

namespace {

void *alloc_or_handle(std::size_t n, std::size_t align, bool nothrow)
{
	for (;;) {
		void *p = align ? mf_memalign(align, n) : mf_malloc(n);
		if (p)
			return p;
		std::new_handler h = std::get_new_handler ? std::get_new_handler() : nullptr;
		if (!h) {
			if (nothrow)
				return nullptr;
			if (std::__throw_bad_alloc)
				std::__throw_bad_alloc();
			report_fatal("operator new: out of memory and no C++ runtime to throw std::bad_alloc");
		}
		h();
	}
}

} // namespace

EXPORT void *operator new(std::size_t n) { return alloc_or_handle(n, 0, false); }
EXPORT void *operator new[](std::size_t n) { return alloc_or_handle(n, 0, false); }
EXPORT void *operator new(std::size_t n, const std::nothrow_t &) noexcept { return alloc_or_handle(n, 0, true); }
EXPORT void *operator new[](std::size_t n, const std::nothrow_t &) noexcept { return alloc_or_handle(n, 0, true); }
EXPORT void *operator new(std::size_t n, std::align_val_t a) { return alloc_or_handle(n, (std::size_t)a, false); }
EXPORT void *operator new[](std::size_t n, std::align_val_t a) { return alloc_or_handle(n, (std::size_t)a, false); }
EXPORT void *operator new(std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept
{
	return alloc_or_handle(n, (std::size_t)a, true);
}
EXPORT void *operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept
{
	return alloc_or_handle(n, (std::size_t)a, true);
}

EXPORT void operator delete(void *p) noexcept { mf_free(p); }
EXPORT void operator delete[](void *p) noexcept { mf_free(p); }
EXPORT void operator delete(void *p, const std::nothrow_t &) noexcept { mf_free(p); }
EXPORT void operator delete[](void *p, const std::nothrow_t &) noexcept { mf_free(p); }
EXPORT void operator delete(void *p, std::size_t) noexcept { mf_free(p); }
EXPORT void operator delete[](void *p, std::size_t) noexcept { mf_free(p); }
EXPORT void operator delete(void *p, std::align_val_t) noexcept { mf_free(p); }
EXPORT void operator delete[](void *p, std::align_val_t) noexcept { mf_free(p); }
EXPORT void operator delete(void *p, std::size_t, std::align_val_t) noexcept { mf_free(p); }
EXPORT void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { mf_free(p); }
EXPORT void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { mf_free(p); }
EXPORT void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { mf_free(p); }
