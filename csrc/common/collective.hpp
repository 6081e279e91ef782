// What a PE called in a collective, as every backend publishes it to the other members.
//
// NOTE [collective descriptor]: every collective call (allocation, free, team split and
// destroy, barrier, sync, finalize and each data collective) publishes one Call before any
// check of its own can raise, passes a barrier of the team, then compares the Calls of every
// member: any difference raises SymmetryError on every member, naming what each PE called.
// A PE that rejected its own arguments publishes a `rejected` Call, so the others raise too
// instead of waiting for it, and the barrier counts stay equal: the job stays usable.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "../backend.hpp"

namespace unishmem {

enum class CallOp : std::uint8_t {
  none = 0, barrier, sync, broadcast, fcollect, alltoall, reduce, reducescatter,
  alloc, free, split_strided, split_2d, team_destroy, finalize, rejected
};

constexpr int kCallWords = 7;
using CallWords = std::array<std::uint64_t, kCallWords>;

struct Call {
  CallOp op = CallOp::none;
  DType dtype = DType::f16;        // of the buffers (alloc: of the allocation)
  ReduceOp redop = ReduceOp::sum;
  std::uint32_t root = 0;          // broadcast
  std::uint64_t bytes = 0;         // buffer bytes (per PE where the op says so); free: the heap offset
  std::int64_t a = 0, b = 0, c = 0;  // split_strided: start, stride, size; split_2d: xrange
  // Filled in by the backend: the team's slot and identity, and how many calls the PE has
  // made on the barrier this call uses (a PE that skipped one is at another count).
  int team = 0;
  std::uint64_t team_id = 0;
  std::uint64_t seq = 0;

  CallWords pack() const;
  static Call unpack(const std::uint64_t* w);
};

// A team's identity across PEs: a hash of its world members in team order. With the slot it
// tells apart teams a mismatched program may confuse (the world and an equal sub-team).
std::uint64_t team_identity(const std::vector<int>& members);

// Called once some member's Call differs from `mine`: calls[i] is what members[i] (a world
// PE) published. The message lists every PE's call, the same on every member but for the
// opening, which names what this PE called.
[[noreturn]] void raise_mismatch(const std::vector<int>& members, const std::vector<CallWords>& calls,
                                 const CallWords& mine);

}  // namespace unishmem
