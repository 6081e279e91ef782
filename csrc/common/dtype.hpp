// The dtype table's helpers for integer words (waits, tests, atomics) and comparisons, shared by
// every backend; dtype_size and dtype_name are declared in backend.hpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "../backend.hpp"

namespace unishmem {

template <class T> bool compare(T a, Cmp cmp, T b) {
  switch (cmp) {
    case Cmp::eq: return a == b;
    case Cmp::ne: return a != b;
    case Cmp::gt: return a > b;
    case Cmp::ge: return a >= b;
    case Cmp::lt: return a < b;
    case Cmp::le: return a <= b;
  }
  return false;
}

inline const char* cmp_name(Cmp c) {
  static const char* names[] = {"==", "!=", ">", ">=", "<", "<="};
  return names[int(c)];
}
// The name Python gives it (unishmem.CMP.<name>), for messages.
inline const char* cmp_enum_name(Cmp c) {
  static const char* names[] = {"EQ", "NE", "GT", "GE", "LT", "LE"};
  return names[int(c)];
}

template <class T> T from_bits(std::uint64_t v) {
  T x;
  std::memcpy(&x, &v, sizeof(T));  // little-endian: the low bytes
  return x;
}
template <class T> std::uint64_t to_bits(T x) {
  std::uint64_t v = 0;
  std::memcpy(&v, &x, sizeof(T));
  return v;
}

// Calls fn(T{}) with T the C++ type of an integer dtype that waits and atomics take.
template <class Fn> auto with_int_type(DType type, Fn&& fn) {
  switch (type) {
    case DType::i32: return fn(std::int32_t{});
    case DType::i64: return fn(std::int64_t{});
    case DType::u32: return fn(std::uint32_t{});
    case DType::u64: return fn(std::uint64_t{});
    default: break;
  }
  throw Error(ErrorKind::value, std::string("waits and atomics take int32, int64, uint32 or uint64, not ") +
                                    dtype_name(type) + " (dtype code " + std::to_string(int(type)) + ")");
}

// Compares two bit patterns as values of an integer dtype.
inline bool compare_bits(DType type, std::uint64_t a, Cmp cmp, std::uint64_t b) {
  return with_int_type(type, [&](auto zero) {
    using T = decltype(zero);
    return compare(from_bits<T>(a), cmp, from_bits<T>(b));
  });
}

}  // namespace unishmem
