#include "backend_base.hpp"

#include <algorithm>
#include <string>

#include "dtype.hpp"

namespace unishmem {

BackendBase::BackendBase(int pe, int n_pes, std::size_t heap_size, int max_teams, WaitPolicy policy)
    : pe_(pe), n_pes_(n_pes), heap_size_(heap_size), allocator_(heap_size), policy_(policy),
      max_teams_(max_teams) {
  if (n_pes < 1 || pe < 0 || pe >= n_pes)
    throw Error(ErrorKind::value, "PE " + std::to_string(pe) + " of " + std::to_string(n_pes) + " is out of range");
}

// ---- symmetric allocation (NOTE [vendor heap]: one deterministic allocator on every PE) ----------

Addr BackendBase::malloc(std::size_t bytes, DType dtype) {
  const Turn t = turn();
  enter(kTeamWorld, Call{.op = CallOp::alloc, .dtype = dtype, .bytes = bytes});
  const auto offset = allocator_.allocate(bytes);
  if (!offset)
    throw Error(ErrorKind::out_of_memory,
                "symmetric heap exhausted: requested " + std::to_string(bytes) + " bytes, " +
                    std::to_string(allocator_.free_bytes()) + " bytes free (largest free block " +
                    std::to_string(allocator_.largest_free_block()) + ") of " + std::to_string(heap_size_) +
                    "; raise heap_size or UNISHMEM_SYMMETRIC_SIZE");
  return heap_base() + *offset;
}

void BackendBase::free(Addr local) {
  const Turn t = turn();
  const std::size_t offset = local - heap_base();
  enter(kTeamWorld, Call{.op = CallOp::free, .bytes = offset});
  if (local < heap_base() || !allocator_.release(offset))
    throw Error(ErrorKind::value, "heap offset " + std::to_string(offset) + " is not a live symmetric allocation");
}

// ---- waits ---------------------------------------------------------------------------------------

std::string BackendBase::signal_wait_text(Addr sig, Cmp cmp, std::uint64_t value, std::uint64_t seen) const {
  return "signal at heap offset " + std::to_string(sig - heap_base()) + " to become " + cmp_name(cmp) + " " +
         std::to_string(value) + " (it is " + std::to_string(seen) + ")";
}

std::string BackendBase::value_wait_text(Addr ptr, DType type, Cmp cmp, std::uint64_t value,
                                         std::uint64_t seen) const {
  return with_int_type(type, [&](auto zero) {
    using T = decltype(zero);
    return "value at heap offset " + std::to_string(ptr - heap_base()) + " to become " + cmp_name(cmp) + " " +
           std::to_string(from_bits<T>(value)) + " (it is " + std::to_string(from_bits<T>(seen)) + ")";
  });
}

std::string BackendBase::any_wait_text(Addr ptr, std::size_t stride, Cmp cmp,
                                       const std::vector<std::uint64_t>& values) const {
  return "any of " + std::to_string(values.size()) + " values from heap offset " + std::to_string(ptr - heap_base()) +
         " (every " + std::to_string(stride) + " bytes) to become " + cmp_name(cmp) + " " +
         (values.size() ? std::to_string(values[0]) : "") +
         (values.size() > 1 && values[1] != values[0] ? ", ..." : "");
}

std::optional<std::size_t> BackendBase::first_ready(Addr ptr, std::size_t stride, DType type, Cmp cmp,
                                                    const std::vector<std::uint64_t>& values) {
  for (std::size_t i = 0; i < values.size(); ++i)
    if (test(ptr + i * stride, type, cmp, values[i])) return i;
  return std::nullopt;
}

// ---- teams ---------------------------------------------------------------------------------------

int BackendBase::team_translate_pe(int src_team, int pe, int dst_team) const {
  const TeamInfo& src = team_info(src_team);
  const TeamInfo& dst = team_info(dst_team);
  if (pe < 0 || pe >= int(src.members.size())) return -1;
  const auto it = std::find(dst.members.begin(), dst.members.end(), src.members[pe]);
  return it == dst.members.end() ? -1 : int(it - dst.members.begin());
}

std::array<int, 2> BackendBase::claim_slots(int parent, int count) const {
  std::uint64_t taken = 0;
  for (int i = 0; i < team_n_pes(parent); ++i) taken |= payload(parent, i);
  std::array<int, 2> found{-1, -1};
  int k = 0;
  for (int s = 0; s < max_teams_ && k < count; ++s)
    if (!(taken >> s & 1)) found[k++] = s;
  if (k < count)
    throw Error(ErrorKind::generic,
                "all " + std::to_string(max_teams_) + " team slots are in use: destroy teams no longer needed");
  return found;
}

// A split is collective over the parent: every member must ask for the same one. Each also
// publishes the slots it uses, so that the new team's slot is free on all its members.
int BackendBase::team_split_strided(int parent, int start, int stride, int size) {
  const Turn t = turn();
  const Call split{.op = CallOp::split_strided, .a = start, .b = stride, .c = size};
  prepare(split);
  enter(parent, split, teams_in_use());
  return split_strided(parent, claim_slots(parent, 1)[0], start, stride, size);
}

std::pair<int, int> BackendBase::team_split_2d(int parent, int xrange) {
  const Turn t = turn();
  xrange = std::max(1, std::min(xrange, team_n_pes(parent)));  // a wider row is the whole team, whatever the number
  const Call split{.op = CallOp::split_2d, .a = xrange};
  prepare(split);
  enter(parent, split, teams_in_use());
  const auto [xslot, yslot] = claim_slots(parent, 2);
  split_2d(parent, xslot, yslot, xrange);
  return {xslot, yslot};
}

void BackendBase::team_destroy(int team) {
  const Turn t = turn();
  if (team == kTeamWorld || team == kTeamNode)
    throw Error(ErrorKind::value, "the world and node teams cannot be destroyed");
  enter(team, Call{.op = CallOp::team_destroy});  // collective over the team, as in OpenSHMEM
  destroy_team(team);
}

// ---- synchronisation and collectives -------------------------------------------------------------
// Each is checked first (NOTE [collective descriptor]), so that a PE with other arguments, or one
// that rejected its own, makes every member raise instead of hang.

void BackendBase::reject_collective(int team) {
  const Turn t = turn();
  try {
    enter(team, Call{.op = CallOp::rejected});
  } catch (const Error& e) {
    if (e.kind != ErrorKind::symmetry) throw;  // the mismatch is expected; the caller raises its own error
  }
}

void BackendBase::barrier(int team, Stream s) {
  collective(team, Call{.op = CallOp::barrier}, [&] { run_barrier(team, s); });
}

void BackendBase::sync(int team, Stream s) {
  collective(team, Call{.op = CallOp::sync}, [&] { run_sync(team, s); });
}

void BackendBase::broadcast(int team, Addr dest, Addr source, std::size_t bytes, DType type, int root, Stream s) {
  collective(team, Call{.op = CallOp::broadcast, .dtype = type, .root = std::uint32_t(root), .bytes = bytes},
             [&] { run_broadcast(team, dest, source, bytes, root, s); });
}

void BackendBase::fcollect(int team, Addr dest, Addr source, std::size_t bytes, DType type, Stream s) {
  collective(team, Call{.op = CallOp::fcollect, .dtype = type, .bytes = bytes},
             [&] { run_fcollect(team, dest, source, bytes, s); });
}

void BackendBase::alltoall(int team, Addr dest, Addr source, std::size_t bytes, DType type, Stream s) {
  collective(team, Call{.op = CallOp::alltoall, .dtype = type, .bytes = bytes},
             [&] { run_alltoall(team, dest, source, bytes, s); });
}

void BackendBase::reduce(int team, Addr dest, Addr source, std::size_t nelems, DType type, ReduceOp op, Stream s) {
  collective(team, Call{.op = CallOp::reduce, .dtype = type, .redop = op, .bytes = nelems * dtype_size(type)},
             [&] { run_reduce(team, dest, source, nelems, type, op, s); });
}

void BackendBase::reducescatter(int team, Addr dest, Addr source, std::size_t nelems_out, DType type, ReduceOp op,
                                Stream s) {
  collective(team,
             Call{.op = CallOp::reducescatter, .dtype = type, .redop = op, .bytes = nelems_out * dtype_size(type)},
             [&] { run_reducescatter(team, dest, source, nelems_out, type, op, s); });
}

}  // namespace unishmem
