// The logic every backend shares, written once above a few primitives each backend supplies.
//
// NOTE [shared layer]: like PyTorch's SymmetricMemory, one interface (backend.hpp), the shared
// logic above it here, and the backends as thin adapters. Every collective call goes the same way:
// take this PE's turn, let the backend refuse what it cannot do (prepare), publish and compare the
// Call of every member (enter, NOTE [collective descriptor]), then hand the work to the backend
// (the run_* primitives and the team hooks). Allocation, frees, team queries and team-slot
// claiming live here too. A backend supplies its team table, enter and payload, and the work.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../backend.hpp"
#include "allocator.hpp"
#include "collective.hpp"
#include "wait.hpp"

namespace unishmem {

// What every backend keeps of a team.
struct TeamInfo {
  std::vector<int> members;  // world PEs, in team order
  std::uint64_t id = 0;      // team_identity(members)
  int my_index = -1;
  int channel = 0;           // the slot whose barrier and Calls it uses (a full team: the world's)
};

// The team in slot `team` of a backend's table (const or not); ValueError if this PE has none there.
template <class Teams> auto& team_in(Teams& teams, int team) {
  if (team < 0 || team >= int(teams.size()) || !teams[team])
    throw Error(ErrorKind::value, "team handle " + std::to_string(team) + " is not a team this PE belongs to");
  return *teams[team];
}

class BackendBase : public Backend {
 public:
  // max_teams: the team slots the backend has (at most 64: slots in use travel as one bitmap word).
  BackendBase(int pe, int n_pes, std::size_t heap_size, int max_teams, WaitPolicy policy);

  // Called periodically by every slow wait (the bindings: Ctrl-C); throws to end it.
  void set_wait_check(WaitCheck check) { wait_check_ = std::move(check); }

  int my_pe() const final { return pe_; }
  int n_pes() const final { return n_pes_; }
  std::size_t heap_size() const final { return heap_size_; }

  Addr malloc(std::size_t bytes, DType dtype) final;
  void free(Addr local) final;
  std::size_t heap_free_bytes() const final { return allocator_.free_bytes(); }

  int team_my_pe(int team) const final { return team_info(team).my_index; }
  int team_n_pes(int team) const final { return int(team_info(team).members.size()); }
  int team_translate_pe(int src_team, int pe, int dst_team) const final;
  int team_split_strided(int parent, int start, int stride, int size) final;
  std::pair<int, int> team_split_2d(int parent, int xrange) final;
  void team_destroy(int team) final;

  void barrier(int team, Stream s) final;
  void sync(int team, Stream s) final;
  void broadcast(int team, Addr dest, Addr source, std::size_t bytes, DType type, int root, Stream s) final;
  void fcollect(int team, Addr dest, Addr source, std::size_t bytes_per_pe, DType type, Stream s) final;
  void alltoall(int team, Addr dest, Addr source, std::size_t bytes_per_pe, DType type, Stream s) final;
  void reduce(int team, Addr dest, Addr source, std::size_t nelems, DType type, ReduceOp op, Stream s) final;
  void reducescatter(int team, Addr dest, Addr source, std::size_t nelems_out, DType type, ReduceOp op,
                     Stream s) final;
  void reject_collective(int team) final;

 protected:
  // Holds this PE's turn for one collective call (begin_turn / end_turn).
  struct Turn {
    explicit Turn(BackendBase& b) : backend(b) {}
    Turn(const Turn&) = delete;
    ~Turn() { backend.end_turn(); }
    BackendBase& backend;
  };
  Turn turn() {
    begin_turn();
    return Turn(*this);
  }

  // What a wait waits for, as its stall warning, timeout and hang report say; `seen`: the word's bits now.
  std::string signal_wait_text(Addr sig, Cmp cmp, std::uint64_t value, std::uint64_t seen) const;
  std::string value_wait_text(Addr ptr, DType type, Cmp cmp, std::uint64_t value, std::uint64_t seen) const;
  std::string any_wait_text(Addr ptr, std::size_t stride, Cmp cmp, const std::vector<std::uint64_t>& values) const;
  // The first i whose word at ptr + i * stride compares true against values[i] (by test()), if any.
  std::optional<std::size_t> first_ready(Addr ptr, std::size_t stride, DType type, Cmp cmp,
                                         const std::vector<std::uint64_t>& values);

  // ---- what each backend supplies ----
  // The team in a slot; raises ValueError for a slot that holds no team of this PE.
  virtual const TeamInfo& team_info(int team) const = 0;
  virtual std::uint64_t teams_in_use() const = 0;  // this PE's slots in use, as a bitmap
  // Publishes `call` and `payload` to the team's members, passes a barrier of the team and raises
  // SymmetryError on every member unless all made the same call (NOTE [collective descriptor]).
  virtual void enter(int team, Call call, std::uint64_t payload = 0) = 0;
  virtual std::uint64_t payload(int team, int i) const = 0;  // member i's, in the call last entered on `team`
  // Before `call` is published: raises where the backend cannot make it (every PE alike).
  virtual void prepare(const Call&) {}
  // Collective calls of one PE take turns; the host backend's programs of a launch call them concurrently.
  virtual void begin_turn() {}
  virtual void end_turn() {}
  // After the split's check, with free slots claimed on every member of the parent: makes the
  // team(s) this PE belongs to. split_strided returns the slot, or kTeamInvalid for a non-member.
  virtual int split_strided(int parent, int slot, int start, int stride, int size) = 0;
  virtual void split_2d(int parent, int xslot, int yslot, int xrange) = 0;
  virtual void destroy_team(int team) = 0;
  // The work of each collective, after its check.
  virtual void run_barrier(int team, Stream s) = 0;
  virtual void run_sync(int team, Stream s) = 0;
  virtual void run_broadcast(int team, Addr dest, Addr source, std::size_t bytes, int root, Stream s) = 0;
  virtual void run_fcollect(int team, Addr dest, Addr source, std::size_t bytes_per_pe, Stream s) = 0;
  virtual void run_alltoall(int team, Addr dest, Addr source, std::size_t bytes_per_pe, Stream s) = 0;
  virtual void run_reduce(int team, Addr dest, Addr source, std::size_t nelems, DType type, ReduceOp op,
                          Stream s) = 0;
  virtual void run_reducescatter(int team, Addr dest, Addr source, std::size_t nelems_out, DType type, ReduceOp op,
                                 Stream s) = 0;

  const int pe_, n_pes_;
  const std::size_t heap_size_;
  Allocator allocator_;
  WaitPolicy policy_;
  WaitCheck wait_check_;

 private:
  // A collective call: this PE's turn, the backend's refusal if any, the check, then the work.
  template <class Run> void collective(int team, const Call& call, Run&& run) {
    const Turn t = turn();
    prepare(call);
    enter(team, call);
    run();
  }
  // The first `count` (1 or 2) slots free on every member of `parent`, from the payloads of a
  // split just entered on it.
  std::array<int, 2> claim_slots(int parent, int count) const;

  const int max_teams_;
};

}  // namespace unishmem
