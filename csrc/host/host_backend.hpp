// The host backend: one POSIX shared-memory segment per PE, every segment
// mapped by every PE. Segment = control area (below) + symmetric heap.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "../backend.hpp"
#include "../common/backend_base.hpp"
#include "../common/collective.hpp"
#include "../common/wait.hpp"
#include "segment.hpp"

namespace unishmem::host {

constexpr int kMaxTeams = 64;   // team slots; a team's handle is its slot
constexpr int kRecordWords = kCallWords + 1;  // a Call, then a word not compared (a split's slots in use)
constexpr std::size_t kControlBytes = 64 * 1024;
constexpr int kMaxWaiters = 256;  // threads of one PE whose waits the deadlock check can judge
constexpr int kMaxSignalPeers = 128;  // peers whose last signal from this PE the hang report shows

enum PeState : std::uint32_t { kCreated = 1, kRunning = 2, kFinalized = 3, kAbandoned = 4 };

// What a wait is for, so that the hang report (pysrc/unishmem/hang.py) can name it.
enum WaitKind : std::int32_t { kWaitTurn = 0, kWaitSignal = 1, kWaitValue = 2, kWaitAny = 3, kWaitBarrier = 4 };

// What a PE in a slow wait waits for: the word at `offset` of PE `pe`'s segment to compare
// `cmp` against `value` (as `dtype`). The deadlock check tests it (NOTE [deadlock]).
struct WaitCond {
  std::uint64_t offset = 0;
  std::uint64_t value = 0;
  std::int32_t pe = 0;
  std::int32_t dtype = 0, cmp = 0;
  std::int32_t kind = kWaitTurn;
};

// One waiting thread as its PE publishes it: a program label (interpreter), the call site (from
// Python, NOTE [wait sites]) and its conditions wait_conds[first, first + count).
struct PublishedWait {
  char label[24];
  char site[96];
  std::uint32_t first, count;
};

// The last signal a PE wrote to one peer (signal_op, put_signal): for the hang report.
struct SignalRecord {
  std::uint64_t offset;  // heap offset of the signal word
  std::uint64_t value;
  std::uint32_t op;      // SignalOp
  std::uint32_t count;   // signals written to that peer so far; 0: none
};

// A PE's waits as another PE reads them from its control area, with the current value of each
// word (bits; nullopt where the word cannot be read).
struct WaitView {
  std::string label, site;
  std::vector<WaitCond> conds;
  std::vector<std::optional<std::uint64_t>> actual;
};
struct PeView {
  int pe = 0;
  std::uint32_t state = 0;  // PeState
  bool waiting = false;     // every live thread of it is in a slow wait
  std::vector<WaitView> waits;
  std::vector<SignalRecord> signals;  // per peer (up to kMaxSignalPeers)
};

// The deadlock, with every PE's waits when it was found (bindings turn it into DeadlockError
// through the shared report formatter).
struct DeadlockFailure : Error {
  std::vector<PeView> pes;
  double seconds;
  DeadlockFailure(const std::string& what, std::vector<PeView> p, double s)
      : Error(ErrorKind::deadlock, what), pes(std::move(p)), seconds(s) {}
};

// NOTE [control area]: every word is written only by the PE that owns the segment and read
// by its peers (except `deadlock_verdict`, see NOTE [deadlock], and the doorbells, which are
// futex words: NOTE [wait phases]); that single-writer rule is what lets the barrier and the
// collective check work without locks.
struct alignas(64) Padded {
  std::uint64_t value;
};
struct ControlArea {
  std::uint64_t magic;
  std::uint64_t heap_size;
  std::int32_t pe, n_pes, pid;
  std::uint32_t state;
  Padded arrive[kMaxTeams];         // barrier arrivals per channel, monotonic
  Padded teams_in_use;              // bitmap of slots this PE belongs to
  Padded waits;                     // odd while every live thread of this PE is in a slow wait (NOTE [deadlock])
  std::uint32_t n_wait_conds;       // their conditions
  WaitCond wait_conds[kMaxWaiters];
  std::uint32_t n_published;        // and who waits for them, for the hang report; kept after the waits
  std::uint64_t published_at;       // end, until the next publication: our `waits` value when published
  PublishedWait published[kMaxWaiters];
  SignalRecord last_signal[kMaxSignalPeers];
  SignalRecord published_signals[kMaxSignalPeers];  // last_signal as it was when the waits were published
  Padded deadlock_verdict;          // written by the PE that found a deadlock: our `waits` value then
  Padded deadlock_seen;             // the verdict once this PE has read everyone's waits for its report
  Padded blamed;                    // 1 + the PE this PE's PeerFailure named; 0 if none
  Doorbell inbox;                   // rung by every write into this PE's heap (put, signals, atomics)
  Doorbell arrived;                 // rung by this PE when it arrives at a barrier
  // Each PE's current Call per channel, by barrier parity (NOTE [collective check]).
  std::uint64_t calls[kMaxTeams][2][kRecordWords];
};
static_assert(sizeof(ControlArea) <= kControlBytes);

// NOTE [barrier channel]: a team whose members are all the PEs synchronises on the world's
// counters and Calls, as full teams of the GPU backend use barrier_all: so a collective on
// the world against one on an equal sub-team (or the node team) meet at one barrier and fail
// the check, instead of each waiting forever for the other.
struct Team : TeamInfo {
  std::vector<std::uint64_t> base;  // a channel's own: each member's arrive value when it was made
};

// NOTE [simulated nodes]: every PE of a host job is on one machine, but a job may be split into
// nodes of node_size consecutive PEs (the last may have fewer), as a multi-host GPU job is: the
// node team is this PE's node, and load/store (peer_ptr, so rt.peer and the device remote_ptr)
// reach only its PEs, while RMA, signals, atomics and collectives reach every PE. So code meant
// for several hosts (hierarchical collectives, kernels on team_node) runs and fails here as there.
class HostBackend final : public BackendBase {
 public:
  // Creates this PE's segment (after checking that every PE's fits /dev/shm). Then, once every
  // PE has created its own: attach_peers(), which reserves this PE's pages; and once every PE has
  // attached: unlink_own_segment().
  // node_size: PEs per simulated node (NOTE [simulated nodes]); n_pes or more is one node.
  HostBackend(std::string token, int pe, int n_pes, std::size_t heap_size, int node_size, WaitPolicy policy);
  ~HostBackend() override;
  void attach_peers();
  void unlink_own_segment();
  // NOTE [wait sites]: called on a waiting thread when its wait turns slow; says where it was called
  // (the Python caller, or the kernel line under the interpreter).
  void set_site_provider(std::function<std::string()> site) { site_ = std::move(site); }
  // Every PE's waits now (read from their control areas), for the hang watchdog; with `deadlock`,
  // those that the deadlock check judged (NOTE [deadlock]), even from a PE that has raised since.
  std::vector<PeView> snapshot(bool deadlock = false) const;

  // NOTE [programs]: the interpreter runs a launch's programs on threads of this process. The
  // deadlock check counts this PE as waiting only when every live thread is in a slow wait, so
  // the launching thread stops being live while its programs run (begin/end_programs), and each
  // program is live from add_program (before its thread starts) to program_end.
  void begin_programs();
  void end_programs();
  void add_program();
  void program_begin(std::string label);  // on the program's thread: names its waits
  void program_end();
  void abort_programs();  // every program's wait raises, so a failed launch ends
  static void unlink_job(const std::string& token, int n_pes);

  Addr heap_base() const override { return reinterpret_cast<Addr>(heap(pe_)); }
  Addr peer_heap_base(int pe) const { return reinterpret_cast<Addr>(heap(pe)); }
  // Load/store reach only the PEs of this PE's node, as a vendor's does (NOTE [simulated nodes]).
  Addr peer_ptr(Addr local, int pe) const override { return same_node(pe) ? translate(local, pe) : 0; }

  void put(Addr dest, Addr source, std::size_t bytes, int pe, Stream) override;
  void get(Addr dest, Addr source, std::size_t bytes, int pe, Stream) override;
  void put_signal(Addr dest, Addr source, std::size_t bytes, Addr sig, std::uint64_t value, SignalOp op, int pe,
                  Stream) override;
  void signal_op(Addr sig, std::uint64_t value, SignalOp op, int pe, Stream) override;
  std::uint64_t signal_wait_until(Addr sig, Cmp cmp, std::uint64_t value, Stream) override;
  // No streams here: the calling thread's order is the stream order, so this is the wait itself.
  void signal_wait_until_on_stream(Addr sig, Cmp cmp, std::uint64_t value, Stream s) override {
    signal_wait_until(sig, cmp, value, s);
  }
  std::uint64_t signal_fetch(Addr sig) override;
  std::optional<std::uint64_t> signal_ready(Addr sig, Cmp cmp, std::uint64_t value) override;
  void wait_until(Addr ptr, DType type, Cmp cmp, std::uint64_t value) override;
  bool test(Addr ptr, DType type, Cmp cmp, std::uint64_t value) override;
  std::size_t wait_until_any(Addr ptr, std::size_t stride, DType type, Cmp cmp,
                             const std::vector<std::uint64_t>& values) override;
  void quiet(Stream) override;
  void fence() override;
  std::uint64_t atomic(AtomicOp op, DType type, Addr dest, std::uint64_t value, std::uint64_t cond,
                       int pe) override;

  void finalize() override;
  void abandon() override;

 private:
  // The shared layer's primitives (NOTE [shared layer]).
  const TeamInfo& team_info(int team) const override { return team_ref(team); }
  std::uint64_t teams_in_use() const override { return ctl(pe_)->teams_in_use.value; }
  // Opens a collective (NOTE [collective descriptor]): publishes `call` and `payload`, passes
  // a barrier of the team and checks that every member made the same call.
  void enter(int team, Call call, std::uint64_t payload = 0) override;
  std::uint64_t payload(int team, int i) const override;
  void prepare(const Call& call) override;
  // Collectives of one PE take turns: programs of a launch may call them concurrently. Giving
  // the turn back rings our inbox, where a sibling waiting for it sleeps.
  void begin_turn() override;
  void end_turn() override;
  int split_strided(int parent, int slot, int start, int stride, int size) override;
  void split_2d(int parent, int xslot, int yslot, int xrange) override;
  void destroy_team(int team) override;
  void run_barrier(int, Stream) override {}
  void run_sync(int, Stream) override {}
  void run_broadcast(int team, Addr dest, Addr source, std::size_t bytes, int root, Stream) override;
  void run_fcollect(int team, Addr dest, Addr source, std::size_t bytes_per_pe, Stream) override;
  void run_alltoall(int team, Addr dest, Addr source, std::size_t bytes_per_pe, Stream) override;
  void run_reduce(int team, Addr dest, Addr source, std::size_t nelems, DType type, ReduceOp op, Stream) override;
  void run_reducescatter(int team, Addr dest, Addr source, std::size_t nelems_out, DType type, ReduceOp op,
                         Stream) override;

  ControlArea* ctl(int pe) const { return reinterpret_cast<ControlArea*>(maps_[pe].data()); }
  char* heap(int pe) const { return maps_[pe].data() + kControlBytes; }
  Addr translate(Addr local, int pe) const {
    return local - reinterpret_cast<Addr>(heap(pe_)) + reinterpret_cast<Addr>(heap(pe));
  }
  // The PE whose heap holds `addr`, in this PE's mapping of it (its own heap, or a peer's as peer_ptr gives it:
  // a wait may read a peer's word), and the offset of addr in that heap. The address was checked by the caller.
  std::pair<int, std::uint64_t> owner(Addr addr) const;
  // A wait's text names the word by heap offset, and by PE where it is a peer's.
  std::string of_pe(std::string text, int pe) const {
    return pe == pe_ ? text : text + " (a word of PE " + std::to_string(pe) + ")";
  }
  bool same_node(int pe) const { return pe / node_size_ == pe_ / node_size_; }
  Team& team_ref(int team) { return team_in(teams_, team); }
  const Team& team_ref(int team) const { return team_in(teams_, team); }
  void make_team(int slot, std::vector<int> members);

  // awaited: the PE whose action ends the wait, or -1 when any PE's could. A wait that ends
  // when any of several words changes publishes each (n_conds of them from `conds`).
  template <class Done, class Describe>
  void wait(Done&& done, Describe&& describe, const WaitCond& cond, int awaited = -1) {
    wait(done, describe, &cond, 1, awaited);
  }
  template <class Done, class Describe>
  void wait(Done&& done, Describe&& describe, const WaitCond* conds, std::size_t n_conds, int awaited = -1);
  struct Waiter {
    const WaitCond* conds;
    std::size_t n_conds;
    std::string what, label, site;
  };
  void set_waiting(Waiter* w, bool waiting);
  void publish_waits();  // with waiters_mu_ held
  // The doorbell a wait sleeps on: see wait().
  Doorbell& bell_for(int awaited) { return awaited >= 0 ? ctl(awaited)->arrived : ctl(pe_)->inbox; }
  std::string failure_of(int pe, int awaited) const;
  void check_peers(const std::string& waiting_for, int awaited);
  bool holds(const WaitCond& cond) const;
  std::optional<std::uint64_t> word_bits(const WaitCond& cond) const;  // the word's current value
  void check_deadlock();
  [[noreturn]] void raise_deadlock();
  void team_barrier(int team);
  // Barriers this PE has arrived at on channel `c` since it was made: its arrive word is the count.
  std::uint64_t arrivals(int c) const;
  void take_back_arrival();  // NOTE [taken-back arrival]
  void leave(bool collective_barrier, PeState state);

  std::string token_;
  int node_size_;
  std::function<std::string()> site_;
  std::mutex waiters_mu_;            // guards waiting_, live_ and what this PE publishes of them
  std::vector<Waiter*> waiting_;     // this process's threads in a slow wait
  int live_ = 1;                     // threads that may wait: the launching one, or a launch's programs
  std::atomic<bool> aborted_{false};
  std::mutex collective_mu_;
  std::atomic<int> waits_in_barrier_{-1};  // the channel whose barrier this PE has arrived at and waits in
  std::mutex deadlock_mu_;           // one thread of this PE at a time runs the deadlock check
  std::vector<Mapping> maps_;
  std::vector<int> pids_;
  std::array<std::optional<Team>, kMaxTeams> teams_;
  std::vector<std::uint64_t> deadlock_snapshot_;  // every PE's `waits` when all were first seen waiting
  std::mutex report_mu_;                           // the report of the last deadlock, shared by this PE's threads
  std::uint64_t report_verdict_ = 0;
  std::vector<PeView> report_;
  std::chrono::steady_clock::time_point deadlock_since_;
  bool unlinked_ = false;
  bool finalized_ = false;
};

}  // namespace unishmem::host
