// Counts the C++ heap allocations of this thread (operator new), to show that code allocates
// no temporary host buffer, even one the memory statistics never see (a std::vector).
// new_counter.cpp replaces the global operator new and delete; tests/CMakeLists.txt compiles it
// into the test executables that use this header, and only those.
#pragma once

#include <cstddef>

namespace alloy::test {

struct NewCounts {
  std::size_t calls = 0;
  std::size_t bytes = 0;
};

// This thread's counts: other threads (the thread pool, the loader) stay out.
NewCounts thread_new_counts();

}  // namespace alloy::test
