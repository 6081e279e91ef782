// The vendor backend: one source for NVSHMEM and rocSHMEM, compiled against a
// mapping header (see NOTE [vendor mapping] in nvshmem_map.hpp).
//
// NOTE [vendor heap]: the symmetric heap is ONE vendor allocation made at init;
// allocations inside it come from the same deterministic allocator as the host
// backend, so rt.empty() never calls a vendor collective, every PE computes the
// same offsets, and a peer's copy is its heap base (vendor ptr) plus the offset.
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
#include "../common/collective.hpp"
#include "../host/allocator.hpp"
#include "../host/wait.hpp"

#if defined(UNISHMEM_NVSHMEM)
#include "nvshmem_map.hpp"
#elif defined(UNISHMEM_ROCSHMEM)
#include "rocshmem_map.hpp"
#else
#error "compile the vendor backend with UNISHMEM_NVSHMEM or UNISHMEM_ROCSHMEM"
#endif

namespace unishmem::vendor {

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

struct TeamEntry {
  lib::Team handle;
  std::vector<int> members;  // world PEs in team order
  std::uint64_t id = 0;      // team_identity(members)
  int my_index = -1;
  int channel = 0;           // whose records and call count it uses: the world's for a full team
  std::uint64_t epoch = 0;   // a channel's own: calls entered on it so far
};

class VendorBackend final : public Backend {
 public:
  // Collective over all PEs. node_groups: (first world PE, count) of each node, in order;
  // used only where the library has no node team of its own.
  VendorBackend(const std::string& unique_id, int pe, int n_pes, int device, std::size_t heap_size,
                host::WaitPolicy policy, const std::vector<std::pair<int, int>>& node_groups);
  ~VendorBackend() override;
  VendorBackend(const VendorBackend&) = delete;
  VendorBackend& operator=(const VendorBackend&) = delete;

  static std::string unique_id();  // made on PE 0 and handed to every PE by the bootstrap
  void set_wait_check(host::WaitCheck check) { check_ = std::move(check); }

  int my_pe() const override { return pe_; }
  int n_pes() const override { return n_pes_; }
  Addr heap_base() const override { return reinterpret_cast<Addr>(heap_); }
  std::size_t heap_size() const override { return heap_size_; }
  Addr peer_heap_base(int pe) const { return peer_base_.at(pe); }
  int device() const { return device_; }
  bool limited_mode() const { return limited_; }
  std::string init_mode() const { return lib::init_mode(); }
  void module_init(std::uintptr_t module, Stream s);

  Addr malloc(std::size_t bytes, DType dtype) override;
  void free(Addr local) override;
  std::size_t heap_free_bytes() const override { return allocator_.free_bytes(); }
  Addr peer_ptr(Addr local, int pe) const override;

  int team_my_pe(int team) const override { return team_ref(team).my_index; }
  int team_n_pes(int team) const override { return int(team_ref(team).members.size()); }
  int team_translate_pe(int src_team, int pe, int dst_team) const override;
  int team_split_strided(int parent, int start, int stride, int size) override;
  std::pair<int, int> team_split_2d(int parent, int xrange) override;
  void team_destroy(int team) override;
  std::int64_t team_device_handle(int team) const override;

  void put(Addr dest, Addr source, std::size_t bytes, int pe, Stream s) override;
  void get(Addr dest, Addr source, std::size_t bytes, int pe, Stream s) override;
  void put_signal(Addr dest, Addr source, std::size_t bytes, Addr sig, std::uint64_t value, SignalOp op, int pe,
                  Stream s) override;
  void signal_op(Addr sig, std::uint64_t value, SignalOp op, int pe, Stream s) override;
  std::uint64_t signal_wait_until(Addr sig, Cmp cmp, std::uint64_t value, Stream s) override;
  std::uint64_t signal_fetch(Addr sig) override;
  void wait_until(Addr ptr, DType type, Cmp cmp, std::uint64_t value) override;
  bool test(Addr ptr, DType type, Cmp cmp, std::uint64_t value) override;
  std::size_t wait_until_any(Addr ptr, std::size_t stride, DType type, Cmp cmp,
                             const std::vector<std::uint64_t>& values) override;
  void quiet(Stream s) override;
  void fence() override;
  std::uint64_t atomic(AtomicOp op, DType type, Addr dest, std::uint64_t value, std::uint64_t cond,
                       int pe) override;

  void barrier(int team, Stream s) override;
  void sync(int team, Stream s) override;
  void broadcast(int team, Addr dest, Addr source, std::size_t bytes, DType type, int root, Stream s) override;
  void fcollect(int team, Addr dest, Addr source, std::size_t bytes_per_pe, DType type, Stream s) override;
  void alltoall(int team, Addr dest, Addr source, std::size_t bytes_per_pe, DType type, Stream s) override;
  void reduce(int team, Addr dest, Addr source, std::size_t nelems, DType type, ReduceOp op, Stream s) override;
  void reducescatter(int team, Addr dest, Addr source, std::size_t nelems_out, DType type, ReduceOp op,
                     Stream s) override;

  void reject_collective(int team) override;
  void finalize() override;
  void abandon() override;

 private:
  TeamEntry& team_ref(int team);
  const TeamEntry& team_ref(int team) const;
  std::uint64_t* slot(int team, int parity, int pe) const;
  std::uint64_t* staging() const;
  // Publishes `call` and `payload` to the team, passes its barrier and checks that every
  // member made the same call (NOTE [collective descriptor]); returns each member's payload.
  std::vector<std::uint64_t> enter(int team, Call call, std::uint64_t payload = 0);
  void team_barrier(int team, bool complete_puts, lib::Stream s);
  void require_full_mode(const char* call) const;
  int claim_slots(int parent, const Call& split, int count, int* second);
  void add_team(int slot, lib::Team handle);
  std::uint64_t* descriptor(int slot) const;
  void write_descriptor(int slot);   // NOTE [team descriptor]: the header, from the team's members
  void clear_descriptors(int first, int count);
  std::uint64_t read_local(Addr addr, std::size_t size);
  template <class Done, class Describe> void wait(Done&& done, Describe&& describe);
  void release(bool collective);

  int pe_, n_pes_, device_;
  std::size_t heap_size_;
  host::WaitPolicy policy_;
  host::SpinState spin_;  // stays 0: every poll is a device-to-host copy, so no busy spin
  host::Doorbell bell_;   // nobody rings it (the device writes): its sleeps are timed
  host::WaitCheck check_;
  void* heap_ = nullptr;
  std::uint64_t* ctl_ = nullptr;  // symmetric control buffer (NOTE [vendor exchange])
  std::uint64_t* desc_ = nullptr; // symmetric team descriptors, one per slot (NOTE [team descriptor]); null if unused
  std::vector<Addr> peer_base_;   // each PE's heap base in this process's address space; 0 if unreachable
  lib::Stream stream_{};          // private, non-blocking
  std::uint64_t* pinned_ = nullptr;  // page-locked host buffer for records and polled words
  host::Allocator allocator_;
  std::array<std::optional<TeamEntry>, kMaxTeams> teams_;
  bool limited_ = false;
  bool finalized_ = false;
};

}  // namespace unishmem::vendor
