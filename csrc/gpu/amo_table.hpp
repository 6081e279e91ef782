// Host-initiated atomics, one function per integer type, over the OpenSHMEM naming that NVSHMEM and
// rocSHMEM share (PREFIX_<type>_atomic_<op>). Values cross as bit patterns in a uint64.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "../backend.hpp"

namespace unishmem::gpu::lib {

template <class T> std::uint64_t amo_bits(T v) {
  static_assert(sizeof(T) <= 8);
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T> T amo_value(std::uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

// What `op` (set, swap, and, or, xor, or a fetch form of one) leaves in a word that held `old`.
template <class T> T amo_result(AtomicOp op, T old, T x) {
  switch (op) {
    case AtomicOp::set: case AtomicOp::swap: return x;
    case AtomicOp::and_: case AtomicOp::fetch_and: return old & x;
    case AtomicOp::or_: case AtomicOp::fetch_or: return old | x;
    case AtomicOp::xor_: case AtomicOp::fetch_xor: return old ^ x;
    default: break;
  }
  throw Error(ErrorKind::value, "atomic op " + std::to_string(int(op)) + " is not made from compare-swap");
}

// `op` as a compare-swap loop, from a first reading `seen`; cas(cond, value) returns what the word held.
// Returns the value replaced. Lock-free: a failed try means another PE's write landed in between.
template <class T, class Cas> T amo_by_compare_swap(AtomicOp op, T x, T seen, Cas&& cas) {
  for (;;) {
    const T was = cas(seen, amo_result(op, seen, x));
    if (was == seen) return was;
    seen = was;
  }
}

}  // namespace unishmem::gpu::lib

// Defines lib::atomic_<name>(op, dest, value, cond, pe); compare_swap sets `value` where dest == cond.
#define UNISHMEM_VENDOR_AMO(PREFIX, T, name)                                                               \
  inline std::uint64_t atomic_##name(AtomicOp op, void* dest, std::uint64_t v, std::uint64_t c, int pe) { \
    auto* p = static_cast<T*>(dest);                                                                       \
    const T x = amo_value<T>(v), y = amo_value<T>(c);                                                      \
    switch (op) {                                                                                          \
      case AtomicOp::fetch: return amo_bits(PREFIX##_##name##_atomic_fetch(p, pe));                        \
      case AtomicOp::set: PREFIX##_##name##_atomic_set(p, x, pe); return 0;                                \
      case AtomicOp::swap: return amo_bits(PREFIX##_##name##_atomic_swap(p, x, pe));                       \
      case AtomicOp::compare_swap: return amo_bits(PREFIX##_##name##_atomic_compare_swap(p, y, x, pe));    \
      case AtomicOp::fetch_add: return amo_bits(PREFIX##_##name##_atomic_fetch_add(p, x, pe));             \
      case AtomicOp::add: PREFIX##_##name##_atomic_add(p, x, pe); return 0;                                \
      case AtomicOp::fetch_inc: return amo_bits(PREFIX##_##name##_atomic_fetch_inc(p, pe));                \
      case AtomicOp::inc: PREFIX##_##name##_atomic_inc(p, pe); return 0;                                   \
      case AtomicOp::fetch_and: return amo_bits(PREFIX##_##name##_atomic_fetch_and(p, x, pe));             \
      case AtomicOp::and_: PREFIX##_##name##_atomic_and(p, x, pe); return 0;                               \
      case AtomicOp::fetch_or: return amo_bits(PREFIX##_##name##_atomic_fetch_or(p, x, pe));               \
      case AtomicOp::or_: PREFIX##_##name##_atomic_or(p, x, pe); return 0;                                 \
      case AtomicOp::fetch_xor: return amo_bits(PREFIX##_##name##_atomic_fetch_xor(p, x, pe));             \
      case AtomicOp::xor_: PREFIX##_##name##_atomic_xor(p, x, pe); return 0;                               \
    }                                                                                                      \
    throw Error(ErrorKind::value, "unknown atomic op " + std::to_string(int(op)));                         \
  }

// All four integer types (each defined by AMO, UNISHMEM_VENDOR_AMO or a vendor's own) and the
// dispatcher lib::atomic(op, dtype, dest, value, cond, pe).
#define UNISHMEM_VENDOR_ATOMICS(PREFIX, LIBNAME, AMO)                                                         \
  AMO(PREFIX, std::int32_t, int32)                                                                            \
  AMO(PREFIX, std::int64_t, int64)                                                                            \
  AMO(PREFIX, std::uint32_t, uint32)                                                                          \
  AMO(PREFIX, std::uint64_t, uint64)                                                                          \
  inline std::uint64_t atomic(AtomicOp op, DType type, void* dest, std::uint64_t v, std::uint64_t c, int pe) { \
    switch (type) {                                                                                           \
      case DType::i32: return atomic_int32(op, dest, v, c, pe);                                               \
      case DType::i64: return atomic_int64(op, dest, v, c, pe);                                               \
      case DType::u32: return atomic_uint32(op, dest, v, c, pe);                                              \
      case DType::u64: return atomic_uint64(op, dest, v, c, pe);                                              \
      default: break;                                                                                         \
    }                                                                                                         \
    throw Error(ErrorKind::value, std::string(LIBNAME " has no host atomics on ") + dtype_name(type));        \
  }
