#include "host_backend.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <type_traits>
#include <signal.h>
#include <unistd.h>

#include "reduce.hpp"

namespace unishmem::host {

namespace {

constexpr std::uint64_t kMagic = 0x554e4953484d454dull;  // "UNISHMEM"
constexpr std::uint64_t kCallAlloc = 1, kCallFree = 2;
constexpr std::uint64_t kNotLive = ~0ull;

enum CollectiveOp : int { kBarrier = 1, kSync, kBroadcast, kFcollect, kAlltoall, kReduce, kReducescatter, kRejected = 255 };

std::string describe_collective(const std::uint64_t* w) {
  static const char* names[] = {"?", "barrier", "sync", "broadcast", "fcollect", "alltoall", "reduce", "reducescatter"};
  static const char* redops[] = {"sum", "min", "max", "prod"};
  const int op = int(w[0] & 0xff), dtype = int(w[0] >> 8 & 0xff), redop = int(w[0] >> 16 & 0xff);
  const std::uint64_t root = w[0] >> 32;
  if (op == kRejected) return "rejected its arguments (see its own error)";
  if (op < kBarrier || op > kReducescatter) return "is in no collective";
  std::string s = std::string("called ") + names[op];
  if (op == kBarrier || op == kSync) return s;
  s += " of " + std::to_string(w[1]) + " bytes";
  if (op == kBroadcast) s += " from root " + std::to_string(root);
  if (op == kReduce || op == kReducescatter)
    s += std::string(" of ") + dtype_name(DType(dtype)) + " with op " + (redop < 4 ? redops[redop] : "?");
  return s;
}

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

const char* cmp_name(Cmp c) {
  static const char* names[] = {"==", "!=", ">", ">=", "<", "<="};
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

// Calls fn.template operator()<T>() with T the C++ type of an integer dtype.
template <class Fn> auto with_int_type(DType type, Fn&& fn) {
  switch (type) {
    case DType::i32: return fn(std::int32_t{});
    case DType::i64: return fn(std::int64_t{});
    case DType::u32: return fn(std::uint32_t{});
    case DType::u64: return fn(std::uint64_t{});
    default: break;
  }
  throw Error(ErrorKind::value, "dtype code " + std::to_string(int(type)) + " is not int32, int64, uint32 or uint64");
}

}  // namespace

HostBackend::HostBackend(std::string token, int pe, int n_pes, std::size_t heap_size, WaitPolicy policy)
    : token_(std::move(token)), pe_(pe), n_pes_(n_pes), heap_size_(heap_size), policy_(policy),
      maps_(n_pes), pids_(n_pes, 0), allocator_(heap_size) {
  // NOTE [wait phases] (wait.hpp): spin before yielding only where every PE can have a core.
  policy_.spin_s = spin_.spin_s = n_pes <= available_cpus() ? 2e-6 : 0.0;
  if (n_pes < 1 || pe < 0 || pe >= n_pes)
    throw Error(ErrorKind::value, "PE " + std::to_string(pe) + " of " + std::to_string(n_pes) + " is out of range");
  const std::size_t total = kControlBytes + heap_size;
  const std::size_t shm_free = shm_free_bytes();
  if (shm_free && total > shm_free)
    throw Error(ErrorKind::unavailable, "/dev/shm has " + std::to_string(shm_free) + " bytes free, a PE's segment needs " +
                                            std::to_string(total) + ": lower heap_size or UNISHMEM_SYMMETRIC_SIZE");
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
  std::vector<int> all(n_pes);
  for (int i = 0; i < n_pes; ++i) all[i] = i;
  // Every PE on the host backend shares this node, so node and world have the same members.
  make_team(kTeamWorld, all);
  make_team(kTeamNode, all);
}

HostBackend::~HostBackend() {
  if (!unlinked_) unlink_segment(segment_name(token_, pe_));
}

void HostBackend::unlink_job(const std::string& token, int n_pes) {
  for (int p = 0; p < n_pes; ++p) unlink_segment(segment_name(token, p));
}

void HostBackend::attach_peers() {
  const std::size_t total = kControlBytes + heap_size_;
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

void HostBackend::check_peers(const std::string& waiting_for, int awaited) {
  // A finalized peer has passed finalize's barrier, so every PE has entered finalize: only a
  // wait on that very peer, or one not tied to a peer, can no longer finish.
  for (int p = 0; p < n_pes_; ++p) {
    if (p == pe_ || !maps_[p].data()) continue;
    const std::uint32_t state = load_acquire(ctl(p)->state);
    const bool finalized = state == kFinalized;
    if ((finalized && (awaited < 0 || awaited == p)) || state == kAbandoned)
      throw Error(ErrorKind::peer_failure, "PE " + std::to_string(p) +
                                               (finalized ? " finalized" : " left the job after an error") +
                                               " while PE " + std::to_string(pe_) + " was waiting for " + waiting_for);
    if (!finalized && !process_alive(pids_[p]))
      throw Error(ErrorKind::peer_failure, "PE " + std::to_string(p) + " (pid " + std::to_string(pids_[p]) +
                                               ") died while PE " + std::to_string(pe_) + " was waiting for " +
                                               waiting_for);
  }
}

// NOTE [deadlock]: a PE in a slow wait keeps its `waits` counter odd. When every PE is
// waiting and no counter has moved for deadlock_s seconds, no PE can ever make another's
// wait finish (only PEs write the heap). The PE that sees it first tells the others by writing
// each one's counter value into its `deadlock_verdict`, so every PE still in that wait raises.
void HostBackend::check_deadlock() {
  if (policy_.deadlock_s <= 0) return;
  if (load_acquire(ctl(pe_)->deadlock_verdict.value) == load_acquire(ctl(pe_)->waits.value)) raise_deadlock();
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
  for (int p = 0; p < n_pes_; ++p) std::atomic_ref<std::uint64_t>(ctl(p)->deadlock_verdict.value).store(now[p]);
  raise_deadlock();
}

void HostBackend::raise_deadlock() {
  std::string what = "deadlock: every PE has been waiting for " + std::to_string(int(policy_.deadlock_s)) +
                     " s and none can make progress:";
  for (int p = 0; p < n_pes_; ++p) {
    char buf[sizeof(ControlArea::waiting_for)];
    std::memcpy(buf, ctl(p)->waiting_for, sizeof buf);
    buf[sizeof buf - 1] = 0;
    what += " PE " + std::to_string(p) + " waits for " + buf + (p + 1 < n_pes_ ? ";" : "");
  }
  deadlock_snapshot_.clear();
  throw Error(ErrorKind::deadlock, what);
}

template <class Done, class Describe>
void HostBackend::wait(Done&& done, Describe&& describe, int awaited) {
  std::uint64_t& waits = ctl(pe_)->waits.value;
  bool marked = false;
  struct Unmark {  // leave the odd (waiting) state however the wait ends
    std::uint64_t& w;
    bool& m;
    ~Unmark() {
      if (m) store_release(w, w + 1);
    }
  } unmark{waits, marked};
  wait_for(done, describe, policy_, spin_, [&] {
    if (!marked) {
      std::string what = describe();
      std::snprintf(ctl(pe_)->waiting_for, sizeof(ControlArea::waiting_for), "%s", what.c_str());
      store_release(waits, waits + 1);
      marked = true;
    }
    check_deadlock();  // before check_peers: a peer that already reported it may have exited
    check_peers(describe(), awaited);
    if (external_check_) external_check_();
  });
}

// ---- teams and internal exchange -------------------------------------------------------------

Team& HostBackend::team_ref(int team) {
  return const_cast<Team&>(static_cast<const HostBackend*>(this)->team_ref(team));
}

const Team& HostBackend::team_ref(int team) const {
  if (team < 0 || team >= kMaxTeams || !teams_[team])
    throw Error(ErrorKind::value, "team handle " + std::to_string(team) + " is not a team this PE belongs to");
  return *teams_[team];
}

void HostBackend::team_barrier(int team) {
  Team& t = team_ref(team);
  const std::uint64_t e = ++t.epoch;
  store_release(ctl(pe_)->arrive[team].value, t.base[t.my_index] + e);
  for (std::size_t i = 0; i < t.members.size(); ++i) {
    const int m = t.members[i];
    const std::uint64_t target = t.base[i] + e;
    const std::uint64_t& word = ctl(m)->arrive[team].value;
    wait([&] { return load_acquire(word) >= target; },
         [&] { return "PE " + std::to_string(m) + " to reach barrier #" + std::to_string(e) + " of team " +
                      std::to_string(team); },
         m);
  }
}

std::vector<std::array<std::uint64_t, kXchgWords>> HostBackend::exchange(int team, const std::uint64_t* words, int n) {
  std::memcpy(ctl(pe_)->xchg, words, n * sizeof(std::uint64_t));
  team_barrier(team);
  const Team& t = team_ref(team);
  std::vector<std::array<std::uint64_t, kXchgWords>> all(t.members.size());
  for (std::size_t i = 0; i < t.members.size(); ++i) std::memcpy(all[i].data(), ctl(t.members[i])->xchg, sizeof all[i]);
  team_barrier(team);  // nobody overwrites its record before every member has read it
  return all;
}

int HostBackend::claim_slot(std::uint64_t taken, int skip) const {
  for (int s = 0; s < kMaxTeams; ++s)
    if (!(taken >> s & 1) && s != skip) return s;
  throw Error(ErrorKind::generic, "all " + std::to_string(kMaxTeams) + " team slots are in use: destroy teams no longer needed");
}

void HostBackend::make_team(int slot, std::vector<int> members) {
  Team t;
  t.members = std::move(members);
  for (std::size_t i = 0; i < t.members.size(); ++i) {
    if (t.members[i] == pe_) t.my_index = int(i);
    // The slot is free on every member, so no member moves its counter while we read it.
    t.base.push_back(maps_[t.members[i]].data() ? load_acquire(ctl(t.members[i])->arrive[slot].value) : 0);
  }
  teams_[slot] = std::move(t);
  store_release(ctl(pe_)->teams_in_use.value, ctl(pe_)->teams_in_use.value | (1ull << slot));
}

int HostBackend::team_split_strided(int parent, int start, int stride, int size) {
  const Team& p = team_ref(parent);
  std::vector<int> members;
  for (int i = 0; i < size; ++i) members.push_back(p.members[start + i * stride]);
  const bool member = std::find(members.begin(), members.end(), pe_) != members.end();
  // Slots in use anywhere in the parent: a new team's slot must be free on all its members.
  std::uint64_t mine = ctl(pe_)->teams_in_use.value;
  auto all = exchange(parent, &mine, 1);
  std::uint64_t taken = 0;
  for (auto& r : all) taken |= r[0];
  const int slot = claim_slot(taken);
  if (member) make_team(slot, members);
  team_barrier(parent);  // bases are read before any member of the new team can arrive on it
  return member ? slot : kTeamInvalid;
}

std::pair<int, int> HostBackend::team_split_2d(int parent, int xrange) {
  const Team& p = team_ref(parent);
  const int n = int(p.members.size()), me = p.my_index;
  xrange = std::min(xrange, n);
  std::vector<int> xs, ys;
  for (int i = me / xrange * xrange; i < std::min(n, (me / xrange + 1) * xrange); ++i) xs.push_back(p.members[i]);
  for (int i = me % xrange; i < n; i += xrange) ys.push_back(p.members[i]);
  std::uint64_t mine = ctl(pe_)->teams_in_use.value;
  auto all = exchange(parent, &mine, 1);
  std::uint64_t taken = 0;
  for (auto& r : all) taken |= r[0];
  const int xslot = claim_slot(taken), yslot = claim_slot(taken, xslot);
  make_team(xslot, xs);
  make_team(yslot, ys);
  team_barrier(parent);
  return {xslot, yslot};
}

void HostBackend::team_destroy(int team) {
  team_ref(team);
  if (team == kTeamWorld || team == kTeamNode) throw Error(ErrorKind::value, "the world and node teams cannot be destroyed");
  teams_[team].reset();
  store_release(ctl(pe_)->teams_in_use.value, ctl(pe_)->teams_in_use.value & ~(1ull << team));
}

int HostBackend::team_translate_pe(int src_team, int pe, int dst_team) const {
  const Team& src = team_ref(src_team);
  const Team& dst = team_ref(dst_team);
  if (pe < 0 || pe >= int(src.members.size())) return -1;
  auto it = std::find(dst.members.begin(), dst.members.end(), src.members[pe]);
  return it == dst.members.end() ? -1 : int(it - dst.members.begin());
}

// ---- symmetric allocation -------------------------------------------------------------------

void HostBackend::check_symmetric_call(std::uint64_t kind, std::uint64_t a, std::uint64_t b, const char* what) {
  const std::uint64_t seq = ++call_seq_;
  const std::uint64_t mine[4] = {seq, kind, a, b};
  auto all = exchange(kTeamWorld, mine, 4);
  auto describe = [&](int p) {
    const auto& r = all[p];
    std::string s = "PE " + std::to_string(p) + " made symmetric call #" + std::to_string(r[0]) + ", ";
    if (r[1] == kCallAlloc) return s + "allocating " + std::to_string(r[2]) + " bytes of " + dtype_name(DType(r[3]));
    if (r[1] == kCallFree) return s + (r[2] == kNotLive ? "freeing an address that is not a live allocation"
                                                         : "freeing heap offset " + std::to_string(r[2]));
    return s + "no allocation call";
  };
  for (int p = 1; p < n_pes_; ++p)
    if (std::memcmp(all[p].data(), all[0].data(), 4 * sizeof(std::uint64_t)) != 0)
      throw Error(ErrorKind::symmetry, std::string(what) + " differs between PEs: " + describe(0) + "; " + describe(p) +
                                           ". Nothing was allocated or freed.");
}

Addr HostBackend::malloc(std::size_t bytes, DType dtype) {
  check_symmetric_call(kCallAlloc, bytes, std::uint64_t(dtype), "symmetric allocation");
  auto offset = allocator_.allocate(bytes);
  if (!offset)
    throw Error(ErrorKind::out_of_memory,
                "symmetric heap exhausted: requested " + std::to_string(bytes) + " bytes, " +
                    std::to_string(allocator_.free_bytes()) + " bytes free (largest free block " +
                    std::to_string(allocator_.largest_free_block()) + ") of " + std::to_string(heap_size_) +
                    "; raise heap_size or UNISHMEM_SYMMETRIC_SIZE");
  return heap_base() + *offset;
}

void HostBackend::free(Addr local) {
  const std::size_t offset = local - heap_base();
  const bool live = local >= heap_base() && allocator_.is_live(offset);
  check_symmetric_call(kCallFree, live ? offset : kNotLive, 0, "symmetric free");
  if (!live) throw Error(ErrorKind::value, "address " + std::to_string(local) + " is not a live symmetric allocation (already freed?)");
  allocator_.release(offset);
}

// ---- RMA, signals, atomics ---------------------------------------------------------------------

void HostBackend::put(Addr dest, Addr source, std::size_t bytes, int pe, Stream) {
  std::memmove(reinterpret_cast<void*>(translate(dest, pe)), reinterpret_cast<const void*>(source), bytes);
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
}

void HostBackend::put_signal(Addr dest, Addr source, std::size_t bytes, Addr sig, std::uint64_t value, SignalOp op,
                             int pe, Stream s) {
  put(dest, source, bytes, pe, s);
  signal_op(sig, value, op, pe, s);  // release: the data is visible before the signal
}

std::uint64_t HostBackend::signal_fetch(Addr sig) {
  return load_acquire(*reinterpret_cast<std::uint64_t*>(sig));
}

std::uint64_t HostBackend::signal_wait_until(Addr sig, Cmp cmp, std::uint64_t value, Stream) {
  auto& word = *reinterpret_cast<std::uint64_t*>(sig);
  std::uint64_t seen = 0;
  wait([&] { return compare(seen = load_acquire(word), cmp, value); },
       [&] { return "signal at heap offset " + std::to_string(sig - heap_base()) + " to become " + cmp_name(cmp) + " " +
                    std::to_string(value) + " (it is " + std::to_string(load_acquire(word)) + ")"; });
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
    wait([&] { return compare(load_acquire(word), cmp, target); },
         [&] { return "value at heap offset " + std::to_string(ptr - heap_base()) + " to become " + cmp_name(cmp) +
                      " " + std::to_string(target) + " (it is " + std::to_string(load_acquire(word)) + ")"; });
    return 0;
  });
}

void HostBackend::quiet(Stream) { std::atomic_thread_fence(std::memory_order_seq_cst); }
void HostBackend::fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

std::uint64_t HostBackend::atomic(AtomicOp op, DType type, Addr dest, std::uint64_t value, std::uint64_t cond, int pe) {
  return with_int_type(type, [&](auto zero) {
    using T = decltype(zero);
    return atomic_typed<T>(op, reinterpret_cast<T*>(translate(dest, pe)), from_bits<T>(value), from_bits<T>(cond));
  });
}

// ---- synchronisation and collectives --------------------------------------------------------
// Collectives read peers' sources straight from their mappings between two team barriers.

void HostBackend::enter_collective(int team, int op, std::size_t bytes, int dtype, int root, int redop) {
  // NOTE [collective check]: descriptors are double-buffered by barrier parity: a member
  // can only overwrite this parity's slot after passing the next barrier, which waits for us.
  const Team& t = team_ref(team);
  const int parity = int((t.epoch + 1) & 1);
  std::uint64_t* mine = ctl(pe_)->collective[team][parity];
  mine[0] = std::uint64_t(op) | std::uint64_t(dtype) << 8 | std::uint64_t(redop) << 16 | std::uint64_t(root) << 32;
  mine[1] = bytes;
  team_barrier(team);
  for (int m : t.members) {
    const std::uint64_t* theirs = ctl(m)->collective[team][parity];
    const std::uint64_t w[2] = {load_acquire(theirs[0]), load_acquire(theirs[1])};
    if (w[0] != mine[0] || w[1] != mine[1])
      throw Error(ErrorKind::symmetry, "collective on team " + std::to_string(team) + " differs between PEs: PE " +
                                           std::to_string(pe_) + " " + describe_collective(mine) + ", PE " +
                                           std::to_string(m) + " " + describe_collective(w));
  }
}

void HostBackend::reject_collective(int team) {
  try {
    enter_collective(team, kRejected, 0);
  } catch (const Error& e) {
    if (e.kind != ErrorKind::symmetry) throw;  // the mismatch is expected; the caller raises its own error
  }
}

void HostBackend::barrier(int team, Stream s) {
  quiet(s);
  enter_collective(team, kBarrier, 0);
}

void HostBackend::sync(int team, Stream) { enter_collective(team, kSync, 0); }

void HostBackend::broadcast(int team, Addr dest, Addr source, std::size_t bytes, int root, Stream) {
  const Team& t = team_ref(team);
  enter_collective(team, kBroadcast, bytes, 0, root);
  std::memmove(reinterpret_cast<void*>(dest), reinterpret_cast<const void*>(translate(source, t.members[root])), bytes);
  team_barrier(team);
}

void HostBackend::fcollect(int team, Addr dest, Addr source, std::size_t bytes, Stream) {
  const Team& t = team_ref(team);
  enter_collective(team, kFcollect, bytes);
  for (std::size_t i = 0; i < t.members.size(); ++i)
    std::memcpy(reinterpret_cast<char*>(dest) + i * bytes, reinterpret_cast<const void*>(translate(source, t.members[i])),
                bytes);
  team_barrier(team);
}

void HostBackend::alltoall(int team, Addr dest, Addr source, std::size_t bytes, Stream) {
  const Team& t = team_ref(team);
  enter_collective(team, kAlltoall, bytes);
  for (std::size_t i = 0; i < t.members.size(); ++i)
    std::memcpy(reinterpret_cast<char*>(dest) + i * bytes,
                reinterpret_cast<const void*>(translate(source + t.my_index * bytes, t.members[i])), bytes);
  team_barrier(team);
}

void HostBackend::reduce(int team, Addr dest, Addr source, std::size_t nelems, DType type, ReduceOp op, Stream) {
  // Reduce-scatter then all-gather: each member reduces one chunk, then copies the others'.
  // Safe in place (dest == source): a member only ever writes the chunk that no peer reads.
  const Team& t = team_ref(team);
  const int n = int(t.members.size());
  const std::size_t esz = dtype_size(type);
  auto chunk = [&](int i) { return std::pair{nelems * i / n * esz, (nelems * (i + 1) / n - nelems * i / n)}; };
  std::vector<const void*> srcs(n);
  enter_collective(team, kReduce, nelems * esz, int(type), 0, int(op));
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

void HostBackend::reducescatter(int team, Addr dest, Addr source, std::size_t nelems_out, DType type, ReduceOp op,
                                Stream) {
  const Team& t = team_ref(team);
  const int n = int(t.members.size());
  const std::size_t off = t.my_index * nelems_out * dtype_size(type);
  std::vector<const void*> srcs(n);
  for (int i = 0; i < n; ++i) srcs[i] = reinterpret_cast<const void*>(translate(source + off, t.members[i]));
  enter_collective(team, kReducescatter, nelems_out * dtype_size(type), int(type), 0, int(op));
  if (nelems_out) reduce_arrays(reinterpret_cast<void*>(dest), srcs.data(), n, nelems_out, type, op);
  team_barrier(team);
}

void HostBackend::finalize() { leave(true, kFinalized); }
void HostBackend::abandon() { leave(false, kAbandoned); }

void HostBackend::leave(bool collective_barrier, PeState state) {
  if (finalized_) return;
  std::exception_ptr failure;  // a dead peer must not stop this PE from letting go of its memory
  try {
    if (collective_barrier) enter_collective(kTeamWorld, kBarrier, 0);  // nobody touches a peer's memory after this
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
