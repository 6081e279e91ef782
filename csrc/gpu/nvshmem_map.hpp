// NVSHMEM side of the vendor mapping: names, types, enum values and
// capabilities that csrc/gpu/gpu_backend.cpp is compiled against.
// NOTE [vendor mapping]: this header and rocshmem_map.hpp offer the same names
// in namespace unishmem::gpu::lib; the backend source has no vendor branches.
// Host API only (nvshmem_host.h): the module is initialised through the host
// library path (nvshmemx_hostlib_init_attr) and needs no device link.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <nvshmem_host.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "../backend.hpp"
#include "amo_table.hpp"

namespace unishmem::gpu::lib {

constexpr const char* kName = "NVSHMEM";
constexpr const char* kRuntimeName = "CUDA";
constexpr int kDLPackDevice = 2;  // DLPack kDLCUDA
// From the numeric macros, which every release has (3.4.5 lacks NVSHMEM_VENDOR_BASE_VERSION_STRING).
#define UNISHMEM_STR2(x) #x
#define UNISHMEM_STR(x) UNISHMEM_STR2(x)
constexpr const char* kHeaderVersion = UNISHMEM_STR(NVSHMEM_VENDOR_MAJOR_VERSION) "." UNISHMEM_STR(
    NVSHMEM_VENDOR_MINOR_VERSION) "." UNISHMEM_STR(NVSHMEM_VENDOR_PATCH_VERSION);
#undef UNISHMEM_STR
#undef UNISHMEM_STR2

using Stream = cudaStream_t;
using Team = nvshmem_team_t;
using UniqueId = nvshmemx_uniqueid_t;

// What the library offers natively; the backend builds the rest on top of it.
constexpr bool kSplit2d = true;
constexpr bool kTeamBarrierOnStream = true;
constexpr bool kFcollectOnStream = true;
constexpr bool kSignalOpOnStream = true;
constexpr bool kSignalWaitOnStream = true;  // false: a stream primitive that not every comparison fits
constexpr bool kReduceOnStream = true;  // false: blocking host reduction after a stream sync
constexpr bool kReduceScatter = true;
// Kernels take nvshmem_team_t and NVSHMEM's own team functions: no team descriptor (NOTE [team descriptor]).
constexpr std::size_t kTeamDescriptorBytes = 0;

// ---- device runtime --------------------------------------------------------------------------
// rocshmem_map.hpp defines the same names over HIP's runtime: the one mapping per vendor (NOTE [vendor
// mapping]) is what lets gpu_backend.cpp be written once.

inline std::string rt_error(int e) {
  return std::string(cudaGetErrorName(cudaError_t(e))) + ": " + cudaGetErrorString(cudaError_t(e));
}
inline int rt_set_device(int d) { return cudaSetDevice(d); }
inline int rt_init_context() { return cudaFree(nullptr); }
inline int rt_stream_create(Stream* s) { return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); }
inline int rt_stream_destroy(Stream s) { return cudaStreamDestroy(s); }
inline int rt_stream_sync(Stream s) { return cudaStreamSynchronize(s); }
inline int rt_device_sync() { return cudaDeviceSynchronize(); }
inline int rt_copy_to_host(void* dst, const void* src, std::size_t n, Stream s) {
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s);
}
inline int rt_copy_to_device(void* dst, const void* src, std::size_t n, Stream s) {
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s);
}
inline int rt_host_alloc(void** p, std::size_t n) { return cudaMallocHost(p, n); }
inline int rt_host_free(void* p) { return cudaFreeHost(p); }

// ---- library: init, queries ------------------------------------------------------------------

inline std::string status_name(int rc) {
  switch (rc) {
    case NVSHMEMX_SUCCESS: return "NVSHMEMX_SUCCESS";
    case NVSHMEMX_ERROR_INVALID_VALUE: return "NVSHMEMX_ERROR_INVALID_VALUE";
    case NVSHMEMX_ERROR_OUT_OF_MEMORY: return "NVSHMEMX_ERROR_OUT_OF_MEMORY";
    case NVSHMEMX_ERROR_NOT_SUPPORTED: return "NVSHMEMX_ERROR_NOT_SUPPORTED";
    case NVSHMEMX_ERROR_SYMMETRY: return "NVSHMEMX_ERROR_SYMMETRY";
    case NVSHMEMX_ERROR_GPU_NOT_SELECTED: return "NVSHMEMX_ERROR_GPU_NOT_SELECTED";
    case NVSHMEMX_ERROR_COLLECTIVE_LAUNCH_FAILED: return "NVSHMEMX_ERROR_COLLECTIVE_LAUNCH_FAILED";
    case NVSHMEMX_ERROR_INTERNAL: return "NVSHMEMX_ERROR_INTERNAL";
    default: return "unknown status";
  }
}
inline int get_uniqueid(UniqueId* id) {
  *id = NVSHMEMX_UNIQUEID_INITIALIZER;
  return nvshmemx_get_uniqueid(id);
}
// Returns the failing call's name through `call`.
inline int init_with_uniqueid(int rank, int n_pes, const UniqueId* id, const char** call) {
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  *call = "nvshmemx_set_attr_uniqueid_args";
  if (int rc = nvshmemx_set_attr_uniqueid_args(rank, n_pes, id, &attr)) return rc;
  *call = "nvshmemx_hostlib_init_attr";
  return nvshmemx_hostlib_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr);
}
inline void finalize() { nvshmemx_hostlib_finalize(); }
// Several PEs on one GPU without MPS: only the calls VENDOR_NOTES lists work.
inline bool limited_mode() { return nvshmemx_init_status() == NVSHMEM_STATUS_LIMITED_MPG; }
inline std::string init_mode() {
  switch (nvshmemx_init_status()) {
    case NVSHMEM_STATUS_LIMITED_MPG: return "limited multi-PE-per-GPU";
    case NVSHMEM_STATUS_FULL_MPG: return "full multi-PE-per-GPU (MPS)";
    case NVSHMEM_STATUS_IS_INITIALIZED: return "one PE per GPU";
    default: return "not initialised";
  }
}
inline void library_version(int* major, int* minor, int* patch) { nvshmemx_vendor_get_version_info(major, minor, patch); }
inline int my_pe() { return nvshmem_my_pe(); }
inline int n_pes() { return nvshmem_n_pes(); }
inline void* sym_malloc(std::size_t n) { return nvshmem_malloc(n); }
inline void sym_free(void* p) { nvshmem_free(p); }
inline void* peer_ptr(const void* p, int pe) { return nvshmem_ptr(p, pe); }
// NOTE [module globals]: nvshmemx_cumodule_init fails (7) on a module without nvshmemi_device_state_d, and
// a kernel that calls no NVSHMEM function links none of the bitcode, so holds none (seen on an H200: a
// @unishmem.jit GEMM that only computes). Such a module has no NVSHMEM state to initialise. The driver's
// cuModuleGetGlobal comes through the runtime's entry-point query: the module links no libcuda.
inline int module_init(std::uintptr_t module, Stream) {
  using GetGlobal = CUresult (*)(CUdeviceptr*, std::size_t*, CUmodule, const char*);
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t rc = cudaGetDriverEntryPointByVersion("cuModuleGetGlobal", &entry, 12000, cudaEnableDefault, &found);
  if (rc != cudaSuccess || found != cudaDriverEntryPointSuccess || entry == nullptr)
    throw Error(ErrorKind::generic, std::string("the CUDA driver offers no cuModuleGetGlobal (") +
                                        cudaGetErrorString(rc) + ", query result " + std::to_string(int(found)) + ")");
  const auto mod = reinterpret_cast<CUmodule>(module);
  CUdeviceptr where = 0;
  std::size_t bytes = 0;
  if (reinterpret_cast<GetGlobal>(entry)(&where, &bytes, mod, "nvshmemi_device_state_d") == CUDA_ERROR_NOT_FOUND)
    return 0;
  return nvshmemx_cumodule_init(mod);
}
constexpr const char* kModuleInitCall = "nvshmemx_cumodule_init";

// ---- teams -----------------------------------------------------------------------------------

inline Team team_world() { return NVSHMEM_TEAM_WORLD; }
inline Team team_node() { return NVSHMEMX_TEAM_NODE; }
inline Team team_invalid() { return NVSHMEM_TEAM_INVALID; }
inline std::int64_t team_value(Team t) { return t; }  // what Triton kernels receive
inline int team_my_pe(Team t) { return nvshmem_team_my_pe(t); }
inline int team_n_pes(Team t) { return nvshmem_team_n_pes(t); }
inline int team_translate_pe(Team src, int pe, Team dst) { return nvshmem_team_translate_pe(src, pe, dst); }
inline int team_split_strided(Team parent, int start, int stride, int size, Team* out) {
  return nvshmem_team_split_strided(parent, start, stride, size, nullptr, 0, out);
}
inline int team_split_2d(Team parent, int xrange, Team* x, Team* y) {
  return nvshmem_team_split_2d(parent, xrange, nullptr, 0, x, nullptr, 0, y);
}
inline void team_destroy(Team t) { nvshmem_team_destroy(t); }

// ---- RMA, signals, ordering ------------------------------------------------------------------

inline int signal_op_value(SignalOp op) { return op == SignalOp::add ? NVSHMEM_SIGNAL_ADD : NVSHMEM_SIGNAL_SET; }
inline void putmem_on_stream(void* d, const void* s, std::size_t n, int pe, Stream st) {
  nvshmemx_putmem_on_stream(d, s, n, pe, st);
}
inline void getmem_on_stream(void* d, const void* s, std::size_t n, int pe, Stream st) {
  nvshmemx_getmem_on_stream(d, s, n, pe, st);
}
inline void putmem_signal_on_stream(void* d, const void* s, std::size_t n, std::uint64_t* sig, std::uint64_t v,
                                    SignalOp op, int pe, Stream st) {
  nvshmemx_putmem_signal_on_stream(d, s, n, sig, v, signal_op_value(op), pe, st);
}
inline void signal_op_on_stream(std::uint64_t* sig, std::uint64_t v, SignalOp op, int pe, Stream st) {
  nvshmemx_signal_op_on_stream(sig, v, signal_op_value(op), pe, st);
}
// Our Cmp in NVSHMEM's numbering, by the header's own names: its order differs from ours (GE is last).
inline int cmp_value(Cmp c) {
  switch (c) {
    case Cmp::eq: return NVSHMEM_CMP_EQ;
    case Cmp::ne: return NVSHMEM_CMP_NE;
    case Cmp::gt: return NVSHMEM_CMP_GT;
    case Cmp::ge: return NVSHMEM_CMP_GE;
    case Cmp::lt: return NVSHMEM_CMP_LT;
    case Cmp::le: return NVSHMEM_CMP_LE;
  }
  throw Error(ErrorKind::value, "comparison code " + std::to_string(int(c)) + " is not a unishmem.CMP");
}
// Every comparison; it returns nothing (limited mode, where it ends the process, is refused before it).
constexpr const char* kSignalWaitOnStreamCall = "nvshmemx_signal_wait_until_on_stream";
inline int signal_wait_until_on_stream(std::uint64_t* sig, Cmp cmp, std::uint64_t v, Stream st) {
  nvshmemx_signal_wait_until_on_stream(sig, cmp_value(cmp), v, st);
  return 0;
}
inline void quiet_on_stream(Stream st) { nvshmemx_quiet_on_stream(st); }
inline void fence() { nvshmem_fence(); }

// ---- synchronisation and collectives (rc 0 = success) ----------------------------------------

inline void barrier_all_on_stream(Stream st) { nvshmemx_barrier_all_on_stream(st); }
inline void sync_all_on_stream(Stream st) { nvshmemx_sync_all_on_stream(st); }
inline int barrier_on_stream(Team t, Stream st) { return nvshmemx_barrier_on_stream(t, st); }
inline int team_sync_on_stream(Team t, Stream st) { return nvshmemx_team_sync_on_stream(t, st); }
inline int broadcastmem_on_stream(Team t, void* d, const void* s, std::size_t n, int root, Stream st) {
  return nvshmemx_broadcastmem_on_stream(t, d, s, n, root, st);
}
inline int fcollectmem_on_stream(Team t, void* d, const void* s, std::size_t n, Stream st) {
  return nvshmemx_fcollectmem_on_stream(t, d, s, n, st);
}
inline int alltoallmem_on_stream(Team t, void* d, const void* s, std::size_t n, Stream st) {
  return nvshmemx_alltoallmem_on_stream(t, d, s, n, st);
}

// Typed calls: the element type comes from the vendor function's own signature.
template <class T>
int call_reduce(int (*fn)(nvshmem_team_t, T*, const T*, std::size_t, cudaStream_t), Team t, void* d, const void* s,
                std::size_t n, Stream st) {
  return fn(t, static_cast<T*>(d), static_cast<const T*>(s), n, st);
}

// NOTE [vendor dtype tables]: DType -> vendor type name, one line per dtype.
#define UNISHMEM_NVSHMEM_REDUCE_TYPES(X) \
  X(f16, half) X(bf16, bfloat16) X(f32, float) X(f64, double) X(i8, int8) X(i16, int16) X(i32, int32) \
  X(i64, int64) X(u8, uint8) X(u16, uint16) X(u32, uint32) X(u64, uint64)

#define UNISHMEM_NVSHMEM_REDUCE_CASE(KIND, dt, name)                                                           \
  case DType::dt:                                                                                             \
    switch (op) {                                                                                             \
      case ReduceOp::sum: return call_reduce(&nvshmemx_##name##_sum_##KIND##_on_stream, t, d, s, n, st);     \
      case ReduceOp::min: return call_reduce(&nvshmemx_##name##_min_##KIND##_on_stream, t, d, s, n, st);     \
      case ReduceOp::max: return call_reduce(&nvshmemx_##name##_max_##KIND##_on_stream, t, d, s, n, st);     \
      case ReduceOp::prod: return call_reduce(&nvshmemx_##name##_prod_##KIND##_on_stream, t, d, s, n, st);   \
    }                                                                                                         \
    break;
#define UNISHMEM_NVSHMEM_REDUCE(dt, name) UNISHMEM_NVSHMEM_REDUCE_CASE(reduce, dt, name)
#define UNISHMEM_NVSHMEM_REDUCESCATTER(dt, name) UNISHMEM_NVSHMEM_REDUCE_CASE(reducescatter, dt, name)

inline const char* reduce_op_name(ReduceOp op) {
  static const char* names[] = {"sum", "min", "max", "prod"};
  return names[int(op)];
}

// Reductions over a team; `n` counts elements (of the result per PE for reducescatter).
inline int reduce(DType type, ReduceOp op, Team t, void* d, const void* s, std::size_t n, Stream st) {
  switch (type) { UNISHMEM_NVSHMEM_REDUCE_TYPES(UNISHMEM_NVSHMEM_REDUCE) }
  throw Error(ErrorKind::value, std::string("NVSHMEM has no ") + reduce_op_name(op) + " reduction for " +
                                    dtype_name(type));
}
inline int reducescatter(DType type, ReduceOp op, Team t, void* d, const void* s, std::size_t n, Stream st) {
  switch (type) { UNISHMEM_NVSHMEM_REDUCE_TYPES(UNISHMEM_NVSHMEM_REDUCESCATTER) }
  throw Error(ErrorKind::value, std::string("NVSHMEM has no ") + reduce_op_name(op) + " reducescatter for " +
                                    dtype_name(type));
}
// Checked before a collective starts, so that every PE refuses it alike.
inline const char* missing_reduction(DType, bool /*scatter*/) { return nullptr; }

// ---- atomics (host-initiated, blocking) ------------------------------------------------------

UNISHMEM_VENDOR_ATOMICS(nvshmem, "NVSHMEM", UNISHMEM_VENDOR_AMO)

}  // namespace unishmem::gpu::lib
