// A signal comparison as a stream memory wait: HIP's hipStreamWaitValue64 (and CUDA's
// cuStreamWaitValue64) make a stream wait until the word, masked, is >= a value, == a value, or
// shares a set bit with it. rocshmem_map.hpp uses this where its headers declare no
// rocshmem_signal_wait_until_on_stream. Kept free of vendor headers, so tests/test_host_stream_wait.py
// compiles it with g++ and checks it against plain comparisons.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "../backend.hpp"
#include "../common/dtype.hpp"

namespace unishmem::gpu {

enum class WaitValueTest { geq, eq, and_ };  // (word & mask) >= value, == value, & value != 0

struct WaitValue {
  WaitValueTest test;
  std::uint64_t value;
  std::uint64_t mask;
};

// The exact stream form of `signal cmp value`, or nullopt where none is exact. No rewrite that
// is only nearly right: a stream wait that is wrong hangs or lets the stream run early, silently.
inline std::optional<WaitValue> wait_value_for(Cmp cmp, std::uint64_t value) {
  constexpr std::uint64_t all = ~std::uint64_t(0);
  switch (cmp) {
    case Cmp::eq: return WaitValue{WaitValueTest::eq, value, all};
    case Cmp::ge: return WaitValue{WaitValueTest::geq, value, all};
    case Cmp::gt:  // x > v is x >= v + 1, but no word exceeds 2**64-1 (v + 1 would wrap to 0)
      if (value == all) return std::nullopt;
      return WaitValue{WaitValueTest::geq, value + 1, all};
    case Cmp::ne:  // x != 0 is x & ~0 != 0; x != v for other v has no form
      if (value == 0) return WaitValue{WaitValueTest::and_, all, all};
      return std::nullopt;
    case Cmp::lt:
    case Cmp::le: break;  // the tests only ever ask for "large enough", "equal" or "some bit set"
  }
  return std::nullopt;
}

// The error for a comparison wait_value_for refuses; `who` names the backend and its primitive.
inline std::string wait_value_refusal(const std::string& who, Cmp cmp, std::uint64_t value) {
  return who + " cannot make a stream wait for signal " + cmp_name(cmp) + " " + std::to_string(value) + " (CMP." +
         cmp_enum_name(cmp) + "): its stream waits test >=, == and set bits only, which express CMP.EQ, "
         "CMP.GE, CMP.GT of any value but 2**64-1 and CMP.NE 0 exactly. Nothing was enqueued; "
         "rt.signal_wait_until waits on the host for any comparison";
}

}  // namespace unishmem::gpu
