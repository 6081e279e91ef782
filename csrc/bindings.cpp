// pybind11 modules: the Backend interface, plus one factory per backend.
// Compiled once per backend module with UNISHMEM_MODULE_NAME set by CMake.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdio>
#include <optional>

#include "backend.hpp"
#include "common/wait.hpp"
#include "fast_calls.hpp"
#ifdef UNISHMEM_HOST
#include "host/bench.hpp"
#include "host/host_backend.hpp"
#endif
#if defined(UNISHMEM_NVSHMEM) || defined(UNISHMEM_ROCSHMEM)
#define UNISHMEM_GPU
#include "gpu/dlpack_view.hpp"
#include "gpu/gpu_backend.hpp"
#endif

namespace py = pybind11;
using namespace unishmem;

namespace {

const char* error_class(ErrorKind k) {
  switch (k) {
    case ErrorKind::symmetry: return "SymmetryError";
    case ErrorKind::not_symmetric: return "NotSymmetricError";
    case ErrorKind::peer_failure: return "PeerFailure";
    case ErrorKind::out_of_memory: return "HeapExhaustedError";
    case ErrorKind::timeout: return "WaitTimeout";
    case ErrorKind::deadlock: return "DeadlockError";
    case ErrorKind::value: return "ValueError";
    case ErrorKind::unavailable: return "BackendUnavailable";
    case ErrorKind::generic: break;
  }
  return "UnishmemError";
}

#ifdef UNISHMEM_HOST
py::list pe_views(const std::vector<host::PeView>& pes);
#endif

}  // namespace

void unishmem::set_error(const Error& e) {
#ifdef UNISHMEM_HOST
  if (const auto* deadlock = dynamic_cast<const host::DeadlockFailure*>(&e)) {
    // One report format for every hang (host API, interpreter, GPU watchdog): hang.py writes it.
    try {
      py::object error = py::module_::import("unishmem.hang").attr("deadlock_error")(pe_views(deadlock->pes),
                                                                                    deadlock->seconds);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
    } catch (py::error_already_set& formatting) {
      formatting.restore();  // a broken formatter shows itself
    }
    return;
  }
#endif
  py::object cls = e.kind == ErrorKind::value
                       ? py::reinterpret_borrow<py::object>(PyExc_ValueError)
                       : py::module_::import("unishmem.errors").attr(error_class(e.kind));
  if (e.code == 0) {
    PyErr_SetString(cls.ptr(), e.what());
    return;
  }
  // The library's status travels on the exception as `.code` (NOTE [status check]).
  py::object error = cls(e.what());
  error.attr("code") = e.code;
  PyErr_SetObject(cls.ptr(), error.ptr());
}

namespace {

#ifdef UNISHMEM_HOST
// Every PE's waits as plain Python values, for the report formatter (pysrc/unishmem/hang.py).
py::list pe_views(const std::vector<host::PeView>& pes) {
  py::list out;
  for (const host::PeView& v : pes) {
    py::list waits, signals;
    for (const host::WaitView& w : v.waits) {
      py::list conds;
      for (std::size_t i = 0; i < w.conds.size(); ++i) {
        const host::WaitCond& c = w.conds[i];
        conds.append(py::dict(py::arg("kind") = c.kind, py::arg("pe") = c.pe, py::arg("offset") = c.offset,
                              py::arg("dtype") = c.dtype, py::arg("cmp") = c.cmp, py::arg("value") = c.value,
                              py::arg("actual") = w.actual[i] ? py::object(py::int_(*w.actual[i])) : py::none(),
                              py::arg("heap") = c.offset >= host::kControlBytes));
      }
      waits.append(py::dict(py::arg("label") = w.label, py::arg("site") = w.site, py::arg("conds") = conds));
    }
    for (std::size_t peer = 0; peer < v.signals.size(); ++peer) {
      const host::SignalRecord& r = v.signals[peer];
      if (r.count)
        signals.append(py::dict(py::arg("peer") = peer, py::arg("offset") = r.offset, py::arg("value") = r.value,
                                py::arg("op") = r.op, py::arg("count") = r.count));
    }
    out.append(py::dict(py::arg("pe") = v.pe, py::arg("state") = v.state, py::arg("waiting") = v.waiting,
                        py::arg("waits") = waits, py::arg("signals") = signals,
                        py::arg("control_bytes") = host::kControlBytes));
  }
  return out;
}
#endif

void translate_errors() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      set_error(e);
    }
  });
}

// Calls that can wait release the GIL: the interpreter's programs run on threads and wait on each other.
using NoGil = py::call_guard<py::gil_scoped_release>;

// Every backend module binds its own copy of the interface (module_local): _host and _nvshmem
// can be imported into one process.
void bind_interface(py::module_& m) {
  py::class_<Backend>(m, "Backend", py::module_local())
      .def_property_readonly("my_pe", &Backend::my_pe)
      .def_property_readonly("n_pes", &Backend::n_pes)
      .def_property_readonly("heap_base", &Backend::heap_base)
      .def_property_readonly("heap_size", &Backend::heap_size)
      .def_property_readonly("address", [](Backend& b) { return reinterpret_cast<std::uintptr_t>(&b); })
      .def("malloc", [](Backend& b, std::size_t bytes, int dtype) { return b.malloc(bytes, DType(dtype)); },
           NoGil())
      .def("free", &Backend::free, NoGil())
      .def("heap_free_bytes", &Backend::heap_free_bytes)
      .def("peer_ptr", &Backend::peer_ptr)
      .def("team_my_pe", &Backend::team_my_pe)
      .def("team_n_pes", &Backend::team_n_pes)
      .def("team_translate_pe", &Backend::team_translate_pe)
      .def("team_split_strided", &Backend::team_split_strided, NoGil())
      .def("team_split_2d", &Backend::team_split_2d, NoGil())
      .def("team_destroy", &Backend::team_destroy, NoGil())
      .def("team_device_handle", &Backend::team_device_handle)
      .def("put", &Backend::put)
      .def("get", &Backend::get)
      .def("put_signal", [](Backend& b, Addr d, Addr s, std::size_t n, Addr sig, std::uint64_t v, int op, int pe,
                            Stream st) { b.put_signal(d, s, n, sig, v, SignalOp(op), pe, st); })
      .def("signal_op", [](Backend& b, Addr sig, std::uint64_t v, int op, int pe, Stream st) {
        b.signal_op(sig, v, SignalOp(op), pe, st);
      })
      .def("signal_wait_until", [](Backend& b, Addr sig, int cmp, std::uint64_t v, Stream st) {
        return b.signal_wait_until(sig, Cmp(cmp), v, st);
      }, NoGil())
      // Waits on the host backend, which has no streams; a GPU backend only enqueues the wait.
      .def("signal_wait_until_on_stream", [](Backend& b, Addr sig, int cmp, std::uint64_t v, Stream st) {
        b.signal_wait_until_on_stream(sig, Cmp(cmp), v, st);
      }, NoGil())
      .def("signal_fetch", &Backend::signal_fetch)
      .def("wait_until", [](Backend& b, Addr p, int type, int cmp, std::uint64_t v) {
        b.wait_until(p, DType(type), Cmp(cmp), v);
      }, NoGil())
      .def("wait_until_any", [](Backend& b, Addr p, std::size_t stride, int type, int cmp,
                                const std::vector<std::uint64_t>& values) {
        return b.wait_until_any(p, stride, DType(type), Cmp(cmp), values);
      }, NoGil())
      .def("test", [](Backend& b, Addr p, int type, int cmp, std::uint64_t v) {
        return b.test(p, DType(type), Cmp(cmp), v);
      })
      .def("quiet", &Backend::quiet)
      .def("fence", &Backend::fence)
      .def("atomic", [](Backend& b, int op, int type, Addr dest, std::uint64_t v, std::uint64_t cond, int pe) {
        return b.atomic(AtomicOp(op), DType(type), dest, v, cond, pe);
      })
      .def("barrier", &Backend::barrier, NoGil())
      .def("sync", &Backend::sync, NoGil())
      .def("broadcast", [](Backend& b, int team, Addr d, Addr s, std::size_t n, int type, int root, Stream st) {
        b.broadcast(team, d, s, n, DType(type), root, st);
      }, NoGil())
      .def("fcollect", [](Backend& b, int team, Addr d, Addr s, std::size_t n, int type, Stream st) {
        b.fcollect(team, d, s, n, DType(type), st);
      }, NoGil())
      .def("alltoall", [](Backend& b, int team, Addr d, Addr s, std::size_t n, int type, Stream st) {
        b.alltoall(team, d, s, n, DType(type), st);
      }, NoGil())
      .def("reduce", [](Backend& b, int team, Addr d, Addr s, std::size_t n, int type, int op, Stream st) {
        b.reduce(team, d, s, n, DType(type), ReduceOp(op), st);
      }, NoGil())
      .def("reducescatter", [](Backend& b, int team, Addr d, Addr s, std::size_t n, int type, int op, Stream st) {
        b.reducescatter(team, d, s, n, DType(type), ReduceOp(op), st);
      }, NoGil())
      .def("reject_collective", &Backend::reject_collective, NoGil())
      .def("finalize", &Backend::finalize, NoGil())
      .def("abandon", &Backend::abandon, NoGil());
}

// Waits release the GIL (so the interpreter's other programs run); a wait takes it back just to
// let Ctrl-C (SIGINT) end it with KeyboardInterrupt. Python runs signal handlers on the main thread only.
void check_python_signals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// NOTE [stall reports] (common/wait.hpp): an UnishmemWarning from the waiting thread, which holds
// no GIL while it waits; a warning filter that turns it into an error ends the wait with it. The
// warning names the first frame outside the package: the caller's line that waits.
void warn_stall(const std::string& what, double seconds) {
  char waited[32];
  std::snprintf(waited, sizeof waited, "%.0f", seconds);
  const std::string message = std::string("still waiting after ") + waited + " s for " + what;
  py::gil_scoped_acquire gil;
  const py::module_ package = py::module_::import("unishmem");
  std::string root = py::str(package.attr("__file__"));  // its Python files (an editable install keeps
  root.erase(root.rfind('/') + 1);                          // the modules elsewhere)
  int stacklevel = 1;
  for (py::object frame = py::module_::import("sys").attr("_getframe")(0); !frame.is_none();
       frame = frame.attr("f_back"), ++stacklevel) {
    const std::string file = py::str(frame.attr("f_code").attr("co_filename"));
    if (file.rfind(root, 0) != 0) break;
  }
  if (PyErr_WarnEx(package.attr("UnishmemWarning").ptr(), message.c_str(), stacklevel) != 0)
    throw py::error_already_set();
}

// NOTE [enum values] (backend.hpp): the C++ numbering under the names pysrc/unishmem/enums.py gives it,
// so that tests/test_registry.py can compare the two.
py::dict enum_values() {
  auto as_dict = [](std::initializer_list<std::pair<const char*, int>> entries) {
    py::dict d;
    for (const auto& [name, value] : entries) d[name] = value;
    return d;
  };
  py::dict all;
  all["DTYPES"] = as_dict({{"float16", int(DType::f16)}, {"bfloat16", int(DType::bf16)},
                           {"float32", int(DType::f32)}, {"float64", int(DType::f64)},
                           {"int8", int(DType::i8)}, {"int16", int(DType::i16)}, {"int32", int(DType::i32)},
                           {"int64", int(DType::i64)}, {"uint8", int(DType::u8)}, {"uint16", int(DType::u16)},
                           {"uint32", int(DType::u32)}, {"uint64", int(DType::u64)}});
  all["SIGNAL"] = as_dict({{"SET", int(SignalOp::set)}, {"ADD", int(SignalOp::add)}});
  all["CMP"] = as_dict({{"EQ", int(Cmp::eq)}, {"NE", int(Cmp::ne)}, {"GT", int(Cmp::gt)}, {"GE", int(Cmp::ge)},
                        {"LT", int(Cmp::lt)}, {"LE", int(Cmp::le)}});
  all["REDUCE_OPS"] = as_dict({{"sum", int(ReduceOp::sum)}, {"min", int(ReduceOp::min)},
                               {"max", int(ReduceOp::max)}, {"prod", int(ReduceOp::prod)}});
  all["ATOMIC_OPS"] = as_dict(
      {{"fetch", int(AtomicOp::fetch)}, {"set", int(AtomicOp::set)}, {"swap", int(AtomicOp::swap)},
       {"compare_swap", int(AtomicOp::compare_swap)}, {"fetch_add", int(AtomicOp::fetch_add)},
       {"add", int(AtomicOp::add)}, {"fetch_inc", int(AtomicOp::fetch_inc)}, {"inc", int(AtomicOp::inc)},
       {"fetch_and", int(AtomicOp::fetch_and)}, {"and", int(AtomicOp::and_)},
       {"fetch_or", int(AtomicOp::fetch_or)}, {"or", int(AtomicOp::or_)},
       {"fetch_xor", int(AtomicOp::fetch_xor)}, {"xor", int(AtomicOp::xor_)}});
#ifdef UNISHMEM_HOST
  all["WAIT"] = as_dict({{"TURN", host::kWaitTurn}, {"SIGNAL", host::kWaitSignal}, {"VALUE", host::kWaitValue},
                         {"ANY", host::kWaitAny}, {"BARRIER", host::kWaitBarrier}});
#endif
  return all;
}

}  // namespace

PYBIND11_MODULE(UNISHMEM_MODULE_NAME, m) {
  translate_errors();
  set_stall_reporter(warn_stall);
  bind_interface(m);
  bind_fast_calls(m);
  m.attr("enum_values") = enum_values();
#ifdef UNISHMEM_HOST
  using host::HostBackend;
  py::class_<HostBackend, Backend>(m, "HostBackend", py::module_local())
      .def(py::init([](std::string token, int pe, int n_pes, std::size_t heap_size, int node_size,
                       double stall_warn_s, double timeout_s, double deadlock_s) {
             auto b = std::make_unique<HostBackend>(std::move(token), pe, n_pes, heap_size, node_size,
                                                    WaitPolicy{stall_warn_s, timeout_s, deadlock_s});
             b->set_wait_check(check_python_signals);
             b->set_site_provider([] {
               py::gil_scoped_acquire gil;
               return py::module_::import("unishmem.hang").attr("wait_site")().cast<std::string>();
             });
             return b;
           }),
           py::arg("token"), py::arg("pe"), py::arg("n_pes"), py::arg("heap_size"), py::arg("node_size"),
           py::arg("stall_warn_s"), py::arg("timeout_s"), py::arg("deadlock_s"))
      .def("attach_peers", &HostBackend::attach_peers)
      // NOTE [programs] (host_backend.hpp): the concurrent interpreter's bookkeeping.
      .def("begin_programs", &HostBackend::begin_programs)
      .def("end_programs", &HostBackend::end_programs)
      .def("add_program", &HostBackend::add_program)
      .def("program_begin", &HostBackend::program_begin)
      .def("program_end", &HostBackend::program_end)
      .def("abort_programs", &HostBackend::abort_programs)
      .def("wait_snapshot", [](const HostBackend& b) { return pe_views(b.snapshot()); },
           "Every PE's waits now, with the current value of each word (for the hang report)")
      .def("unlink_own_segment", &HostBackend::unlink_own_segment)
      .def("peer_heap_base", &HostBackend::peer_heap_base)
      .def("heap_view", [](HostBackend& b, int pe) {
        // A writable view of a PE's heap mapping; torch wraps it without copying.
        return py::memoryview::from_memory(reinterpret_cast<void*>(b.peer_heap_base(pe)),
                                           static_cast<py::ssize_t>(b.heap_size()), false);
      })
      .def_static("unlink_job", &HostBackend::unlink_job);
  m.attr("segment_prefix") = "unishmem-";
  m.attr("max_resident_programs") = host::kMaxWaiters;
  // Timed loops for `unishmem bench` (csrc/host/bench.hpp); each returns seconds.
  m.def("bench_memcpy", &host::bench::memcpy_seconds, py::arg("dest"), py::arg("source"), py::arg("nbytes"),
        py::arg("iters"), py::arg("chunk") = 0);
  m.def("bench_raw_pingpong", &host::bench::raw_pingpong_seconds, py::arg("mine"), py::arg("theirs"),
        py::arg("iters"), py::arg("initiator"), py::arg("start"), py::arg("timeout_s"), py::arg("samples") = 0);
  m.def("bench_signal_pingpong", &host::bench::signal_pingpong_seconds, py::arg("backend"), py::arg("dest"),
        py::arg("source"), py::arg("nbytes"), py::arg("sig"), py::arg("peer"), py::arg("iters"),
        py::arg("initiator"), py::arg("start"), py::arg("samples") = 0);
  m.def("bench_barrier", &host::bench::barrier_seconds, py::arg("backend"), py::arg("team"), py::arg("iters"),
        py::arg("samples") = 0);
#endif
#ifdef UNISHMEM_GPU
  using gpu::GpuBackend;
  namespace lib = gpu::lib;
  m.attr("vendor") = lib::kName;
  m.attr("header_version") = lib::kHeaderVersion;
  // Which operations this build takes from the library (True) and which it builds from other calls.
  py::dict library_calls;
  library_calls["team_split_2d"] = lib::kSplit2d;
  library_calls["team barrier and sync on a stream"] = lib::kTeamBarrierOnStream;
  library_calls["fcollect on a stream"] = lib::kFcollectOnStream;
  library_calls["signal_op on a stream"] = lib::kSignalOpOnStream;
  library_calls["signal wait on a stream"] = lib::kSignalWaitOnStream;
  library_calls["reduce on a stream"] = lib::kReduceOnStream;
  library_calls["reduce-scatter"] = lib::kReduceScatter;
  m.attr("library_calls") = library_calls;
  // NOTE [enum values]: our CMP codes in the library's numbering (tests compare the device library's table).
  py::dict cmp_values;
  for (Cmp c : {Cmp::eq, Cmp::ne, Cmp::gt, Cmp::ge, Cmp::lt, Cmp::le}) cmp_values[py::int_(int(c))] = lib::cmp_value(c);
  m.attr("cmp_values") = cmp_values;
  m.def("library_version", [] {
    int major = 0, minor = 0, patch = 0;
    lib::library_version(&major, &minor, &patch);
    return py::make_tuple(major, minor, patch);
  }, "The loaded library's own version (callable before init).");
  m.def("unique_id", [] { return py::bytes(GpuBackend::unique_id()); },
        "A unique id for unique-id init; made on PE 0 only, then handed to every PE.");
  py::class_<GpuBackend, Backend>(m, "GpuBackend", py::module_local())
      .def(py::init([](py::bytes unique_id, int pe, int n_pes, int device, std::size_t heap_size,
                       double stall_warn_s, double timeout_s) {
             auto b = std::make_unique<GpuBackend>(std::string(unique_id), pe, n_pes, device, heap_size,
                                                   WaitPolicy{stall_warn_s, timeout_s, /*deadlock_s: host only*/ 0});
             b->set_wait_check(check_python_signals);
             return b;
           }),
           py::arg("unique_id"), py::arg("pe"), py::arg("n_pes"), py::arg("device"), py::arg("heap_size"),
           py::arg("stall_warn_s"), py::arg("timeout_s"))
      .def_property_readonly("device", &GpuBackend::device)
      .def_property_readonly("limited_mode", &GpuBackend::limited_mode)
      .def_property_readonly("init_mode", &GpuBackend::init_mode)
      .def("module_init", &GpuBackend::module_init, py::arg("module"), py::arg("stream") = 0)
      .def("heap_view", [](GpuBackend& b, int pe) -> py::object {
        // PE pe's heap as seen from this process, as a DLPack capsule of bytes on the device.
        const Addr base = b.peer_heap_base(pe);
        if (!base) return py::none();
        return py::reinterpret_steal<py::object>(
            gpu::dlpack_bytes(reinterpret_cast<void*>(base), b.heap_size(), lib::kDLPackDevice, b.device()));
      });
#endif
}
