// nvcuda::wmma's warp tasks (wmma.h): each call of a warp runs once, when all 32 lanes have
// reached it, on every lane's fragment.
#include "tools/cuda_emulator/wmma.h"

#include <library_types.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "tools/cuda_emulator/host_math.h"

namespace alloy::emulator::wmma {
namespace {

constexpr unsigned int kLanes = 32;
constexpr unsigned int kSide = 16;  // m = n = k
constexpr unsigned int kTile = kSide * kSide;

// Where element `e` of `lane`'s x[] lies in the tile (row * 16 + column). Lane l's first 8
// elements are slots 8l to 8l+7; the second 8 of a __half operand are lane l+16's (modulo 32),
// so each element is in two lanes. A multiply by an odd number, a bijection modulo 256 that
// differs for each use, then scrambles the slots: x[] copied between fragments of different
// uses lands elsewhere, as it may on a GPU.
unsigned int tile_index(Use use, unsigned int lane, unsigned int e) {
  static constexpr unsigned int multiplier[] = {37, 101, 59};
  static constexpr unsigned int offset[] = {5, 11, 0};
  const unsigned int slot = (lane * 8 + e % 8 + e / 8 * (kTile / 2)) % kTile;
  const auto u = static_cast<unsigned int>(use);
  return (slot * multiplier[u] + offset[u]) % kTile;
}

std::uint64_t code(FragmentType type) {
  return static_cast<std::uint64_t>(type.use) | static_cast<std::uint64_t>(type.element) << 8 |
         static_cast<std::uint64_t>(type.order) << 32;
}

FragmentType decode(std::uint64_t word) {
  return {static_cast<Use>(word & 0xff), static_cast<cudaDataType_t>(word >> 8 & 0xffffff),
          static_cast<Order>(word >> 32)};
}

// "matrix_a __half row_major", "accumulator float".
std::string name_of(FragmentType type) {
  static constexpr const char* uses[] = {"matrix_a", "matrix_b", "accumulator"};
  const char* element = type.element == CUDA_R_16F    ? "__half"
                        : type.element == CUDA_R_16BF ? "__nv_bfloat16"
                                                      : "float";
  std::string name = std::string(uses[static_cast<int>(type.use)]) + " " + element;
  if (type.use != Use::accumulator) {
    name += type.order == Order::col_major ? " col_major" : " row_major";
  }
  return name;
}

std::string address(std::uint64_t pointer) {
  char text[32];
  std::snprintf(text, sizeof text, "%#llx", static_cast<unsigned long long>(pointer));
  return text;
}

// A load's or store's: uniform = {fragment type, pointer, ldm, memory order}.
struct MemoryPart : WarpTaskPart {
  void* x = nullptr;  // the lane's fragment
};

// An mma_sync's: uniform = {d's, a's, b's and c's fragment types}.
struct MmaPart : WarpTaskPart {
  void* d = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;
};

std::string describe_memory(const WarpTaskPart& part) {
  const std::uint64_t* uniform = part.uniform;
  return "pass a " + name_of(decode(uniform[0])) + " fragment, pointer " + address(uniform[1]) +
         ", ldm " + std::to_string(uniform[2]) +
         (static_cast<Order>(uniform[3]) == Order::col_major ? ", column major" : ", row major");
}

std::string describe_mma(const WarpTaskPart& part) {
  const std::uint64_t* uniform = part.uniform;
  return "pass d " + name_of(decode(uniform[0])) + ", a " + name_of(decode(uniform[1])) + ", b " +
         name_of(decode(uniform[2])) + ", c " + name_of(decode(uniform[3]));
}

// What a load or store of every lane addresses, checked as CUDA documents it: a 256-bit
// aligned pointer, ldm a multiple of 16 bytes.
struct Memory {
  FragmentType type;
  char* pointer;
  unsigned int ldm;
  Order order;
  std::size_t bytes;  // of an element

  explicit Memory(const WarpTaskPart& part)
      : type(decode(part.uniform[0])),
        pointer(reinterpret_cast<char*>(static_cast<std::uintptr_t>(part.uniform[1]))),
        ldm(static_cast<unsigned int>(part.uniform[2])),
        order(static_cast<Order>(part.uniform[3])),
        bytes(element_size(type.element)) {
    if (part.uniform[1] % 32 != 0) {
      throw std::invalid_argument("pointer " + address(part.uniform[1]) +
                                  " is not 256-bit (32-byte) aligned");
    }
    if (ldm * bytes % 16 != 0) {
      throw std::invalid_argument("ldm " + std::to_string(ldm) + " is not a multiple of " +
                                  std::to_string(16 / bytes) + " (16 bytes of " +
                                  std::to_string(bytes) + "-byte elements)");
    }
  }

  // The tile element at `index` (row * 16 + column).
  char* at(unsigned int index) const {
    const std::size_t row = index / kSide;
    const std::size_t column = index % kSide;
    return pointer + (order == Order::row_major ? row * ldm + column : column * ldm + row) * bytes;
  }
};

void run_load(const WarpTaskPart* const* parts) {
  const Memory memory(*parts[0]);
  const int elements = lane_elements(memory.type.use, memory.type.element);
  for (unsigned int lane = 0; lane < kLanes; ++lane) {
    auto* x = static_cast<char*>(static_cast<const MemoryPart*>(parts[lane])->x);
    for (int e = 0; e < elements; ++e) {
      const unsigned int index = tile_index(memory.type.use, lane, static_cast<unsigned int>(e));
      std::memcpy(x + static_cast<std::size_t>(e) * memory.bytes, memory.at(index), memory.bytes);
    }
  }
}

void run_store(const WarpTaskPart* const* parts) {
  const Memory memory(*parts[0]);
  const int elements = lane_elements(memory.type.use, memory.type.element);
  for (unsigned int lane = 0; lane < kLanes; ++lane) {
    const auto* x = static_cast<const char*>(static_cast<const MemoryPart*>(parts[lane])->x);
    for (int e = 0; e < elements; ++e) {
      const unsigned int index = tile_index(memory.type.use, lane, static_cast<unsigned int>(e));
      std::memcpy(memory.at(index), x + static_cast<std::size_t>(e) * memory.bytes, memory.bytes);
    }
  }
}

// The tile that the lanes' fragments (`operand` of each part) hold, in fp32. std::invalid_argument
// where two lanes hold different values of one element: x[] was changed other than uniformly,
// which depends on a layout that CUDA leaves unspecified.
template <class Operand>
std::array<float, kTile> gather(FragmentType type, const WarpTaskPart* const* parts,
                                Operand operand, const char* name) {
  const cudaDataType_t data = type.element;
  const std::size_t bytes = element_size(data);
  const int elements = lane_elements(type.use, type.element);
  std::array<float, kTile> tile{};
  std::array<std::uint32_t, kTile> bits{};
  std::array<unsigned int, kTile> holder;
  holder.fill(kLanes);
  for (unsigned int lane = 0; lane < kLanes; ++lane) {
    const void* x = static_cast<const MmaPart*>(parts[lane])->*operand;
    for (int e = 0; e < elements; ++e) {
      const unsigned int index = tile_index(type.use, lane, static_cast<unsigned int>(e));
      std::uint32_t element = 0;
      std::memcpy(&element, static_cast<const char*>(x) + static_cast<std::size_t>(e) * bytes,
                  bytes);
      if (holder[index] == kLanes) {
        holder[index] = lane;
        bits[index] = element;
        tile[index] = load_element(x, data, static_cast<std::size_t>(e));
      } else if (bits[index] != element) {
        throw std::invalid_argument(
            "lanes " + std::to_string(holder[index]) + " and " + std::to_string(lane) +
            " hold different values of " + name + "'s element (" + std::to_string(index / kSide) +
            ", " + std::to_string(index % kSide) +
            "): its x[] was changed other than uniformly across the warp, which depends on the "
            "fragment's layout (unspecified)");
      }
    }
  }
  return tile;
}

void run_mma(const WarpTaskPart* const* parts) {
  const std::uint64_t* uniform = parts[0]->uniform;
  const FragmentType d_type = decode(uniform[0]);
  const std::array<float, kTile> a = gather(decode(uniform[1]), parts, &MmaPart::a, "a");
  const std::array<float, kTile> b = gather(decode(uniform[2]), parts, &MmaPart::b, "b");
  const std::array<float, kTile> c = gather(decode(uniform[3]), parts, &MmaPart::c, "c");
  std::array<float, kTile> d{};
  for (unsigned int row = 0; row < kSide; ++row) {
    for (unsigned int column = 0; column < kSide; ++column) {
      float sum = c[row * kSide + column];
      // An exact product added with one rounding: what fma computes.
      for (unsigned int k = 0; k < kSide; ++k)
        sum = std::fma(a[row * kSide + k], b[k * kSide + column], sum);
      d[row * kSide + column] = sum;
    }
  }
  const cudaDataType_t data = d_type.element;
  const int elements = lane_elements(d_type.use, d_type.element);
  for (unsigned int lane = 0; lane < kLanes; ++lane) {
    void* x = static_cast<const MmaPart*>(parts[lane])->d;
    for (int e = 0; e < elements; ++e) {
      store_element(x, data, static_cast<std::size_t>(e),
                    d[tile_index(d_type.use, lane, static_cast<unsigned int>(e))]);
    }
  }
}

constexpr WarpTask kLoad{"wmma::load_matrix_sync", describe_memory, run_load};
constexpr WarpTask kStore{"wmma::store_matrix_sync", describe_memory, run_store};
constexpr WarpTask kMma{"wmma::mma_sync", describe_mma, run_mma};

void memory_task(const WarpTask& task, FragmentType type, void* x, const void* pointer,
                 unsigned int ldm, Order order) {
  MemoryPart part;
  part.uniform[0] = code(type);
  part.uniform[1] = reinterpret_cast<std::uintptr_t>(pointer);
  part.uniform[2] = ldm;
  part.uniform[3] = static_cast<std::uint64_t>(order);
  part.x = x;
  warp_task(task, part);
}

}  // namespace

void load(FragmentType type, void* x, const void* pointer, unsigned int ldm, Order order) {
  memory_task(kLoad, type, x, pointer, ldm, order);
}

void store(FragmentType type, void* pointer, const void* x, unsigned int ldm, Order order) {
  // The task writes through part.x only for a load.
  memory_task(kStore, type, const_cast<void*>(x), pointer, ldm, order);
}

void mma(FragmentType d_type, void* d, FragmentType a_type, const void* a, FragmentType b_type,
         const void* b, FragmentType c_type, const void* c) {
  MmaPart part;
  part.uniform[0] = code(d_type);
  part.uniform[1] = code(a_type);
  part.uniform[2] = code(b_type);
  part.uniform[3] = code(c_type);
  part.d = d;
  part.a = a;
  part.b = b;
  part.c = c;
  warp_task(kMma, part);
}

}  // namespace alloy::emulator::wmma
