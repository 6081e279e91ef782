// The host backend: one POSIX shared-memory segment per PE, every segment
// mapped by every PE. Segment = control area (below) + symmetric heap.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../backend.hpp"
#include "allocator.hpp"
#include "segment.hpp"
#include "wait.hpp"

namespace unishmem::host {

constexpr int kMaxTeams = 64;   // team slots; a team's handle is its slot
constexpr int kXchgWords = 8;   // words one PE contributes to an internal exchange
constexpr std::size_t kControlBytes = 64 * 1024;

enum PeState : std::uint32_t { kCreated = 1, kRunning = 2, kFinalized = 3, kAbandoned = 4 };

// NOTE [control area]: every word is written only by the PE that owns the
// segment and read by its peers; that single-writer rule is what lets the
// barrier and the exchange work without locks.
struct alignas(64) Padded {
  std::uint64_t value;
};
struct ControlArea {
  std::uint64_t magic;
  std::uint64_t heap_size;
  std::int32_t pe, n_pes, pid;
  std::uint32_t state;
  Padded arrive[kMaxTeams];         // barrier arrivals per team slot, monotonic
  Padded teams_in_use;              // bitmap of slots this PE belongs to
  Padded waits;                     // odd while this PE is in a slow wait (see NOTE [deadlock])
  char waiting_for[192];            // what that wait is for, for the deadlock report
  Padded deadlock_verdict;          // written by the PE that found a deadlock: our `waits` value then
  // What this PE's collective on each slot is, by barrier parity (see enter_collective).
  std::uint64_t collective[kMaxTeams][2][2];
  alignas(64) std::uint64_t xchg[kXchgWords];
};
static_assert(sizeof(ControlArea) <= kControlBytes);

struct Team {
  std::vector<int> members;         // world PEs, in team order
  std::vector<std::uint64_t> base;  // each member's arrive value when the team was made
  int my_index = -1;
  std::uint64_t epoch = 0;
};

class HostBackend final : public Backend {
 public:
  // Creates this PE's segment. Then, once every PE has created its own:
  // attach_peers(); and once every PE has attached: unlink_own_segment().
  HostBackend(std::string token, int pe, int n_pes, std::size_t heap_size, WaitPolicy policy);
  ~HostBackend() override;
  void attach_peers();
  void unlink_own_segment();
  void set_wait_check(WaitCheck check) { external_check_ = std::move(check); }
  static void unlink_job(const std::string& token, int n_pes);

  int my_pe() const override { return pe_; }
  int n_pes() const override { return n_pes_; }
  Addr heap_base() const override { return reinterpret_cast<Addr>(heap(pe_)); }
  std::size_t heap_size() const override { return heap_size_; }
  Addr peer_heap_base(int pe) const { return reinterpret_cast<Addr>(heap(pe)); }

  Addr malloc(std::size_t bytes, DType dtype) override;
  void free(Addr local) override;
  std::size_t heap_free_bytes() const override { return allocator_.free_bytes(); }
  Addr peer_ptr(Addr local, int pe) const override { return translate(local, pe); }

  int team_my_pe(int team) const override { return team_ref(team).my_index; }
  int team_n_pes(int team) const override { return int(team_ref(team).members.size()); }
  int team_translate_pe(int src_team, int pe, int dst_team) const override;
  int team_split_strided(int parent, int start, int stride, int size) override;
  std::pair<int, int> team_split_2d(int parent, int xrange) override;
  void team_destroy(int team) override;

  void put(Addr dest, Addr source, std::size_t bytes, int pe, Stream) override;
  void get(Addr dest, Addr source, std::size_t bytes, int pe, Stream) override;
  void put_signal(Addr dest, Addr source, std::size_t bytes, Addr sig, std::uint64_t value, SignalOp op, int pe,
                  Stream) override;
  void signal_op(Addr sig, std::uint64_t value, SignalOp op, int pe, Stream) override;
  std::uint64_t signal_wait_until(Addr sig, Cmp cmp, std::uint64_t value, Stream) override;
  std::uint64_t signal_fetch(Addr sig) override;
  void wait_until(Addr ptr, DType type, Cmp cmp, std::uint64_t value) override;
  bool test(Addr ptr, DType type, Cmp cmp, std::uint64_t value) override;
  void quiet(Stream) override;
  void fence() override;
  std::uint64_t atomic(AtomicOp op, DType type, Addr dest, std::uint64_t value, std::uint64_t cond,
                       int pe) override;

  void barrier(int team, Stream) override;
  void sync(int team, Stream) override;
  void broadcast(int team, Addr dest, Addr source, std::size_t bytes, int root, Stream) override;
  void fcollect(int team, Addr dest, Addr source, std::size_t bytes_per_pe, Stream) override;
  void alltoall(int team, Addr dest, Addr source, std::size_t bytes_per_pe, Stream) override;
  void reduce(int team, Addr dest, Addr source, std::size_t nelems, DType type, ReduceOp op, Stream) override;
  void reducescatter(int team, Addr dest, Addr source, std::size_t nelems_out, DType type, ReduceOp op,
                     Stream) override;

  void reject_collective(int team) override;
  void finalize() override;
  void abandon() override;

 private:
  ControlArea* ctl(int pe) const { return reinterpret_cast<ControlArea*>(maps_[pe].data()); }
  char* heap(int pe) const { return maps_[pe].data() + kControlBytes; }
  Addr translate(Addr local, int pe) const {
    return local - reinterpret_cast<Addr>(heap(pe_)) + reinterpret_cast<Addr>(heap(pe));
  }
  Team& team_ref(int team);
  const Team& team_ref(int team) const;
  int claim_slot(std::uint64_t taken, int skip = -1) const;
  void make_team(int slot, std::vector<int> members);

  // awaited: the PE whose action ends the wait, or -1 when any PE's could.
  template <class Done, class Describe>
  void wait(Done&& done, Describe&& describe, int awaited = -1);
  void check_peers(const std::string& waiting_for, int awaited);
  void check_deadlock();
  [[noreturn]] void raise_deadlock();
  void team_barrier(int team);
  // Internal all-gather of a few words over a team (two team barriers).
  std::vector<std::array<std::uint64_t, kXchgWords>> exchange(int team, const std::uint64_t* words, int n);
  // Opens a collective: publishes what this PE calls, passes a team barrier and
  // checks every member called the same (op, sizes, dtype, root, reduction).
  void enter_collective(int team, int op, std::size_t bytes, int dtype = 0, int root = 0, int redop = 0);
  void leave(bool collective_barrier, PeState state);
  void check_symmetric_call(std::uint64_t kind, std::uint64_t a, std::uint64_t b, const char* what);

  std::string token_;
  int pe_, n_pes_;
  std::size_t heap_size_;
  WaitPolicy policy_;
  SpinState spin_;
  WaitCheck external_check_;
  std::vector<Mapping> maps_;
  std::vector<int> pids_;
  Allocator allocator_;
  std::array<std::optional<Team>, kMaxTeams> teams_;
  std::uint64_t call_seq_ = 0;  // symmetric calls so far (alloc, free)
  std::vector<std::uint64_t> deadlock_snapshot_;  // every PE's `waits` when all were first seen waiting
  std::chrono::steady_clock::time_point deadlock_since_;
  bool unlinked_ = false;
  bool finalized_ = false;
};

}  // namespace unishmem::host
