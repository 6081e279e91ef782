// The GPU backend: one source for NVSHMEM and rocSHMEM, compiled against a
// mapping header (see NOTE [vendor mapping] in nvshmem_map.hpp), over the shared layer
// (NOTE [shared layer] in common/backend_base.hpp).
//
// NOTE [vendor heap]: the symmetric heap is ONE vendor allocation made at init;
// allocations inside it come from the shared deterministic allocator (common/),
// so rt.empty() never calls a vendor collective, every PE computes the same
// offsets, and a peer's copy is its heap base (vendor ptr) plus the offset.
//
// NOTE [vendor exchange]: the Call of every collective call (NOTE [collective
// descriptor]: malloc, free, splits, destroy, barriers, collectives) travels as a
// 64-byte record per PE through a small symmetric control buffer: puts on a private
// stream, quiet, a team barrier, then a read back. Full teams use barrier_all, so
// they share the world's records and call count: their calls meet the world's.
// Only puts, quiet and barrier_all are used for the world team, so it also
// works in NVSHMEM's limited multi-PE-per-GPU mode, which refuses host collectives.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../backend.hpp"
#include "../common/backend_base.hpp"
#include "../common/collective.hpp"
#include "../common/wait.hpp"

#if defined(UNISHMEM_NVSHMEM)
#include "nvshmem_map.hpp"
#elif defined(UNISHMEM_ROCSHMEM)
#include "rocshmem_map.hpp"
#else
#error "compile the GPU backend with UNISHMEM_NVSHMEM or UNISHMEM_ROCSHMEM"
#endif

namespace unishmem::gpu {

constexpr int kMaxTeams = 32;
constexpr int kRecordWords = kCallWords + 1;  // 64 bytes per PE and call: a Call, then a word not compared

// NOTE [team descriptor] (layout in pysrc/unishmem/language/_triton_impl.py; keep the two in step):
// where lib::kTeamDescriptorBytes > 0, every team slot owns that many bytes of a symmetric buffer,
// at the same offset on every PE: int64 words start, stride, size (members are world PEs start +
// i * stride), scratch bytes, then this PE's epoch and the round counters that the Triton barrier
// uses, and from byte kDescScratchOffset the reduction scratch. The header is written when a team
// is made; the rest is zeroed at init and when the team is destroyed (after its last barrier, so no
// member still signals into it, and before the slot can be claimed again).
constexpr int kDescStart = 0, kDescStride = 1, kDescSize = 2, kDescScratchBytes = 3;
constexpr std::size_t kDescScratchOffset = 512;

struct TeamEntry : TeamInfo {
  lib::Team handle{};
  std::uint64_t epoch = 0;  // a channel's own: calls entered on it so far
};

class GpuBackend final : public BackendBase {
 public:
  // Collective over all PEs.
  GpuBackend(const std::string& unique_id, int pe, int n_pes, int device, std::size_t heap_size,
             WaitPolicy policy);
  ~GpuBackend() override;
  GpuBackend(const GpuBackend&) = delete;
  GpuBackend& operator=(const GpuBackend&) = delete;

  static std::string unique_id();  // made on PE 0 and handed to every PE by the bootstrap

  Addr heap_base() const override { return reinterpret_cast<Addr>(heap_); }
  Addr peer_heap_base(int pe) const { return peer_base_.at(pe); }
  int device() const { return device_; }
  bool limited_mode() const { return limited_; }
  std::string init_mode() const { return lib::init_mode(); }
  void module_init(std::uintptr_t module, Stream s);

  Addr peer_ptr(Addr local, int pe) const override;
  std::int64_t team_device_handle(int team) const override;

  void put(Addr dest, Addr source, std::size_t bytes, int pe, Stream s) override;
  void get(Addr dest, Addr source, std::size_t bytes, int pe, Stream s) override;
  void put_signal(Addr dest, Addr source, std::size_t bytes, Addr sig, std::uint64_t value, SignalOp op, int pe,
                  Stream s) override;
  void signal_op(Addr sig, std::uint64_t value, SignalOp op, int pe, Stream s) override;
  std::uint64_t signal_wait_until(Addr sig, Cmp cmp, std::uint64_t value, Stream s) override;
  void signal_wait_until_on_stream(Addr sig, Cmp cmp, std::uint64_t value, Stream s) override;
  std::uint64_t signal_fetch(Addr sig) override;
  void wait_until(Addr ptr, DType type, Cmp cmp, std::uint64_t value) override;
  bool test(Addr ptr, DType type, Cmp cmp, std::uint64_t value) override;
  std::size_t wait_until_any(Addr ptr, std::size_t stride, DType type, Cmp cmp,
                             const std::vector<std::uint64_t>& values) override;
  void quiet(Stream s) override;
  void fence() override;
  std::uint64_t atomic(AtomicOp op, DType type, Addr dest, std::uint64_t value, std::uint64_t cond,
                       int pe) override;

  // The same overrides as HostBackend's (host_backend.hpp), on purpose: each backend implements the whole
  // Backend interface; what they share is above it, in BackendBase (NOTE [shared layer]).
  void finalize() override;
  void abandon() override;

 private:
  // The shared layer's primitives (NOTE [shared layer]).
  const TeamInfo& team_info(int team) const override { return team_ref(team); }
  std::uint64_t teams_in_use() const override;
  void enter(int team, Call call, std::uint64_t payload = 0) override;
  std::uint64_t payload(int, int i) const override { return payloads_.at(i); }
  void prepare(const Call& call) override;
  int split_strided(int parent, int slot, int start, int stride, int size) override;
  void split_2d(int parent, int xslot, int yslot, int xrange) override;
  void destroy_team(int team) override;
  void run_barrier(int team, Stream s) override;
  void run_sync(int team, Stream s) override;
  void run_broadcast(int team, Addr dest, Addr source, std::size_t bytes, int root, Stream s) override;
  void run_fcollect(int team, Addr dest, Addr source, std::size_t bytes_per_pe, Stream s) override;
  void run_alltoall(int team, Addr dest, Addr source, std::size_t bytes_per_pe, Stream s) override;
  void run_reduce(int team, Addr dest, Addr source, std::size_t nelems, DType type, ReduceOp op, Stream s) override;
  void run_reducescatter(int team, Addr dest, Addr source, std::size_t nelems_out, DType type, ReduceOp op,
                         Stream s) override;

  TeamEntry& team_ref(int team) { return team_in(teams_, team); }
  const TeamEntry& team_ref(int team) const { return team_in(teams_, team); }
  std::uint64_t* slot(int team, int parity, int pe) const;
  std::uint64_t* staging() const;
  void team_barrier(int team, bool complete_puts, lib::Stream s);
  void require_full_mode(const char* call) const;
  void add_team(int slot, lib::Team handle);
  std::uint64_t* descriptor(int slot) const;
  void write_descriptor(int slot);   // NOTE [team descriptor]: the header, from the team's members
  void clear_descriptors(int first, int count);
  std::uint64_t read_local(Addr addr, std::size_t size);
  template <class Done, class Describe> void wait(Done&& done, Describe&& describe);
  void release(bool collective);

  int device_;
  SpinState spin_;  // stays 0: every poll is a device-to-host copy, so no busy spin
  Doorbell bell_;   // nobody rings it (the device writes): its sleeps are timed
  void* heap_ = nullptr;
  std::uint64_t* ctl_ = nullptr;  // symmetric control buffer (NOTE [vendor exchange])
  std::uint64_t* desc_ = nullptr; // symmetric team descriptors, one per slot (NOTE [team descriptor]); null if unused
  std::vector<Addr> peer_base_;   // each PE's heap base in this process's address space; 0 if unreachable
  lib::Stream stream_{};          // private, non-blocking
  std::uint64_t* pinned_ = nullptr;  // page-locked host buffer for records and polled words
  std::array<std::optional<TeamEntry>, kMaxTeams> teams_;
  std::vector<std::uint64_t> payloads_;  // each member's, in the call last entered
  bool limited_ = false;
  bool finalized_ = false;
};

}  // namespace unishmem::gpu
