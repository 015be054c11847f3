// new_delete: a C++ program whose operator new and delete are uslab's.
//
// Linked with libuslab-malloc (CMake: uslab::malloc; pkg-config:
// uslab-malloc), every allocation of the program goes to uslab: malloc,
// std::string, the containers, new and delete in all their forms, aligned
// new included. Nothing in the code says so; the program proves it by
// asking uslab about the blocks new returned (uslab_malloc_usable_size()
// aborts on a pointer uslab did not hand out) and by watching its memory
// statistics grow and shrink with the program's objects.
//
// Build against an installed uslab:
//   c++ -O2 -o new_delete new_delete.cc $(pkg-config --cflags --libs uslab-malloc)
// or with CMake: target_link_libraries(new_delete PRIVATE uslab::malloc).
#include <uslab.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

struct Order {
	std::uint64_t id;
	std::string customer;
	std::vector<int> items;
};

// Over-aligned: operator new(size_t, std::align_val_t).
struct alignas(128) Counter {
	std::uint64_t hits[4];
};

std::uint64_t in_use_bytes()
{
	uslab_malloc_info mi{};
	mi.version = USLAB_MALLOC_INFO_VERSION;
	if (uslab_malloc_get_info(&mi) != 0) {
		std::perror("uslab_malloc_get_info");
		std::exit(1);
	}
	return mi.in_use_bytes;
}

void check(bool ok, const char *what)
{
	if (!ok) {
		std::fprintf(stderr, "new_delete: %s\n", what);
		std::exit(1);
	}
}

} // namespace

int main()
{
	const std::uint64_t before = in_use_bytes();

	std::map<std::uint64_t, std::unique_ptr<Order>> orders;
	for (std::uint64_t i = 0; i < 20000; i++) {
		auto o = std::make_unique<Order>();
		o->id = i;
		o->customer = "customer number " + std::to_string(i % 977);
		o->items.assign(static_cast<std::size_t>(i % 13) + 1, static_cast<int>(i));
		orders.emplace(i, std::move(o));
	}
	// The blocks of new are uslab's: asking uslab their size would abort
	// with "uslab: fatal: invalid malloc_usable_size" otherwise.
	Order *some = orders.at(12345).get();
	check(uslab_malloc_usable_size(some) >= sizeof(Order), "usable size of a new'd Order");

	auto counters = std::make_unique<Counter[]>(100);
	check(reinterpret_cast<std::uintptr_t>(counters.get()) % alignof(Counter) == 0,
	      "aligned operator new[] returned a misaligned block");
	check(uslab_malloc_usable_size(counters.get()) >= 100 * sizeof(Counter), "usable size of Counter[100]");

	const std::uint64_t during = in_use_bytes();
	std::printf("new_delete: 20000 orders in a std::map: uslab holds %llu bytes more than at start\n",
		    static_cast<unsigned long long>(during - before));
	check(during > before + 20000 * sizeof(Order), "uslab did not see the program's objects");

	orders.clear();
	counters.reset();
	const std::uint64_t after = in_use_bytes();
	std::printf("new_delete: after delete: %llu bytes in use (%llu at start)\n",
		    static_cast<unsigned long long>(after), static_cast<unsigned long long>(before));
	check(after < during, "delete did not give the memory back to uslab");

	std::printf("new_delete: runs on uslab %d (built against %s)\n", uslab_version(), USLAB_VERSION_STRING);
	return 0;
}
