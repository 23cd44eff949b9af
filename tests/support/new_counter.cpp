#include "tests/support/new_counter.h"

#include <cstdlib>
#include <new>

namespace alloy::test {

namespace {
thread_local NewCounts counts;
}  // namespace

NewCounts thread_new_counts() {
  return counts;
}

}  // namespace alloy::test

// The replacements: malloc and free, with this thread's count. The array and sized forms
// reach these through the standard library's defaults.
void* operator new(std::size_t bytes) {
  ++alloy::test::counts.calls;
  alloy::test::counts.bytes += bytes;
  if (void* pointer = std::malloc(bytes == 0 ? 1 : bytes)) return pointer;
  throw std::bad_alloc();
}

void operator delete(void* pointer) noexcept {
  std::free(pointer);
}

void operator delete(void* pointer, std::size_t) noexcept {
  std::free(pointer);
}
