// The one interface every backend implements; bindings see nothing else.
// Addresses cross this boundary as integers (local virtual addresses); Python
// checks every argument before it gets here, so backends trust their input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace unishmem {

using Addr = std::uintptr_t;
using Stream = std::uintptr_t;  // cudaStream_t / hipStream_t as an integer; ignored by host

// NOTE [enum values]: these numberings are this package's own and match the
// IntEnums in pysrc/unishmem/enums.py; each backend maps them to its vendor's.
enum class DType : int { f16, bf16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64 };
enum class SignalOp : int { set = 0, add = 1 };
enum class Cmp : int { eq = 0, ne, gt, ge, lt, le };
enum class ReduceOp : int { sum = 0, min, max, prod };
enum class AtomicOp : int {
  fetch = 0, set, swap, compare_swap, fetch_add, add, fetch_inc, inc,
  fetch_and, and_, fetch_or, or_, fetch_xor, xor_
};

std::size_t dtype_size(DType t);
const char* dtype_name(DType t);

// Error kinds map one-to-one onto the Python exception classes (bindings.cpp).
enum class ErrorKind { generic, symmetry, not_symmetric, peer_failure, out_of_memory, timeout, deadlock, value, unavailable };

// `code`: the status a library call returned (NOTE [status check], common/status.hpp); 0 if none.
struct Error : std::runtime_error {
  ErrorKind kind;
  int code;
  Error(ErrorKind k, const std::string& what, int status = 0) : std::runtime_error(what), kind(k), code(status) {}
};

constexpr int kTeamWorld = 0;
constexpr int kTeamNode = 1;
constexpr int kTeamInvalid = -1;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual int my_pe() const = 0;
  virtual int n_pes() const = 0;
  virtual Addr heap_base() const = 0;
  virtual std::size_t heap_size() const = 0;

  // Collective calls (allocation, free, splits, destroy, barriers, collectives) compare what
  // every member called before acting (NOTE [collective descriptor], common/collective.hpp).
  // Collective allocation; size and dtype are compared across PEs before anything is handed out.
  virtual Addr malloc(std::size_t bytes, DType dtype) = 0;
  virtual void free(Addr local) = 0;
  virtual std::size_t heap_free_bytes() const = 0;
  virtual Addr peer_ptr(Addr local, int pe) const = 0;  // 0 where not load/store reachable

  virtual int team_my_pe(int team) const = 0;
  virtual int team_n_pes(int team) const = 0;
  virtual int team_translate_pe(int src_team, int pe, int dst_team) const = 0;
  virtual int team_split_strided(int parent, int start, int stride, int size) = 0;
  virtual std::pair<int, int> team_split_2d(int parent, int xrange) = 0;
  virtual void team_destroy(int team) = 0;  // collective over the team
  // The team as Triton kernels name it (the vendor's handle); the host backend's is its slot.
  virtual std::int64_t team_device_handle(int team) const { return team; }

  virtual void put(Addr dest, Addr source, std::size_t bytes, int pe, Stream s) = 0;
  virtual void get(Addr dest, Addr source, std::size_t bytes, int pe, Stream s) = 0;
  virtual void put_signal(Addr dest, Addr source, std::size_t bytes, Addr sig, std::uint64_t value,
                          SignalOp op, int pe, Stream s) = 0;
  virtual void signal_op(Addr sig, std::uint64_t value, SignalOp op, int pe, Stream s) = 0;
  virtual std::uint64_t signal_wait_until(Addr sig, Cmp cmp, std::uint64_t value, Stream s) = 0;
  // The same condition, waited for by stream s: a GPU backend enqueues the wait and returns at once
  // (so a CUDA graph can capture it). The host backend has no streams (the calling thread's order is
  // its stream order), so there the call itself waits.
  virtual void signal_wait_until_on_stream(Addr sig, Cmp cmp, std::uint64_t value, Stream s) = 0;
  virtual std::uint64_t signal_fetch(Addr sig) = 0;
  // The signal's value if it already satisfies the condition, found without waiting; nullopt if
  // not, or where looking costs as much as waiting (a device copy). Lets a binding skip the GIL
  // release of a wait that has nothing to wait for.
  virtual std::optional<std::uint64_t> signal_ready(Addr, Cmp, std::uint64_t) { return std::nullopt; }
  // Typed point-to-point waits; `value` carries the bit pattern of a `type` value.
  virtual void wait_until(Addr ptr, DType type, Cmp cmp, std::uint64_t value) = 0;
  virtual bool test(Addr ptr, DType type, Cmp cmp, std::uint64_t value) = 0;
  // Waits until any of the words ptr, ptr + stride, ... (one per value) compares true against
  // its value; returns that word's index.
  virtual std::size_t wait_until_any(Addr ptr, std::size_t stride, DType type, Cmp cmp,
                                     const std::vector<std::uint64_t>& values) = 0;
  virtual void quiet(Stream s) = 0;
  virtual void fence() = 0;
  // Returns the fetched bit pattern (0 for non-fetching ops).
  virtual std::uint64_t atomic(AtomicOp op, DType type, Addr dest, std::uint64_t value,
                               std::uint64_t cond, int pe) = 0;

  virtual void barrier(int team, Stream s) = 0;
  virtual void sync(int team, Stream s) = 0;
  // Collectives: `type` is the buffers' dtype, compared across members like the sizes.
  virtual void broadcast(int team, Addr dest, Addr source, std::size_t bytes, DType type, int root, Stream s) = 0;
  virtual void fcollect(int team, Addr dest, Addr source, std::size_t bytes_per_pe, DType type, Stream s) = 0;
  virtual void alltoall(int team, Addr dest, Addr source, std::size_t bytes_per_pe, DType type, Stream s) = 0;
  virtual void reduce(int team, Addr dest, Addr source, std::size_t nelems, DType type, ReduceOp op,
                      Stream s) = 0;
  virtual void reducescatter(int team, Addr dest, Addr source, std::size_t nelems_out, DType type,
                             ReduceOp op, Stream s) = 0;

  // Enter a collective with arguments this PE rejected, so that every member
  // raises instead of waiting for it; the caller then raises its own error.
  virtual void reject_collective(int team) = 0;

  virtual void finalize() = 0;
  // Leave after an error without synchronising; peers waiting on this PE raise PeerFailure.
  virtual void abandon() = 0;
};

}  // namespace unishmem
