#include "host_backend.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>
#include <type_traits>
#include <signal.h>
#include <unistd.h>

#include "../common/dtype.hpp"
#include "reduce.hpp"

namespace unishmem::host {

namespace {

constexpr std::uint64_t kMagic = 0x554e4953484d454dull;  // "UNISHMEM"

template <class T> T load_acquire(const T& v) { return std::atomic_ref<T>(const_cast<T&>(v)).load(std::memory_order_acquire); }
template <class T> void store_release(T& v, std::type_identity_t<T> x) { std::atomic_ref<T>(v).store(x, std::memory_order_release); }

bool process_alive(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // An exited child its parent has not reaped yet is a zombie: dead to us.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return true;  // no /proc: trust kill()
  char buf[512];
  std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* close_paren = std::strrchr(buf, ')');
  return !(close_paren && close_paren[1] == ' ' && (close_paren[2] == 'Z' || close_paren[2] == 'X'));
}

template <class T> std::uint64_t atomic_typed(AtomicOp op, T* p, T v, T cond) {
  std::atomic_ref<T> a(*p);
  switch (op) {
    case AtomicOp::fetch: return to_bits(a.load());
    case AtomicOp::set: a.store(v); return 0;
    case AtomicOp::swap: return to_bits(a.exchange(v));
    case AtomicOp::compare_swap: a.compare_exchange_strong(cond, v); return to_bits(cond);
    case AtomicOp::fetch_add: return to_bits(a.fetch_add(v));
    case AtomicOp::add: a.fetch_add(v); return 0;
    case AtomicOp::fetch_inc: return to_bits(a.fetch_add(T(1)));
    case AtomicOp::inc: a.fetch_add(T(1)); return 0;
    case AtomicOp::fetch_and: return to_bits(a.fetch_and(v));
    case AtomicOp::and_: a.fetch_and(v); return 0;
    case AtomicOp::fetch_or: return to_bits(a.fetch_or(v));
    case AtomicOp::or_: a.fetch_or(v); return 0;
    case AtomicOp::fetch_xor: return to_bits(a.fetch_xor(v));
    case AtomicOp::xor_: a.fetch_xor(v); return 0;
  }
  throw Error(ErrorKind::value, "unknown atomic op " + std::to_string(int(op)));
}

// Per thread and per doorbell (a peer's arrival, our inbox): programs of a launch wait
// concurrently, each adapting its own spins.
thread_local std::optional<std::array<SpinState, 2>> t_spin;
thread_local std::string t_program;  // "program (x, y, z)" on a program's thread

}  // namespace

HostBackend::HostBackend(std::string token, int pe, int n_pes, std::size_t heap_size, int node_size,
                         WaitPolicy policy)
    : BackendBase(pe, n_pes, heap_size, kMaxTeams, policy), token_(std::move(token)),
      node_size_(std::clamp(node_size, 1, n_pes)), maps_(n_pes), pids_(n_pes, 0) {
  if (node_size < 1)
    throw Error(ErrorKind::value, "node_size=" + std::to_string(node_size) + " must be at least 1 PE");
  // NOTE [wait phases] (common/wait.hpp): spin before sleeping only where every PE can have a core;
  // with more PEs than cores a spinning PE holds the core that the awaited one needs.
  policy_.max_spin_s = n_pes <= available_cpus() ? kMaxSpin : 0.0;
  policy_.yield = n_pes > available_cpus();
  // Every PE of the job is on this host and maps every segment, so the segments must fit
  // /dev/shm together. attach_peers() reserves them: none is reserved before every PE has
  // checked here (the bootstrap agrees on our creation before anyone attaches).
  const std::size_t total = kControlBytes + heap_size;
  const std::size_t shm_free = shm_free_bytes();
  if (shm_free && total > shm_free / std::size_t(n_pes))
    throw Error(ErrorKind::unavailable,
                "/dev/shm has " + std::to_string(shm_free) + " bytes free; the job's " + std::to_string(n_pes) +
                    " PEs need " + std::to_string(n_pes) + " x " + std::to_string(total) + " bytes (a heap of " +
                    std::to_string(heap_size) + " bytes plus " + std::to_string(kControlBytes) +
                    " of control each): lower heap_size or UNISHMEM_SYMMETRIC_SIZE, or enlarge /dev/shm");
  maps_[pe] = Mapping::create(segment_name(token_, pe), total);
  ControlArea* c = ctl(pe);
  c->magic = kMagic;
  c->heap_size = heap_size;
  c->pe = pe;
  c->n_pes = n_pes;
  c->pid = static_cast<std::int32_t>(getpid());
  c->teams_in_use.value = (1ull << kTeamWorld) | (1ull << kTeamNode);
  store_release(c->state, std::uint32_t(kCreated));
  pids_[pe] = c->pid;
  std::vector<int> all(n_pes), node;
  for (int i = 0; i < n_pes; ++i) all[i] = i;
  for (int i = 0; i < n_pes; ++i)
    if (same_node(i)) node.push_back(i);
  make_team(kTeamWorld, all);
  make_team(kTeamNode, node);  // NOTE [simulated nodes]
}

HostBackend::~HostBackend() {
  if (!unlinked_) unlink_segment(segment_name(token_, pe_));
}

void HostBackend::unlink_job(const std::string& token, int n_pes) {
  for (int p = 0; p < n_pes; ++p) unlink_segment(segment_name(token, p));
}

void HostBackend::attach_peers() {
  const std::size_t total = kControlBytes + heap_size_;
  // A sparse segment whose pages /dev/shm cannot supply raises SIGBUS on first touch: take them now.
  reserve_segment(segment_name(token_, pe_), total);
  for (int p = 0; p < n_pes_; ++p) {
    if (p == pe_) continue;
    maps_[p] = Mapping::open(segment_name(token_, p), total);
    const ControlArea* c = ctl(p);
    if (c->magic != kMagic || c->pe != p || c->n_pes != n_pes_ || c->heap_size != heap_size_)
      throw Error(ErrorKind::symmetry, "segment of PE " + std::to_string(p) + " does not belong to this job (pe " +
                                           std::to_string(c->pe) + ", n_pes " + std::to_string(c->n_pes) + ")");
    pids_[p] = c->pid;
  }
  store_release(ctl(pe_)->state, std::uint32_t(kRunning));
}

void HostBackend::unlink_own_segment() {
  // Every PE has mapped it: from now on the pages live exactly as long as the mappings.
  unlink_segment(segment_name(token_, pe_));
  unlinked_ = true;
}

// ---- waiting -------------------------------------------------------------------------------

std::string HostBackend::failure_of(int p, int awaited) const {
  // A finalized peer has passed finalize's barrier, so every PE has entered finalize: only a
  // wait on that very peer, or one not tied to a peer, can no longer finish.
  const std::uint32_t state = load_acquire(ctl(p)->state);
  if (state == kFinalized) return awaited < 0 || awaited == p ? "finalized" : "";
  if (state == kAbandoned) return "left the job after an error";
  if (!process_alive(pids_[p])) return "(pid " + std::to_string(pids_[p]) + ") died";
  return "";
}

void HostBackend::check_peers(const std::string& waiting_for, int awaited) {
  for (int p = 0; p < n_pes_; ++p) {
    if (p == pe_ || !maps_[p].data()) continue;
    std::string why = failure_of(p, awaited), note;
    if (why.empty()) continue;
    // A peer that reported another's failure and then left is not the cause: name the one it named.
    for (int hops = 0; hops < n_pes_; ++hops) {
      const std::uint64_t named = load_acquire(ctl(p)->blamed.value);
      const int q = int(named) - 1;
      if (named == 0 || q >= n_pes_ || q == pe_ || q == p || !maps_[q].data()) break;
      const std::string q_why = failure_of(q, -1);
      if (q_why.empty()) break;
      note = "; PE " + std::to_string(p) + " reported it and has left since";
      p = q;
      why = q_why;
    }
    store_release(ctl(pe_)->blamed.value, std::uint64_t(p + 1));
    throw Error(ErrorKind::peer_failure, "PE " + std::to_string(p) + " " + why + " while PE " + std::to_string(pe_) +
                                             " was waiting for " + waiting_for + note);
  }
}

std::optional<std::uint64_t> HostBackend::word_bits(const WaitCond& c) const {
  const DType type = DType(c.dtype);
  if (c.pe < 0 || c.pe >= n_pes_ || !maps_[c.pe].data() ||
      !(type == DType::i32 || type == DType::i64 || type == DType::u32 || type == DType::u64))
    return std::nullopt;
  const std::size_t size = dtype_size(type);
  if (c.offset % size || c.offset + size > maps_[c.pe].size()) return std::nullopt;
  const char* word = maps_[c.pe].data() + c.offset;
  return with_int_type(type, [&](auto zero) {
    using T = decltype(zero);
    return to_bits(load_acquire(*reinterpret_cast<const T*>(word)));
  });
}

bool HostBackend::holds(const WaitCond& c) const {
  const auto bits = word_bits(c);
  if (!bits || c.cmp < 0 || c.cmp > int(Cmp::le)) return false;
  return with_int_type(DType(c.dtype), [&](auto zero) {
    using T = decltype(zero);
    return compare(from_bits<T>(*bits), Cmp(c.cmp), from_bits<T>(c.value));
  });
}

// NOTE [deadlock]: a PE whose every live thread is in a slow wait keeps its `waits` counter odd
// and publishes what each waits for (`wait_conds`); any change (a wait ends or starts, a program
// starts or ends) moves the counter. When every PE is waiting, no counter has moved for deadlock_s
// seconds and no published condition holds, no PE can ever make another's wait finish (only
// PEs write the heap). A condition that holds is a thread that has not run since it came true
// (stopped in a debugger, SIGSTOP, descheduled): it goes on once it runs, so that is no
// deadlock. The PE that sees a deadlock first tells the others by writing each one's counter
// value into its `deadlock_verdict`, so every PE still in that wait raises.
void HostBackend::check_deadlock() {
  if (policy_.deadlock_s <= 0) return;
  const std::uint64_t mine = load_acquire(ctl(pe_)->waits.value);
  if ((mine & 1) && load_acquire(ctl(pe_)->deadlock_verdict.value) == mine) raise_deadlock();
  std::unique_lock lock(deadlock_mu_, std::try_to_lock);
  if (!lock) return;  // another thread of this PE is checking
  std::vector<std::uint64_t> now(n_pes_);
  for (int p = 0; p < n_pes_; ++p) {
    now[p] = maps_[p].data() ? load_acquire(ctl(p)->waits.value) : 0;
    if (!(now[p] & 1)) {
      deadlock_snapshot_.clear();
      return;
    }
  }
  const auto t = std::chrono::steady_clock::now();
  if (now != deadlock_snapshot_) {
    deadlock_snapshot_ = now;
    deadlock_since_ = t;
    return;
  }
  if (std::chrono::duration<double>(t - deadlock_since_).count() < policy_.deadlock_s) return;
  std::vector<WaitCond> conds;
  std::vector<std::size_t> first(n_pes_ + 1, 0);
  for (int p = 0; p < n_pes_; ++p) {
    const ControlArea* c = ctl(p);
    const std::uint32_t n = std::min<std::uint32_t>(load_acquire(c->n_wait_conds), kMaxWaiters);
    conds.resize(first[p] + n);
    std::memcpy(conds.data() + first[p], c->wait_conds, n * sizeof(WaitCond));
    first[p + 1] = first[p] + n;
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  for (int p = 0; p < n_pes_; ++p)
    if (load_acquire(ctl(p)->waits.value) != now[p]) return;  // a new wait: its condition may not be the one read
  for (const WaitCond& c : conds)
    if (holds(c)) {
      deadlock_since_ = t;
      return;
    }
  for (int p = 0; p < n_pes_; ++p) std::atomic_ref<std::uint64_t>(ctl(p)->deadlock_verdict.value).store(now[p]);
  deadlock_snapshot_.clear();
  lock.unlock();
  raise_deadlock();
}

// The C++ text is what() of the error; bindings replace it with the shared report (hang.py).
void HostBackend::raise_deadlock() {
  const std::uint64_t verdict = load_acquire(ctl(pe_)->deadlock_verdict.value);
  std::vector<PeView> pes;
  {
    std::lock_guard lock(report_mu_);
    if (report_verdict_ != verdict) {  // the first of this PE's threads to raise reads everyone's waits
      report_ = snapshot(true);
      report_verdict_ = verdict;
      take_back_arrival();
      // No PE leaves its wait (and publishes others) before every PE has read them, or the reports
      // would differ; a PE that does not answer (stopped) is waited for at most a second.
      store_release(ctl(pe_)->deadlock_seen.value, verdict);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      for (int p = 0; p < n_pes_ && std::chrono::steady_clock::now() < until;) {
        if (!maps_[p].data() ||
            load_acquire(ctl(p)->deadlock_seen.value) == load_acquire(ctl(p)->deadlock_verdict.value))
          ++p;
        else
          std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    pes = report_;
  }
  std::string what = "deadlock: every PE has been waiting for " + std::to_string(int(policy_.deadlock_s)) +
                     " s and none can make progress:";
  for (const PeView& v : pes)
    for (const WaitView& w : v.waits)
      what += " PE " + std::to_string(v.pe) + " waits (" + w.label + (w.label.empty() ? "" : ", ") + w.site + ");";
  throw DeadlockFailure(what, std::move(pes), policy_.deadlock_s);
}

// NOTE [taken-back arrival]: a PE that raises DeadlockError while it waits in a barrier takes its
// arrival back, so that after a deadlock every PE has arrived on every channel as often as before
// the calls that deadlocked (a PE that waited elsewhere never arrived): the next collective call of
// every PE meets the others' at one barrier and is compared with theirs, and a caller that catches
// the error goes on (NOTE [collective check]). No PE has passed that barrier (a member never
// arrived), and the arrival goes before this PE says it has read the others' waits (deadlock_seen),
// which every PE waits for before it leaves raise_deadlock: so no PE's next call can count it.
// Only a deadlock is known to end every PE's wait; after a timeout or a Ctrl-C the arrival stays.
void HostBackend::take_back_arrival() {
  const int c = waits_in_barrier_.exchange(-1);
  if (c >= 0) store_release(ctl(pe_)->arrive[c].value, load_acquire(ctl(pe_)->arrive[c].value) - 1);
}

std::vector<PeView> HostBackend::snapshot(bool deadlock) const {
  std::vector<PeView> out;
  for (int p = 0; p < n_pes_; ++p) {
    if (!maps_[p].data()) continue;
    const ControlArea* c = ctl(p);
    PeView v;
    v.pe = p;
    v.state = load_acquire(c->state);
    const std::uint64_t waits = load_acquire(c->waits.value), at = load_acquire(c->published_at);
    v.waiting = deadlock ? at == load_acquire(c->deadlock_verdict.value) : (waits & 1) && at == waits;
    const std::uint32_t n_conds = std::min<std::uint32_t>(load_acquire(c->n_wait_conds), kMaxWaiters);
    const std::uint32_t n = v.waiting ? std::min<std::uint32_t>(load_acquire(c->n_published), kMaxWaiters) : 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      const PublishedWait& pw = c->published[i];
      WaitView w;
      w.label.assign(pw.label, strnlen(pw.label, sizeof pw.label));
      w.site.assign(pw.site, strnlen(pw.site, sizeof pw.site));
      for (std::uint32_t j = pw.first; j < std::min(pw.first + pw.count, n_conds); ++j) {
        w.conds.push_back(c->wait_conds[j]);
        w.actual.push_back(word_bits(c->wait_conds[j]));
      }
      v.waits.push_back(std::move(w));
    }
    const SignalRecord* signals = deadlock && v.waiting ? c->published_signals : c->last_signal;
    v.signals.assign(signals, signals + std::min(n_pes_, kMaxSignalPeers));
    out.push_back(std::move(v));
  }
  return out;
}

void HostBackend::publish_waits() {
  ControlArea* c = ctl(pe_);
  std::uint64_t w = c->waits.value;
  if (w & 1) store_release(c->waits.value, ++w);  // what was published is out of date
  std::size_t n = 0;
  for (const Waiter* w : waiting_) n += w->n_conds;
  // With more conditions than slots no verdict is possible: the waits' own timeouts still end them.
  if (waiting_.empty() || int(waiting_.size()) < live_ || n > std::size_t(kMaxWaiters)) return;
  n = 0;
  for (std::size_t i = 0; i < waiting_.size(); ++i) {
    PublishedWait& pw = c->published[i];
    std::snprintf(pw.label, sizeof pw.label, "%s", waiting_[i]->label.c_str());
    std::snprintf(pw.site, sizeof pw.site, "%s", waiting_[i]->site.c_str());
    pw.first = std::uint32_t(n);
    pw.count = std::uint32_t(waiting_[i]->n_conds);
    for (std::size_t j = 0; j < waiting_[i]->n_conds; ++j) c->wait_conds[n++] = waiting_[i]->conds[j];
  }
  store_release(c->n_published, std::uint32_t(waiting_.size()));
  // A deadlock report shows what each PE had signalled when it began to wait, not what a PE that
  // has raised since sends next.
  std::memcpy(c->published_signals, c->last_signal, sizeof c->last_signal);
  store_release(c->published_at, w + 1);
  store_release(c->n_wait_conds, std::uint32_t(n));
  store_release(c->waits.value, w + 1);
}

void HostBackend::set_waiting(Waiter* w, bool waiting) {
  std::lock_guard lock(waiters_mu_);
  if (waiting)
    waiting_.push_back(w);
  else
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), w));
  publish_waits();
}

void HostBackend::begin_programs() {
  std::lock_guard lock(waiters_mu_);
  aborted_ = false;
  --live_;
  publish_waits();
}

void HostBackend::end_programs() {
  std::lock_guard lock(waiters_mu_);
  ++live_;
  publish_waits();
}

void HostBackend::add_program() {
  std::lock_guard lock(waiters_mu_);
  if (live_ >= kMaxWaiters)
    throw Error(ErrorKind::value,
                "at most " + std::to_string(kMaxWaiters) + " programs of a PE can be resident at once");
  ++live_;
  publish_waits();
}

void HostBackend::program_begin(std::string label) { t_program = std::move(label); }

void HostBackend::program_end() {
  t_program.clear();
  std::lock_guard lock(waiters_mu_);
  --live_;
  publish_waits();
}

void HostBackend::abort_programs() { aborted_ = true; }

template <class Done, class Describe>
void HostBackend::wait(Done&& done, Describe&& describe, const WaitCond* conds, std::size_t n_conds, int awaited) {
  Waiter me{conds, n_conds, {}, {}, {}};
  bool marked = false;
  struct Unmark {  // stop counting as waiting however the wait ends
    HostBackend& b;
    Waiter& w;
    bool& m;
    ~Unmark() {
      if (m) b.set_waiting(&w, false);
    }
  } unmark{*this, me, marked};
  // A wait tied to one peer waits for its barrier arrival (the only such wait), which that peer
  // rings on its `arrived` bell; any other wait is for a write into this PE's heap (our `inbox`).
  if (!t_spin) t_spin.emplace().fill(SpinState{policy_.max_spin_s});
  // A launch's programs are threads of this process, often more than its cores: they do not spin.
  WaitPolicy policy = policy_;
  if (!t_program.empty()) policy.max_spin_s = 0;
  wait_for(done, describe, policy, (*t_spin)[awaited >= 0], bell_for(awaited), [&] {
    if (!marked) {
      me.what = t_program.empty() ? describe() : t_program + ": " + describe();
      me.label = t_program;
      if (site_) me.site = site_();  // may raise KeyboardInterrupt, which ends the wait as the checks do
      set_waiting(&me, true);
      marked = true;
    }
    if (aborted_ && !t_program.empty())
      throw Error(ErrorKind::generic, t_program + " stopped waiting: another program of its launch failed");
    check_deadlock();  // before check_peers: a peer that already reported it may have exited
    check_peers(describe(), awaited);
    if (wait_check_) wait_check_();
  });
}

void HostBackend::begin_turn() {
  bool mine = collective_mu_.try_lock();
  if (!mine)  // a sibling program's collective: it ends through its own waits, so this one never holds alone
    wait([&] { return mine || (mine = collective_mu_.try_lock()); },
         [] { return std::string("another program of this PE to finish its collective call"); },
         WaitCond{.pe = -1, .kind = kWaitTurn});
}

void HostBackend::end_turn() {
  collective_mu_.unlock();
  if (!finalized_) ring(ctl(pe_)->inbox);  // finalized: the segment is unmapped
}

// ---- teams and internal exchange -------------------------------------------------------------

std::uint64_t HostBackend::arrivals(int c) const {
  const Team& t = *teams_[c];
  return load_acquire(ctl(pe_)->arrive[c].value) - t.base[t.my_index];
}

void HostBackend::team_barrier(int team) {
  const int c = team_ref(team).channel;
  const Team& t = *teams_[c];
  const std::uint64_t e = arrivals(c) + 1;
  waits_in_barrier_ = c;  // before arriving: a deadlock verdict may come as soon as we wait
  struct Left {  // however the waits end; after a deadlock the arrival is taken back already
    std::atomic<int>& channel;
    ~Left() { channel = -1; }
  } left{waits_in_barrier_};
  store_release(ctl(pe_)->arrive[c].value, t.base[t.my_index] + e);
  ring(ctl(pe_)->arrived);
  for (std::size_t i = 0; i < t.members.size(); ++i) {
    const int m = t.members[i];
    const std::uint64_t target = t.base[i] + e;
    const std::uint64_t& word = ctl(m)->arrive[c].value;
    const WaitCond cond{offsetof(ControlArea, arrive) + c * sizeof(Padded), target, m, int(DType::u64), int(Cmp::ge),
                        kWaitBarrier};
    wait([&] { return load_acquire(word) >= target; },
         [&] { return "PE " + std::to_string(m) + " to reach barrier #" + std::to_string(e) + " of team " +
                      std::to_string(team); },
         cond, m);
  }
}

// NOTE [collective check]: Calls are double-buffered by barrier parity: a member can only
// overwrite this parity's record after passing the next barrier, which waits for us to have
// read it. The record also holds the call's number on its channel, so a PE that skipped a
// call on it (and passed on a later arrival) is found too.
void HostBackend::enter(int team, Call call, std::uint64_t payload) {
  const Team& t = team_ref(team);
  call.team = team;
  call.team_id = t.id;
  call.seq = arrivals(t.channel) + 1;
  const CallWords mine = call.pack();
  const int parity = int(call.seq & 1);
  std::uint64_t* record = ctl(pe_)->calls[t.channel][parity];
  std::memcpy(record, mine.data(), sizeof mine);
  record[kCallWords] = payload;
  team_barrier(team);
  for (int m : t.members)
    if (std::memcmp(ctl(m)->calls[t.channel][parity], mine.data(), sizeof mine) != 0) {
      std::vector<CallWords> all(t.members.size());
      for (std::size_t i = 0; i < all.size(); ++i)
        std::memcpy(all[i].data(), ctl(t.members[i])->calls[t.channel][parity], sizeof mine);
      raise_mismatch(t.members, all, mine);
    }
}

std::uint64_t HostBackend::payload(int team, int i) const {
  const Team& t = team_ref(team);
  return ctl(t.members[i])->calls[t.channel][arrivals(t.channel) & 1][kCallWords];
}

void HostBackend::make_team(int slot, std::vector<int> members) {
  Team t;
  t.members = std::move(members);
  t.id = team_identity(t.members);
  t.channel = int(t.members.size()) == n_pes_ ? kTeamWorld : slot;  // NOTE [barrier channel]
  for (std::size_t i = 0; i < t.members.size(); ++i) {
    if (t.members[i] == pe_) t.my_index = int(i);
    // The slot is free on every member, so no member moves its counter while we read it.
    if (t.channel == slot)
      t.base.push_back(maps_[t.members[i]].data() ? load_acquire(ctl(t.members[i])->arrive[slot].value) : 0);
  }
  teams_[slot] = std::move(t);
  store_release(ctl(pe_)->teams_in_use.value, ctl(pe_)->teams_in_use.value | (1ull << slot));
}

int HostBackend::split_strided(int parent, int slot, int start, int stride, int size) {
  const Team& p = team_ref(parent);
  std::vector<int> members;
  for (int i = 0; i < size; ++i) members.push_back(p.members[start + i * stride]);
  const bool member = std::find(members.begin(), members.end(), pe_) != members.end();
  if (member) make_team(slot, std::move(members));
  team_barrier(parent);  // bases are read before any member of the new team can arrive on it
  return member ? slot : kTeamInvalid;
}

void HostBackend::split_2d(int parent, int xslot, int yslot, int xrange) {
  const Team& p = team_ref(parent);
  const int n = int(p.members.size()), me = p.my_index;
  std::vector<int> xs, ys;
  for (int i = me / xrange * xrange; i < std::min(n, (me / xrange + 1) * xrange); ++i) xs.push_back(p.members[i]);
  for (int i = me % xrange; i < n; i += xrange) ys.push_back(p.members[i]);
  make_team(xslot, xs);
  make_team(yslot, ys);
  team_barrier(parent);
}

void HostBackend::destroy_team(int team) {
  teams_[team].reset();
  store_release(ctl(pe_)->teams_in_use.value, ctl(pe_)->teams_in_use.value & ~(1ull << team));
}

// ---- RMA, signals, atomics ---------------------------------------------------------------------

// Every write into a PE's heap rings its inbox: a wait there may be for this very word.
void HostBackend::put(Addr dest, Addr source, std::size_t bytes, int pe, Stream) {
  std::memmove(reinterpret_cast<void*>(translate(dest, pe)), reinterpret_cast<const void*>(source), bytes);
  ring(ctl(pe)->inbox);
}

void HostBackend::get(Addr dest, Addr source, std::size_t bytes, int pe, Stream) {
  std::memmove(reinterpret_cast<void*>(dest), reinterpret_cast<const void*>(translate(source, pe)), bytes);
}

void HostBackend::signal_op(Addr sig, std::uint64_t value, SignalOp op, int pe, Stream) {
  std::atomic_ref<std::uint64_t> s(*reinterpret_cast<std::uint64_t*>(translate(sig, pe)));
  if (op == SignalOp::add)
    s.fetch_add(value, std::memory_order_acq_rel);
  else
    s.store(value, std::memory_order_release);
  ring(ctl(pe)->inbox);
  if (pe < kMaxSignalPeers) {  // for the hang report: relaxed, a report may read a torn record
    SignalRecord& r = ctl(pe_)->last_signal[pe];
    std::atomic_ref<std::uint64_t>(r.offset).store(sig - heap_base(), std::memory_order_relaxed);
    std::atomic_ref<std::uint64_t>(r.value).store(value, std::memory_order_relaxed);
    std::atomic_ref<std::uint32_t>(r.op).store(std::uint32_t(op), std::memory_order_relaxed);
    std::atomic_ref<std::uint32_t>(r.count).fetch_add(1, std::memory_order_relaxed);
  }
}

void HostBackend::put_signal(Addr dest, Addr source, std::size_t bytes, Addr sig, std::uint64_t value, SignalOp op,
                             int pe, Stream s) {
  std::memmove(reinterpret_cast<void*>(translate(dest, pe)), reinterpret_cast<const void*>(source), bytes);
  signal_op(sig, value, op, pe, s);  // release: the data is visible before the signal; one ring for both
}

std::uint64_t HostBackend::signal_fetch(Addr sig) {
  return load_acquire(*reinterpret_cast<std::uint64_t*>(sig));
}

std::optional<std::uint64_t> HostBackend::signal_ready(Addr sig, Cmp cmp, std::uint64_t value) {
  const std::uint64_t seen = load_acquire(*reinterpret_cast<std::uint64_t*>(sig));
  return compare(seen, cmp, value) ? std::optional(seen) : std::nullopt;
}

std::pair<int, std::uint64_t> HostBackend::owner(Addr addr) const {
  const auto offset = [&](int pe) { return addr - reinterpret_cast<Addr>(heap(pe)); };  // below a heap: wraps
  if (offset(pe_) < heap_size()) return {pe_, offset(pe_)};
  for (int pe = 0; pe < n_pes(); ++pe)
    if (offset(pe) < heap_size()) return {pe, offset(pe)};
  return {pe_, offset(pe_)};
}

std::uint64_t HostBackend::signal_wait_until(Addr sig, Cmp cmp, std::uint64_t value, Stream) {
  auto& word = *reinterpret_cast<std::uint64_t*>(sig);
  std::uint64_t seen = 0;
  const auto [pe, offset] = owner(sig);
  const WaitCond cond{kControlBytes + offset, value, pe, int(DType::u64), int(cmp), kWaitSignal};
  wait([&] { return compare(seen = load_acquire(word), cmp, value); },
       [&] { return of_pe(signal_wait_text(heap_base() + offset, cmp, value, load_acquire(word)), pe); }, cond);
  return seen;
}

bool HostBackend::test(Addr ptr, DType type, Cmp cmp, std::uint64_t value) {
  return with_int_type(type, [&](auto zero) {
    using T = decltype(zero);
    return compare(load_acquire(*reinterpret_cast<T*>(ptr)), cmp, from_bits<T>(value));
  });
}

void HostBackend::wait_until(Addr ptr, DType type, Cmp cmp, std::uint64_t value) {
  with_int_type(type, [&](auto zero) {
    using T = decltype(zero);
    T& word = *reinterpret_cast<T*>(ptr);
    const T target = from_bits<T>(value);
    const auto [pe, offset] = owner(ptr);
    const WaitCond cond{kControlBytes + offset, value, pe, int(type), int(cmp), kWaitValue};
    wait([&] { return compare(load_acquire(word), cmp, target); },
         [&] { return of_pe(value_wait_text(heap_base() + offset, type, cmp, value, to_bits(load_acquire(word))), pe); },
         cond);
    return 0;
  });
}

std::size_t HostBackend::wait_until_any(Addr ptr, std::size_t stride, DType type, Cmp cmp,
                                       const std::vector<std::uint64_t>& values) {
  std::vector<WaitCond> conds(values.size());
  const auto [pe, offset] = owner(ptr);
  for (std::size_t i = 0; i < values.size(); ++i)
    conds[i] = WaitCond{kControlBytes + offset + i * stride, values[i], pe, int(type), int(cmp), kWaitAny};
  std::optional<std::size_t> found;
  wait([&] { return (found = first_ready(ptr, stride, type, cmp, values)).has_value(); },
       [&] { return of_pe(any_wait_text(heap_base() + offset, stride, cmp, values), pe); }, conds.data(),
       conds.size());
  return *found;
}

void HostBackend::quiet(Stream) { std::atomic_thread_fence(std::memory_order_seq_cst); }
void HostBackend::fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

std::uint64_t HostBackend::atomic(AtomicOp op, DType type, Addr dest, std::uint64_t value, std::uint64_t cond, int pe) {
  return with_int_type(type, [&](auto zero) {
    using T = decltype(zero);
    const std::uint64_t old =
        atomic_typed<T>(op, reinterpret_cast<T*>(translate(dest, pe)), from_bits<T>(value), from_bits<T>(cond));
    if (op != AtomicOp::fetch) ring(ctl(pe)->inbox);
    return old;
  });
}

// ---- synchronisation and collectives (checked first by the shared layer) ----------------------
// Collectives read peers' sources straight from their mappings between two team barriers.

void HostBackend::prepare(const Call& call) {
  if (call.op == CallOp::barrier) quiet(0);  // a barrier completes this PE's writes before it arrives
}

void HostBackend::run_broadcast(int team, Addr dest, Addr source, std::size_t bytes, int root, Stream) {
  const Team& t = team_ref(team);
  std::memmove(reinterpret_cast<void*>(dest), reinterpret_cast<const void*>(translate(source, t.members[root])), bytes);
  team_barrier(team);
}

void HostBackend::run_fcollect(int team, Addr dest, Addr source, std::size_t bytes, Stream) {
  const Team& t = team_ref(team);
  for (std::size_t i = 0; i < t.members.size(); ++i)
    std::memcpy(reinterpret_cast<char*>(dest) + i * bytes, reinterpret_cast<const void*>(translate(source, t.members[i])),
                bytes);
  team_barrier(team);
}

void HostBackend::run_alltoall(int team, Addr dest, Addr source, std::size_t bytes, Stream) {
  const Team& t = team_ref(team);
  for (std::size_t i = 0; i < t.members.size(); ++i)
    std::memcpy(reinterpret_cast<char*>(dest) + i * bytes,
                reinterpret_cast<const void*>(translate(source + t.my_index * bytes, t.members[i])), bytes);
  team_barrier(team);
}

void HostBackend::run_reduce(int team, Addr dest, Addr source, std::size_t nelems, DType type, ReduceOp op,
                             Stream) {
  // Reduce-scatter then all-gather: each member reduces one chunk, then copies the others'.
  // Safe in place (dest == source): a member only ever writes the chunk that no peer reads.
  const Team& t = team_ref(team);
  const int n = int(t.members.size());
  const std::size_t esz = dtype_size(type);
  auto chunk = [&](int i) { return std::pair{nelems * i / n * esz, (nelems * (i + 1) / n - nelems * i / n)}; };
  std::vector<const void*> srcs(n);
  auto [off, len] = chunk(t.my_index);
  for (int i = 0; i < n; ++i) srcs[i] = reinterpret_cast<const void*>(translate(source + off, t.members[i]));
  if (len) reduce_arrays(reinterpret_cast<void*>(dest + off), srcs.data(), n, len, type, op);
  team_barrier(team);
  for (int i = 0; i < n; ++i) {
    if (i == t.my_index) continue;
    auto [o, l] = chunk(i);
    std::memcpy(reinterpret_cast<void*>(dest + o), reinterpret_cast<const void*>(translate(dest + o, t.members[i])), l * esz);
  }
  team_barrier(team);
}

void HostBackend::run_reducescatter(int team, Addr dest, Addr source, std::size_t nelems_out, DType type,
                                    ReduceOp op, Stream) {
  const Team& t = team_ref(team);
  const int n = int(t.members.size());
  const std::size_t off = t.my_index * nelems_out * dtype_size(type);
  std::vector<const void*> srcs(n);
  for (int i = 0; i < n; ++i) srcs[i] = reinterpret_cast<const void*>(translate(source + off, t.members[i]));
  if (nelems_out) reduce_arrays(reinterpret_cast<void*>(dest), srcs.data(), n, nelems_out, type, op);
  team_barrier(team);
}

void HostBackend::finalize() { leave(true, kFinalized); }
void HostBackend::abandon() { leave(false, kAbandoned); }

void HostBackend::leave(bool collective_barrier, PeState state) {
  const Turn mine = turn();
  if (finalized_) return;
  std::exception_ptr failure;  // a dead peer must not stop this PE from letting go of its memory
  try {
    // Nobody touches a peer's memory after this.
    if (collective_barrier) enter(kTeamWorld, Call{.op = CallOp::finalize});
  } catch (...) {
    failure = std::current_exception();
  }
  store_release(ctl(pe_)->state, std::uint32_t(state));
  finalized_ = true;
  if (!unlinked_) unlink_own_segment();
  for (auto& t : teams_) t.reset();
  for (auto& m : maps_) m.retire();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace unishmem::host
