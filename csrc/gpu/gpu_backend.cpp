#include "gpu_backend.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string_view>

#include "../common/dtype.hpp"
#include "../common/status.hpp"

namespace unishmem::gpu {

namespace {

// The library can be initialised once per process: after a failed init every further call
// may end the process (VENDOR_NOTES), and one runtime at a time owns it.
bool g_library_failed = false;
bool g_library_active = false;

void require_library_usable() {
  if (g_library_failed)
    throw Error(ErrorKind::unavailable, std::string(lib::kName) + " failed to initialise earlier in this process; "
                                        "it cannot be used again until the process restarts");
}

// The device runtime's (CUDA / HIP) statuses and the library's (NOTE [status check]).
void rt_check(int rc, const char* call) {
  check_status(rc, ErrorKind::generic, [&](int e) {
    return std::string(lib::kRuntimeName) + " " + call + " failed: " + lib::rt_error(e);
  });
}

void lib_check(int rc, std::string_view call) {
  check_status(rc, ErrorKind::generic, [&](int e) {
    return std::string(lib::kName) + " " + std::string(call) + " returned " + std::to_string(e);
  });
}

lib::Stream as_stream(Stream s) { return reinterpret_cast<lib::Stream>(s); }
void* ptr(Addr a) { return reinterpret_cast<void*>(a); }

}  // namespace

// ---- lifetime --------------------------------------------------------------------------------

std::string GpuBackend::unique_id() {
  require_library_usable();
  lib::UniqueId id;
  check_status(lib::get_uniqueid(&id), ErrorKind::unavailable, [](int rc) {
    return std::string(lib::kName) + " could not make a unique id (rc " + std::to_string(rc) + ", " +
           lib::status_name(rc) + ")";
  });
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

GpuBackend::GpuBackend(const std::string& unique_id, int pe, int n_pes, int device, std::size_t heap_size,
                       WaitPolicy policy)
    : BackendBase(pe, n_pes, heap_size, kMaxTeams, policy), device_(device) {
  const std::string lib_name = lib::kName;
  require_library_usable();
  if (g_library_active)
    throw Error(ErrorKind::unavailable, lib_name + " is still initialised in this process by an earlier runtime "
                                        "that was abandoned after an error");
  if (unique_id.size() != sizeof(lib::UniqueId))
    throw Error(ErrorKind::value, "unique id has " + std::to_string(unique_id.size()) + " bytes, " + lib_name +
                                      " expects " + std::to_string(sizeof(lib::UniqueId)));
  // The device runtime first: without a usable device the library is never called (a failed
  // init leaves it unusable for the rest of the process).
  check_status(lib::rt_set_device(device), ErrorKind::unavailable, [&](int rc) {
    return std::string(lib::kRuntimeName) + " cannot use device " + std::to_string(device) + ": " + lib::rt_error(rc);
  });
  check_status(lib::rt_init_context(), ErrorKind::unavailable, [&](int rc) {
    return std::string(lib::kRuntimeName) + " could not initialise device " + std::to_string(device) + ": " +
           lib::rt_error(rc);
  });
  lib::UniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof id);
  const char* call = "";
  const int init_rc = lib::init_with_uniqueid(pe, n_pes, &id, &call);
  g_library_failed = init_rc != 0;
  check_status(init_rc, ErrorKind::unavailable, [&](int rc) {
    return lib_name + " did not initialise: " + call + " returned " + std::to_string(rc) + " (" +
           lib::status_name(rc) + "); its own message above says more. The library cannot be used again in this "
           "process";
  });
  g_library_active = true;
  try {
    if (lib::my_pe() != pe || lib::n_pes() != n_pes)
      throw Error(ErrorKind::unavailable, lib_name + " numbered this PE " + std::to_string(lib::my_pe()) + " of " +
                                              std::to_string(lib::n_pes()) + ", the bootstrap " + std::to_string(pe) +
                                              " of " + std::to_string(n_pes));
    limited_ = lib::limited_mode();
    rt_check(lib::rt_stream_create(&stream_), "stream create");
    void* pinned = nullptr;
    rt_check(lib::rt_host_alloc(&pinned, std::size_t(n_pes + 1) * kRecordWords * 8), "page-locked host alloc");
    pinned_ = static_cast<std::uint64_t*>(pinned);
    heap_ = lib::sym_malloc(heap_size);
    const std::size_t ctl_bytes = (std::size_t(kMaxTeams) * 2 * n_pes + 2) * kRecordWords * 8;
    ctl_ = static_cast<std::uint64_t*>(lib::sym_malloc(ctl_bytes));
    if constexpr (lib::kTeamDescriptorBytes > 0)
      desc_ = static_cast<std::uint64_t*>(lib::sym_malloc(std::size_t(kMaxTeams) * lib::kTeamDescriptorBytes));
    if (!heap_ || !ctl_ || (lib::kTeamDescriptorBytes > 0 && !desc_))
      throw Error(ErrorKind::unavailable, lib_name + " could not allocate the symmetric heap of " +
                                              std::to_string(heap_size) + " bytes plus " + std::to_string(ctl_bytes) +
                                              " control bytes; lower heap_size or raise the library's symmetric "
                                              "heap size (NVSHMEM_SYMMETRIC_SIZE / ROCSHMEM_HEAP_SIZE)");
    peer_base_.resize(n_pes);
    for (int p = 0; p < n_pes; ++p) peer_base_[p] = reinterpret_cast<Addr>(lib::peer_ptr(heap_, p));
    peer_base_[pe] = reinterpret_cast<Addr>(heap_);

    std::vector<int> all(n_pes);
    for (int i = 0; i < n_pes; ++i) all[i] = i;
    TeamEntry& world = teams_[kTeamWorld].emplace();
    world.members = all;
    world.id = team_identity(all);
    world.my_index = pe;
    world.channel = kTeamWorld;
    world.handle = lib::team_world();
    add_team(kTeamNode, lib::team_node());
    if (desc_) {  // NOTE [team descriptor]: zeroed everywhere before any kernel can signal into one
      clear_descriptors(0, kMaxTeams);
      write_descriptor(kTeamWorld);
      write_descriptor(kTeamNode);
      lib::barrier_all_on_stream(stream_);
      rt_check(lib::rt_stream_sync(stream_), "stream synchronize");
    }
  } catch (...) {
    // Leave collectively where possible: every PE reaches the same failure here.
    release(true);
    throw;
  }
}

GpuBackend::~GpuBackend() {
  // NOTE [no collective in destructors]: an unfinalized backend is left alone; finalize()
  // or abandon() decide how to leave.
}

void GpuBackend::release(bool collective) {
  if (collective && g_library_active) {
    if (desc_) lib::sym_free(desc_);
    desc_ = nullptr;
    if (ctl_) lib::sym_free(ctl_);
    if (heap_) lib::sym_free(heap_);
    ctl_ = nullptr;
    heap_ = nullptr;
    for (int s = 0; s < kMaxTeams; ++s)
      if (teams_[s] && s != kTeamWorld && s != kTeamNode) lib::team_destroy(teams_[s]->handle);
    lib::finalize();
    g_library_active = false;
  }
  for (auto& t : teams_) t.reset();
  if (stream_) lib::rt_stream_destroy(stream_);
  if (pinned_) lib::rt_host_free(pinned_);
  stream_ = {};
  pinned_ = nullptr;
  finalized_ = true;
}

void GpuBackend::finalize() {
  if (finalized_) return;
  std::exception_ptr failure;
  try {
    // No work of this process may still touch the heap when it is freed.
    rt_check(lib::rt_device_sync(), "device synchronize");
    enter(kTeamWorld, Call{.op = CallOp::finalize});
    team_barrier(kTeamWorld, true, stream_);
    rt_check(lib::rt_stream_sync(stream_), "stream synchronize");
  } catch (...) {
    failure = std::current_exception();
  }
  release(failure == nullptr);
  if (failure) std::rethrow_exception(failure);
}

void GpuBackend::abandon() {
  // The library's own finalize is collective: leaving without peers would hang here, so the
  // library stays initialised (g_library_active) until the process ends.
  if (!finalized_) release(false);
}

void GpuBackend::module_init(std::uintptr_t module, Stream s) {
  if (finalized_) throw Error(ErrorKind::generic, "the runtime was finalized");
  check_status(lib::module_init(module, as_stream(s)), ErrorKind::generic, [](int rc) {
    return std::string(lib::kModuleInitCall) + " returned " + std::to_string(rc) +
           ": the module's device bitcode must come from the same " + lib::kName +
           " release as the host library, and the module must use its device state";
  });
}

// ---- helpers ---------------------------------------------------------------------------------

void GpuBackend::add_team(int slot, lib::Team handle) {
  TeamEntry t;
  t.handle = handle;
  t.channel = slot;
  const int n = lib::team_n_pes(handle);
  for (int i = 0; i < n; ++i) t.members.push_back(lib::team_translate_pe(handle, i, lib::team_world()));
  t.id = team_identity(t.members);
  t.my_index = lib::team_my_pe(handle);
  if (n == n_pes_) t.channel = kTeamWorld;  // its barrier is barrier_all: it meets the world's calls
  teams_[slot] = std::move(t);
  if (desc_ && slot != kTeamNode) write_descriptor(slot);  // the node team's is written at init, after the clear
}

std::uint64_t* GpuBackend::descriptor(int slot) const {
  return desc_ + std::size_t(slot) * (lib::kTeamDescriptorBytes / 8);
}

void GpuBackend::write_descriptor(int slot) {
  const TeamEntry& t = team_ref(slot);
  const std::int64_t n = std::int64_t(t.members.size());
  const std::int64_t stride = n > 1 ? t.members[1] - t.members[0] : 1;
  for (std::int64_t i = 0; i < n; ++i)
    if (t.members[i] != t.members[0] + i * stride)
      throw Error(ErrorKind::generic, "team in slot " + std::to_string(slot) + " is not a strided set of world PEs; "
                                      "its device descriptor cannot describe it");
  std::uint64_t header[4] = {};
  header[kDescStart] = std::uint64_t(t.members[0]);
  header[kDescStride] = std::uint64_t(stride);
  header[kDescSize] = std::uint64_t(n);
  header[kDescScratchBytes] = lib::kTeamDescriptorBytes - kDescScratchOffset;
  std::memcpy(pinned_, header, sizeof header);
  rt_check(lib::rt_copy_to_device(descriptor(slot), pinned_, sizeof header, stream_), "copy to device");
  rt_check(lib::rt_stream_sync(stream_), "stream synchronize");  // pinned_ is reused; kernels read it next
}

void GpuBackend::clear_descriptors(int first, int count) {
  const std::vector<std::uint64_t> zeros(std::size_t(count) * lib::kTeamDescriptorBytes / 8, 0);
  rt_check(lib::rt_copy_to_device(descriptor(first), zeros.data(), zeros.size() * 8, stream_), "copy to device");
  rt_check(lib::rt_stream_sync(stream_), "stream synchronize");
}

std::int64_t GpuBackend::team_device_handle(int team) const {
  const TeamEntry& t = team_ref(team);  // checks the slot
  if (desc_) return static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(descriptor(team)));
  return lib::team_value(t.handle);
}

std::uint64_t* GpuBackend::slot(int team, int parity, int pe) const {
  return ctl_ + ((std::size_t(team) * 2 + parity) * n_pes_ + pe) * kRecordWords;
}

std::uint64_t* GpuBackend::staging() const { return ctl_ + std::size_t(kMaxTeams) * 2 * n_pes_ * kRecordWords; }

void GpuBackend::require_full_mode(const char* call) const {
  if (limited_)
    throw Error(ErrorKind::generic,
                std::string(lib::kName) + " runs in limited multi-PE-per-GPU mode (several PEs share a GPU without "
                "CUDA MPS), where " + call + " ends the process; unishmem refuses it. Run one PE per GPU, or start "
                "an MPS daemon with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE summing to at most 100 over the PEs");
}

void GpuBackend::team_barrier(int team, bool complete_puts, lib::Stream s) {
  const TeamEntry& t = team_ref(team);
  if (int(t.members.size()) == n_pes_) {  // the world, or a team with the same members
    if (complete_puts)
      lib::barrier_all_on_stream(s);
    else
      lib::sync_all_on_stream(s);
    return;
  }
  require_full_mode("a barrier on a team smaller than the world");
  if constexpr (lib::kTeamBarrierOnStream) {
    lib_check(complete_puts ? lib::barrier_on_stream(t.handle, s) : lib::team_sync_on_stream(t.handle, s),
              "team barrier");
  } else {
    // No team barrier in the library: an all-reduce of one word over the team completes
    // only once every member has contributed, after its own puts completed (quiet).
    if (complete_puts) lib::quiet_on_stream(s);
    rt_check(lib::rt_stream_sync(s), "stream synchronize");
    std::uint64_t* scratch = staging() + kRecordWords;
    lib_check(lib::reduce(DType::i32, ReduceOp::sum, t.handle, scratch + 1, scratch, 1, s),
              "reduction used as team barrier");
  }
}

void GpuBackend::enter(int team, Call call, std::uint64_t payload) {
  const TeamEntry& t = team_ref(team);
  TeamEntry& channel = team_ref(t.channel);
  call.team = team;
  call.team_id = t.id;
  call.seq = ++channel.epoch;
  const int parity = int(call.seq & 1);
  const CallWords mine = call.pack();
  std::memcpy(pinned_, mine.data(), sizeof mine);
  pinned_[kCallWords] = payload;
  rt_check(lib::rt_copy_to_device(staging(), pinned_, kRecordWords * 8, stream_), "copy to device");
  for (int m : t.members)
    lib::putmem_on_stream(slot(t.channel, parity, pe_), staging(), kRecordWords * 8, m, stream_);
  // Double-buffered by parity: a member writes this parity again only after the next
  // call's barrier, which waits for every member to have read this one.
  team_barrier(team, true, stream_);
  rt_check(lib::rt_copy_to_host(pinned_, slot(t.channel, parity, 0), std::size_t(n_pes_) * kRecordWords * 8, stream_),
           "copy to host");
  rt_check(lib::rt_stream_sync(stream_), "stream synchronize");
  payloads_.resize(t.members.size());
  std::vector<CallWords> all(t.members.size());
  bool same = true;
  for (std::size_t i = 0; i < t.members.size(); ++i) {
    const std::uint64_t* record = pinned_ + std::size_t(t.members[i]) * kRecordWords;
    std::memcpy(all[i].data(), record, sizeof mine);
    payloads_[i] = record[kCallWords];
    same = same && all[i] == mine;
  }
  if (!same) raise_mismatch(t.members, all, mine);
}

void GpuBackend::prepare(const Call& call) {
  switch (call.op) {
    case CallOp::split_strided: return require_full_mode("team_split_strided");
    case CallOp::split_2d: return require_full_mode("team_split_2d");
    case CallOp::broadcast: return require_full_mode("broadcastmem_on_stream");
    case CallOp::fcollect: return require_full_mode("fcollectmem_on_stream");
    case CallOp::alltoall: return require_full_mode("alltoallmem_on_stream");
    case CallOp::reduce:
    case CallOp::reducescatter: {
      const bool scatter = call.op == CallOp::reducescatter;
      require_full_mode(scatter ? "reducescatter_on_stream" : "reduce_on_stream");
      if (const char* missing = lib::missing_reduction(call.dtype, scatter))
        throw Error(ErrorKind::generic, std::string(lib::kName) + " has no " + missing + ": " +
                                            dtype_name(call.dtype) +
                                            (scatter ? " reduce-scatter is" : " reductions are") +
                                            " not available on this backend");
      return;
    }
    default: return;
  }
}

std::uint64_t GpuBackend::read_local(Addr addr, std::size_t size) {
  rt_check(lib::rt_copy_to_host(pinned_, ptr(addr), size, stream_), "copy to host");
  rt_check(lib::rt_stream_sync(stream_), "stream synchronize");
  std::uint64_t v = 0;
  std::memcpy(&v, pinned_, size);
  return v;
}

template <class Done, class Describe>
void GpuBackend::wait(Done&& done, Describe&& describe) {
  wait_for(done, describe, policy_, spin_, bell_, [&] {
    if (wait_check_) wait_check_();
  });
}

// ---- heap and teams -------------------------------------------------------------------------

Addr GpuBackend::peer_ptr(Addr local, int pe) const {
  const Addr base = peer_base_.at(pe);
  return base ? base + (local - heap_base()) : 0;
}

std::uint64_t GpuBackend::teams_in_use() const {
  std::uint64_t mine = 0;
  for (int s = 0; s < kMaxTeams; ++s)
    if (teams_[s]) mine |= 1ull << s;
  return mine;
}

int GpuBackend::split_strided(int parent, int slot, int start, int stride, int size) {
  lib::Team t = lib::team_invalid();
  lib_check(lib::team_split_strided(team_ref(parent).handle, start, stride, size, &t),
            "team_split_strided(start=" + std::to_string(start) + ", stride=" + std::to_string(stride) +
                ", size=" + std::to_string(size) + ")");
  if (t == lib::team_invalid()) return kTeamInvalid;
  add_team(slot, t);
  return slot;
}

void GpuBackend::split_2d(int parent, int xslot, int yslot, int xrange) {
  const TeamEntry& p = team_ref(parent);
  const int n = int(p.members.size());
  lib::Team x = lib::team_invalid(), y = lib::team_invalid();
  if constexpr (lib::kSplit2d) {
    lib_check(lib::team_split_2d(p.handle, xrange, &x, &y), "team_split_2d(xrange=" + std::to_string(xrange) + ")");
  } else {
    // On top of split_strided: every row, then every column, each split called by all PEs
    // of the parent; a PE keeps the one row and the one column it belongs to.
    for (int r = 0; r * xrange < n; ++r) {
      lib::Team t = lib::team_invalid();
      lib_check(lib::team_split_strided(p.handle, r * xrange, 1, std::min(xrange, n - r * xrange), &t),
                "team_split_strided for row " + std::to_string(r));
      if (t != lib::team_invalid()) x = t;
    }
    for (int c = 0; c < xrange; ++c) {
      lib::Team t = lib::team_invalid();
      lib_check(lib::team_split_strided(p.handle, c, xrange, (n - c + xrange - 1) / xrange, &t),
                "team_split_strided for column " + std::to_string(c));
      if (t != lib::team_invalid()) y = t;
    }
  }
  add_team(xslot, x);
  add_team(yslot, y);
}

void GpuBackend::destroy_team(int team) {
  lib::team_destroy(team_ref(team).handle);
  teams_[team].reset();
  if (desc_) clear_descriptors(team, 1);  // NOTE [team descriptor]: fresh counters for the slot's next team
}

// ---- RMA, signals, atomics -------------------------------------------------------------------

void GpuBackend::put(Addr dest, Addr source, std::size_t bytes, int pe, Stream s) {
  lib::putmem_on_stream(ptr(dest), ptr(source), bytes, pe, as_stream(s));
}

void GpuBackend::get(Addr dest, Addr source, std::size_t bytes, int pe, Stream s) {
  lib::getmem_on_stream(ptr(dest), ptr(source), bytes, pe, as_stream(s));
}

void GpuBackend::put_signal(Addr dest, Addr source, std::size_t bytes, Addr sig, std::uint64_t value, SignalOp op,
                               int pe, Stream s) {
  lib::putmem_signal_on_stream(ptr(dest), ptr(source), bytes, static_cast<std::uint64_t*>(ptr(sig)), value, op, pe,
                               as_stream(s));
}

void GpuBackend::signal_op(Addr sig, std::uint64_t value, SignalOp op, int pe, Stream s) {
  if constexpr (lib::kSignalOpOnStream) {
    lib::signal_op_on_stream(static_cast<std::uint64_t*>(ptr(sig)), value, op, pe, as_stream(s));
  } else {
    // A signal word is a uint64 atomic: after the stream's earlier work, set or add on the host.
    rt_check(lib::rt_stream_sync(as_stream(s)), "stream synchronize");
    lib::atomic(op == SignalOp::add ? AtomicOp::add : AtomicOp::set, DType::u64, ptr(sig), value, 0, pe);
  }
}

std::uint64_t GpuBackend::signal_fetch(Addr sig) { return read_local(sig, 8); }

std::uint64_t GpuBackend::signal_wait_until(Addr sig, Cmp cmp, std::uint64_t value, Stream s) {
  // A host-side wait (it returns the value seen): after the stream's earlier work, poll the
  // local word. The library's *_wait_until_on_stream is not used: limited mode refuses it.
  rt_check(lib::rt_stream_sync(as_stream(s)), "stream synchronize");
  std::uint64_t seen = 0;
  wait([&] { return compare(seen = read_local(sig, 8), cmp, value); },
       [&] { return signal_wait_text(sig, cmp, value, seen); });
  return seen;
}

void GpuBackend::signal_wait_until_on_stream(Addr sig, Cmp cmp, std::uint64_t value, Stream s) {
  // The stream waits, the host does not. NVSHMEM's limited mode ends the process on this call.
  require_full_mode(lib::kSignalWaitOnStreamCall);
  rt_check(lib::signal_wait_until_on_stream(static_cast<std::uint64_t*>(ptr(sig)), cmp, value, as_stream(s)),
           lib::kSignalWaitOnStreamCall);
}

void GpuBackend::wait_until(Addr p, DType type, Cmp cmp, std::uint64_t value) {
  const std::size_t size = dtype_size(type);
  std::uint64_t seen = 0;
  wait([&] { return compare_bits(type, seen = read_local(p, size), cmp, value); },
       [&] { return value_wait_text(p, type, cmp, value, seen); });
}

bool GpuBackend::test(Addr p, DType type, Cmp cmp, std::uint64_t value) {
  return compare_bits(type, read_local(p, dtype_size(type)), cmp, value);
}

std::size_t GpuBackend::wait_until_any(Addr p, std::size_t stride, DType type, Cmp cmp,
                                         const std::vector<std::uint64_t>& values) {
  std::optional<std::size_t> found;
  wait([&] { return (found = first_ready(p, stride, type, cmp, values)).has_value(); },
       [&] { return any_wait_text(p, stride, cmp, values); });
  return *found;
}

void GpuBackend::quiet(Stream s) { lib::quiet_on_stream(as_stream(s)); }
void GpuBackend::fence() { lib::fence(); }

std::uint64_t GpuBackend::atomic(AtomicOp op, DType type, Addr dest, std::uint64_t value, std::uint64_t cond,
                                    int pe) {
  return lib::atomic(op, type, ptr(dest), value, cond, pe);
}

// ---- synchronisation and collectives (checked first by the shared layer) ---------------------

void GpuBackend::run_barrier(int team, Stream s) {
  team_barrier(team, true, as_stream(s));
  // Returns once the barrier has passed on the stream: host-initiated operations (atomics)
  // issued next cannot overtake stream work that preceded the barrier on any PE.
  rt_check(lib::rt_stream_sync(as_stream(s)), "stream synchronize");
}

void GpuBackend::run_sync(int team, Stream s) {
  team_barrier(team, false, as_stream(s));
  rt_check(lib::rt_stream_sync(as_stream(s)), "stream synchronize");
}

void GpuBackend::run_broadcast(int team, Addr dest, Addr source, std::size_t bytes, int root, Stream s) {
  lib_check(lib::broadcastmem_on_stream(team_ref(team).handle, ptr(dest), ptr(source), bytes, root, as_stream(s)),
            "broadcastmem_on_stream");
}

void GpuBackend::run_fcollect(int team, Addr dest, Addr source, std::size_t bytes, Stream s) {
  const TeamEntry& t = team_ref(team);
  if constexpr (lib::kFcollectOnStream) {
    lib_check(lib::fcollectmem_on_stream(t.handle, ptr(dest), ptr(source), bytes, as_stream(s)),
              "fcollectmem_on_stream");
  } else {
    // On top of puts: this PE's block goes to block my_index of every member, then a team barrier.
    for (int m : t.members) lib::putmem_on_stream(ptr(dest + t.my_index * bytes), ptr(source), bytes, m, as_stream(s));
    team_barrier(team, true, as_stream(s));
  }
}

void GpuBackend::run_alltoall(int team, Addr dest, Addr source, std::size_t bytes, Stream s) {
  lib_check(lib::alltoallmem_on_stream(team_ref(team).handle, ptr(dest), ptr(source), bytes, as_stream(s)),
            "alltoallmem_on_stream");
}

void GpuBackend::run_reduce(int team, Addr dest, Addr source, std::size_t nelems, DType type, ReduceOp op,
                            Stream s) {
  lib_check(lib::reduce(type, op, team_ref(team).handle, ptr(dest), ptr(source), nelems, as_stream(s)), "reduction");
}

void GpuBackend::run_reducescatter(int team, Addr dest, Addr source, std::size_t nelems_out, DType type, ReduceOp op,
                                   Stream s) {
  lib_check(lib::reducescatter(type, op, team_ref(team).handle, ptr(dest), ptr(source), nelems_out, as_stream(s)),
            "reduce-scatter");
}

}  // namespace unishmem::gpu
