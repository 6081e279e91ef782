// rocSHMEM side of the vendor mapping (NOTE [vendor mapping] in nvshmem_map.hpp): the same names in
// namespace unishmem::gpu::lib, over rocSHMEM's C++ host API (namespace rocshmem).
//
// Written against the rocSHMEM headers of ROCm's rocm-systems repository (projects/rocshmem; the
// build requires rocSHMEM >= 3.3, NOTE [rocSHMEM build] in cmake/gpu.cmake) and compiled, host side,
// against 3.5.0 headers with clang 19 (never by CMake on a ROCm machine, never run on AMD hardware:
// README, "AMD Instinct"). Where a capability constant below is false, csrc/gpu/gpu_backend.cpp builds
// the operation from other calls; the entry kept here for it raises an Error and is never reached.
#pragma once

#include <hip/hip_runtime.h>
#include <rocshmem/rocshmem.hpp>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../backend.hpp"
#include "amo_table.hpp"
#include "stream_wait_value.hpp"

namespace unishmem::gpu::lib {

using namespace ::rocshmem;

constexpr const char* kName = "rocSHMEM";
constexpr const char* kRuntimeName = "HIP";
constexpr int kDLPackDevice = 10;  // DLPack kDLROCM
#ifdef ROCSHMEM_VERSION
constexpr const char* kHeaderVersion = ROCSHMEM_VERSION;
#else
constexpr const char* kHeaderVersion = "unknown";
#endif

using Stream = hipStream_t;
using Team = rocshmem_team_t;
using UniqueId = rocshmem_uniqueid_t;

// NOTE [rocSHMEM by declaration]: rocSHMEM's releases and branches differ in what they declare
// (team_split_2d and the reductions on a stream came with 3.5; the team barrier on a stream and the
// host reduce-scatter are in 3.5-era headers that no CHANGELOG entry names), so this map asks the
// headers it is compiled against: each `declares_*` is true when its call is declared. Each test is
// a requires-expression over template parameters, where a name no lookup finds is a substitution
// failure rather than an error, and each wrapper that makes such a call is a template, so that the
// call is only compiled where the test passed.
template <class T, class S>
constexpr bool declares_team_barrier_on_stream = requires(T t, S s) {
  rocshmem_barrier_on_stream(t, s);
  rocshmem_team_sync_on_stream(t, s);
};
template <class T>
constexpr bool declares_split_2d = requires(T t) { rocshmem_team_split_2d(t, 1, nullptr, 0, &t, nullptr, 0, &t); };
template <class T, class S>
constexpr bool declares_reduce_on_stream = requires(rocshmem_ctx_t c, T t, float* f, S s) {
  rocshmem_ctx_float_sum_reduce_on_stream(c, t, f, f, 1, s);
};
template <class T>
constexpr bool declares_reduce_scatter = requires(rocshmem_ctx_t c, T t, float* f) {
  rocshmem_ctx_float_sum_reduce_scatter(c, t, f, f, 1);
};
// No argument of this call is a rocSHMEM type, so argument-dependent lookup cannot find it: the
// using-directive above, seen where this template is defined, is what finds a declared one.
template <class S>
constexpr bool declares_signal_wait_on_stream = requires(std::uint64_t* p, S s) {
  rocshmem_signal_wait_until_on_stream(p, 0, std::uint64_t{0}, s);
};

constexpr bool kSplit2d = declares_split_2d<Team>;
constexpr bool kTeamBarrierOnStream = declares_team_barrier_on_stream<Team, Stream>;
constexpr bool kFcollectOnStream = false;  // rocSHMEM has no fcollectmem_on_stream: putmem_on_stream + team barrier
constexpr bool kSignalOpOnStream = false;  // rocSHMEM has no signal_op_on_stream: a host uint64 atomic after a stream sync
// false: HIP's hipStreamWaitValue64, which cannot express every comparison (stream_wait_value.hpp)
constexpr bool kSignalWaitOnStream = declares_signal_wait_on_stream<Stream>;
// false: a blocking host rocshmem_ctx_<T>_<op>_reduce after a stream sync
constexpr bool kReduceOnStream = declares_reduce_on_stream<Team, Stream>;
constexpr bool kReduceScatter = declares_reduce_scatter<Team>;
// rocSHMEM's bitcode has no C-linkage team functions: unishmem.language computes them in Triton from a
// descriptor per team in the symmetric heap, and team.handle is its address (NOTE [team descriptor]).
constexpr std::size_t kTeamDescriptorBytes = 32768;

[[noreturn]] inline void missing(const char* call) {
  throw Error(ErrorKind::generic, std::string("rocSHMEM has no ") + call);
}
[[noreturn]] inline void not_declared(const char* call) {
  throw Error(ErrorKind::unavailable, std::string("the rocSHMEM headers this module was built against declare no ") +
                                          call + " (NOTE [rocSHMEM by declaration])");
}

// ---- device runtime --------------------------------------------------------------------------

inline std::string rt_error(int e) {
  return std::string(hipGetErrorName(hipError_t(e))) + ": " + hipGetErrorString(hipError_t(e));
}
inline int rt_set_device(int d) { return hipSetDevice(d); }
inline int rt_init_context() { return hipFree(nullptr); }
inline int rt_stream_create(Stream* s) { return hipStreamCreateWithFlags(s, hipStreamNonBlocking); }
inline int rt_stream_destroy(Stream s) { return hipStreamDestroy(s); }
inline int rt_stream_sync(Stream s) { return hipStreamSynchronize(s); }
inline int rt_device_sync() { return hipDeviceSynchronize(); }
inline int rt_copy_to_host(void* dst, const void* src, std::size_t n, Stream s) {
  return hipMemcpyAsync(dst, src, n, hipMemcpyDeviceToHost, s);
}
inline int rt_copy_to_device(void* dst, const void* src, std::size_t n, Stream s) {
  return hipMemcpyAsync(dst, src, n, hipMemcpyHostToDevice, s);
}
inline int rt_host_alloc(void** p, std::size_t n) { return hipHostMalloc(p, n, hipHostMallocDefault); }
inline int rt_host_free(void* p) { return hipHostFree(p); }

// ---- library: init, queries ------------------------------------------------------------------

// The context the blocking host collectives take; made right after init, destroyed before finalize.
inline rocshmem_ctx_t& host_ctx() {
  static rocshmem_ctx_t ctx{};
  return ctx;
}

inline std::string status_name(int rc) { return rc == ROCSHMEM_ERROR ? "ROCSHMEM_ERROR" : "rc " + std::to_string(rc); }
inline int get_uniqueid(UniqueId* id) { return rocshmem_get_uniqueid(id); }
inline int init_with_uniqueid(int rank, int n_pes, const UniqueId* id, const char** call) {
  rocshmem_init_attr_t attr{};
  UniqueId uid = *id;
  *call = "rocshmem_set_attr_uniqueid_args";
  if (int rc = rocshmem_set_attr_uniqueid_args(rank, n_pes, &uid, &attr)) return rc;
  *call = "rocshmem_init_attr";
  if (int rc = rocshmem_init_attr(ROCSHMEM_INIT_WITH_UNIQUEID, &attr)) return rc;
  *call = "rocshmem_ctx_create";
  return rocshmem_ctx_create(0, &host_ctx());
}
inline void finalize() {
  rocshmem_ctx_destroy(host_ctx());
  rocshmem_finalize();
}
inline bool limited_mode() { return false; }
inline std::string init_mode() {
  const char* b = std::getenv("ROCSHMEM_BACKEND");
  return std::string("ROCSHMEM_BACKEND=") + (b && *b ? b : "(auto)");
}
// rocSHMEM is linked statically: the library is the one whose headers the module was built with.
inline void library_version(int* major, int* minor, int* patch) {
  *major = *minor = *patch = -1;
  std::sscanf(kHeaderVersion, "%d.%d.%d", major, minor, patch);
}
inline int my_pe() { return rocshmem_my_pe(); }
inline int n_pes() { return rocshmem_n_pes(); }
inline void* sym_malloc(std::size_t n) { return rocshmem_malloc(n); }
inline void sym_free(void* p) { rocshmem_free(p); }
inline void* peer_ptr(const void* p, int pe) { return rocshmem_ptr(p, pe); }
// NOTE [rocSHMEM module globals] (pysrc/unishmem/language/rocshmem_module_globals.ll): rocshmem_hipmodule_init
// returns ROCSHMEM_ERROR on the first of these a module lacks. unishmem's extern_libs make every kernel
// that links rocSHMEM define all three; a kernel that calls no rocSHMEM function holds none and has no
// rocSHMEM state to initialise. Anything between is a module built some other way: named, not guessed at.
inline int module_init(std::uintptr_t module, Stream s) {
  const auto mod = reinterpret_cast<hipModule_t>(module);
  std::string missing;
  int held = 0;
  for (const char* name : {"ROCSHMEM_CTX_DEFAULT", "ROCSHMEM_TEAM_WORLD", "ROCSHMEM_TEAM_SHARED"}) {
    void* where = nullptr;
    std::size_t bytes = 0;
    if (hipModuleGetGlobal(&where, &bytes, mod, name) == hipSuccess)
      ++held;
    else
      missing += std::string(missing.empty() ? "" : ", ") + name;
  }
  if (held == 0) return 0;
  if (!missing.empty())
    throw Error(ErrorKind::generic, "this module lacks " + missing + ", which rocshmem_hipmodule_init requires: "
                                    "link rocSHMEM's bitcode through unishmem's extern_libs (NOTE [rocSHMEM "
                                    "module globals]), which keep all three");
  return rocshmem_hipmodule_init(mod, s);
}
constexpr const char* kModuleInitCall = "rocshmem_hipmodule_init";

// ---- teams -----------------------------------------------------------------------------------

inline Team team_world() { return ROCSHMEM_TEAM_WORLD; }
inline Team team_node() { return ROCSHMEM_TEAM_SHARED; }  // 3.3
inline Team team_invalid() { return ROCSHMEM_TEAM_INVALID; }
inline std::int64_t team_value(Team t) { return static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(t)); }
inline int team_my_pe(Team t) { return rocshmem_team_my_pe(t); }
inline int team_n_pes(Team t) { return rocshmem_team_n_pes(t); }
inline int team_translate_pe(Team src, int pe, Team dst) { return rocshmem_team_translate_pe(src, pe, dst); }
inline int team_split_strided(Team parent, int start, int stride, int size, Team* out) {
  return rocshmem_team_split_strided(parent, start, stride, size, nullptr, 0, out);
}
template <class T = Team>
int team_split_2d(T parent, int xrange, T* x, T* y) {
  if constexpr (declares_split_2d<T>) return rocshmem_team_split_2d(parent, xrange, nullptr, 0, x, nullptr, 0, y);
  else not_declared("rocshmem_team_split_2d");
}
inline void team_destroy(Team t) { rocshmem_team_destroy(t); }

// ---- RMA, signals, ordering ------------------------------------------------------------------

inline int signal_op_value(SignalOp op) { return op == SignalOp::add ? ROCSHMEM_SIGNAL_ADD : ROCSHMEM_SIGNAL_SET; }
inline void putmem_on_stream(void* d, const void* s, std::size_t n, int pe, Stream st) {
  rocshmem_putmem_on_stream(d, s, n, pe, st);
}
inline void getmem_on_stream(void* d, const void* s, std::size_t n, int pe, Stream st) {
  rocshmem_getmem_on_stream(d, s, n, pe, st);
}
inline void putmem_signal_on_stream(void* d, const void* s, std::size_t n, std::uint64_t* sig, std::uint64_t v,
                                    SignalOp op, int pe, Stream st) {
  rocshmem_putmem_signal_on_stream(d, s, n, sig, v, signal_op_value(op), pe, st);
}
inline void signal_op_on_stream(std::uint64_t*, std::uint64_t, SignalOp, int, Stream) {
  missing("rocshmem_signal_op_on_stream");
}
// Our Cmp in rocSHMEM's numbering, by the header's own names.
inline int cmp_value(Cmp c) {
  switch (c) {
    case Cmp::eq: return ROCSHMEM_CMP_EQ;
    case Cmp::ne: return ROCSHMEM_CMP_NE;
    case Cmp::gt: return ROCSHMEM_CMP_GT;
    case Cmp::ge: return ROCSHMEM_CMP_GE;
    case Cmp::lt: return ROCSHMEM_CMP_LT;
    case Cmp::le: return ROCSHMEM_CMP_LE;
  }
  throw Error(ErrorKind::value, "comparison code " + std::to_string(int(c)) + " is not a unishmem.CMP");
}
inline unsigned hip_wait_flags(WaitValueTest t) {
  switch (t) {
    case WaitValueTest::geq: return hipStreamWaitValueGte;
    case WaitValueTest::eq: return hipStreamWaitValueEq;
    case WaitValueTest::and_: return hipStreamWaitValueAnd;
  }
  return hipStreamWaitValueGte;
}
constexpr const char* kSignalWaitOnStreamCall =
    kSignalWaitOnStream ? "rocshmem_signal_wait_until_on_stream" : "hipStreamWaitValue64";
// Returns HIP's status. rocSHMEM's own call (a one-thread kernel on the stream running its device
// wait_until) takes every comparison; without it a comparison hipStreamWaitValue64 cannot express
// exactly is refused before anything is enqueued.
template <class S = Stream>
int signal_wait_until_on_stream(std::uint64_t* sig, Cmp cmp, std::uint64_t v, S st) {
  if constexpr (declares_signal_wait_on_stream<S>) {
    rocshmem_signal_wait_until_on_stream(sig, cmp_value(cmp), v, st);
    return 0;
  } else {
    const std::optional<WaitValue> w = wait_value_for(cmp, v);
    if (!w)
      throw Error(ErrorKind::value,
                  wait_value_refusal("the rocshmem backend (the rocSHMEM headers it was built against declare no "
                                     "rocshmem_signal_wait_until_on_stream, so it uses HIP's hipStreamWaitValue64)",
                                     cmp, v));
    return hipStreamWaitValue64(st, sig, w->value, hip_wait_flags(w->test), w->mask);
  }
}
inline void quiet_on_stream(Stream st) { rocshmem_quiet_on_stream(st); }
inline void fence() { rocshmem_fence(); }

// ---- synchronisation and collectives (rc 0 = success) ----------------------------------------

inline void barrier_all_on_stream(Stream st) { rocshmem_barrier_all_on_stream(st); }
inline void sync_all_on_stream(Stream st) { rocshmem_sync_all_on_stream(st); }
template <class T = Team>
int barrier_on_stream(T t, Stream st) {
  if constexpr (declares_team_barrier_on_stream<T, Stream>) rocshmem_barrier_on_stream(t, st);
  else not_declared("rocshmem_barrier_on_stream");
  return 0;
}
template <class T = Team>
int team_sync_on_stream(T t, Stream st) {
  if constexpr (declares_team_barrier_on_stream<T, Stream>) rocshmem_team_sync_on_stream(t, st);
  else not_declared("rocshmem_team_sync_on_stream");
  return 0;
}
inline int broadcastmem_on_stream(Team t, void* d, const void* s, std::size_t n, int root, Stream st) {
  rocshmem_broadcastmem_on_stream(t, d, s, n, root, st);
  return 0;
}
inline int fcollectmem_on_stream(Team, void*, const void*, std::size_t, Stream) {
  missing("rocshmem_fcollectmem_on_stream");
}
inline int alltoallmem_on_stream(Team t, void* d, const void* s, std::size_t n, Stream st) {
  rocshmem_alltoallmem_on_stream(t, d, s, n, st);
  return 0;
}

// NOTE [vendor dtype tables]: DType -> rocSHMEM type name and C type; its reductions (host, on a
// stream, reduce-scatter) cover these five element types.
#define UNISHMEM_ROCSHMEM_REDUCE_TYPES(X) \
  X(f32, float, float) X(f64, double, double) X(i16, short, short) X(i32, int, int) X(i64, long, long)

// One case of rocSHMEM's rocshmem_ctx_<name>_<op>_<form>(ctx, team, dest, source, nreduce[, stream]).
#define UNISHMEM_ROCSHMEM_REDUCE_OP(name, C, form, o, ...)                                                       \
  case ReduceOp::o:                                                                                            \
    return rocshmem_ctx_##name##_##o##_##form(host_ctx(), t, static_cast<C*>(d), static_cast<const C*>(s), \
                                              m __VA_OPT__(, ) __VA_ARGS__);
#define UNISHMEM_ROCSHMEM_REDUCE_CASE(dt, name, C, form, ...)         \
  case DType::dt:                                                    \
    switch (op) {                                                    \
      UNISHMEM_ROCSHMEM_REDUCE_OP(name, C, form, sum, __VA_ARGS__)   \
      UNISHMEM_ROCSHMEM_REDUCE_OP(name, C, form, min, __VA_ARGS__)   \
      UNISHMEM_ROCSHMEM_REDUCE_OP(name, C, form, max, __VA_ARGS__)   \
      UNISHMEM_ROCSHMEM_REDUCE_OP(name, C, form, prod, __VA_ARGS__)  \
    }                                                                \
    break;
#define UNISHMEM_ROCSHMEM_REDUCE_HOST(dt, name, C) UNISHMEM_ROCSHMEM_REDUCE_CASE(dt, name, C, reduce)
#define UNISHMEM_ROCSHMEM_REDUCE_ON_STREAM(dt, name, C) UNISHMEM_ROCSHMEM_REDUCE_CASE(dt, name, C, reduce_on_stream, st)
#define UNISHMEM_ROCSHMEM_REDUCE_SCATTER(dt, name, C) UNISHMEM_ROCSHMEM_REDUCE_CASE(dt, name, C, reduce_scatter)
#define UNISHMEM_ROCSHMEM_HAS(dt, name, C) case DType::dt:

// What the backend would call, if rocSHMEM lacks it (checked on every PE before the collective).
inline const char* missing_reduction(DType type, bool scatter) {
  if (scatter && !kReduceScatter)
    return "host reduce-scatter (rocshmem_ctx_<T>_<op>_reduce_scatter is not declared by the headers this module "
           "was built against)";
  switch (type) {
    UNISHMEM_ROCSHMEM_REDUCE_TYPES(UNISHMEM_ROCSHMEM_HAS) return nullptr;
    default: break;
  }
  return "reduction for this element type (rocshmem_ctx_<type>_<op>_reduce covers float, double, short, int and "
         "long)";
}

// rocSHMEM counts a reduction's elements in an int.
inline int reduce_count(std::size_t n) {
  if (n > std::size_t(INT_MAX)) throw Error(ErrorKind::value, "rocSHMEM reduces at most INT_MAX elements per call");
  return int(n);
}

// A reduction over team `t` ordered on stream `st`; `n` counts elements. On a stream where the
// headers declare it, else a blocking host reduction after the stream's earlier work.
template <class T = Team>
int reduce(DType type, ReduceOp op, T t, void* d, const void* s, std::size_t n, Stream st) {
  const int m = reduce_count(n);
  if constexpr (declares_reduce_on_stream<T, Stream>) {
    switch (type) { UNISHMEM_ROCSHMEM_REDUCE_TYPES(UNISHMEM_ROCSHMEM_REDUCE_ON_STREAM) default: break; }
  } else {
    if (int rc = hipStreamSynchronize(st)) return rc;
    switch (type) { UNISHMEM_ROCSHMEM_REDUCE_TYPES(UNISHMEM_ROCSHMEM_REDUCE_HOST) default: break; }
  }
  missing(missing_reduction(type, false));
}

// A blocking host reduce-scatter after the stream's earlier work: `s` holds n elements per member,
// member i receives the reduction of block i; `n` counts elements per member.
template <class T = Team>
int reducescatter(DType type, ReduceOp op, T t, void* d, const void* s, std::size_t n, Stream st) {
  if constexpr (declares_reduce_scatter<T>) {
    const int m = reduce_count(n);
    if (int rc = hipStreamSynchronize(st)) return rc;
    switch (type) { UNISHMEM_ROCSHMEM_REDUCE_TYPES(UNISHMEM_ROCSHMEM_REDUCE_SCATTER) default: break; }
  }
  missing(missing_reduction(type, true));
}

// ---- atomics (host-initiated, blocking) ------------------------------------------------------

// NOTE [rocSHMEM host atomics]: rocSHMEM's IPC host context implements amo_add, amo_fetch_add, amo_cas
// and amo_fetch_cas only (src/ipc/context_ipc_host.hpp, rocm-systems 64b9a29d; context_ipc_tmpl_host.hpp,
// 8328b7b8); its host fetch, inc and fetch_inc are fetch_add/add of 0 or 1 (src/rocshmem.cpp). Host set,
// swap and and/or/xor reach Context::amo_<op> (src/context_tmpl_host.hpp, 97902704), whose dispatch to
// IPCHostContext finds no override there. So those are compare-swap loops here, and signal_op's SET with
// them. Under unique-id init (the only init unishmem uses) the IPC backend has host AMOs from rocSHMEM
// 3.5.0 (CHANGELOG 3.5.0: "host-initiated RMA operations in the IPC backend for the non-MPI bootstrapping
// path: put, get, fence, quiet, arithmetic AMOs, and P2P sync ops"): older headers get a clear error.
inline void require_host_amo() {
  int major = 0, minor = 0, patch = 0;
  library_version(&major, &minor, &patch);
  if (major > 3 || (major == 3 && minor >= 5)) return;
  throw Error(ErrorKind::unavailable, std::string("rocSHMEM ") + kHeaderVersion + " has no host-initiated atomics "
              "under unique-id init (its IPC backend gained them in 3.5.0): host atomics and signal_op need "
              "rocSHMEM >= 3.5");
}

#define UNISHMEM_ROCSHMEM_AMO(PREFIX, T, name)                                                            \
  inline std::uint64_t atomic_##name(AtomicOp op, void* dest, std::uint64_t v, std::uint64_t c, int pe) { \
    require_host_amo();                                                                                    \
    auto* p = static_cast<T*>(dest);                                                                       \
    const T x = amo_value<T>(v), y = amo_value<T>(c);                                                      \
    switch (op) {                                                                                          \
      case AtomicOp::fetch: return amo_bits(PREFIX##_##name##_atomic_fetch(p, pe));                        \
      case AtomicOp::compare_swap: return amo_bits(PREFIX##_##name##_atomic_compare_swap(p, y, x, pe));    \
      case AtomicOp::fetch_add: return amo_bits(PREFIX##_##name##_atomic_fetch_add(p, x, pe));             \
      case AtomicOp::add: PREFIX##_##name##_atomic_add(p, x, pe); return 0;                                \
      case AtomicOp::fetch_inc: return amo_bits(PREFIX##_##name##_atomic_fetch_inc(p, pe));                \
      case AtomicOp::inc: PREFIX##_##name##_atomic_inc(p, pe); return 0;                                   \
      default: break;                                                                                      \
    }                                                                                                      \
    const T old = amo_by_compare_swap(op, x, PREFIX##_##name##_atomic_fetch(p, pe), [&](T cond, T value) { \
      return PREFIX##_##name##_atomic_compare_swap(p, cond, value, pe);                                    \
    });                                                                                                    \
    return amo_bits(old);                                                                                  \
  }

UNISHMEM_VENDOR_ATOMICS(rocshmem, "rocSHMEM", UNISHMEM_ROCSHMEM_AMO)

}  // namespace unishmem::gpu::lib
