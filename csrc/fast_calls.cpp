// The point-to-point calls from Python's hot loops, as plain METH_FASTCALL functions.
#include "fast_calls.hpp"

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <structmember.h>

namespace py = pybind11;

namespace unishmem {
namespace {

// NOTE [fast calls]: put, get, put_signal, signal_op and signal_wait_until are called in tight
// loops from Python, and pybind11's dispatch (overload resolution, a caster per argument) cost
// more than the host backend's call itself (measured by `unishmem bench`, "Python per-call
// cost"). So they also exist as plain METH_FASTCALL functions of the module, whose first
// argument is the backend's address (Backend.address); the Runtime that passes it holds the
// backend. Arguments are ints, as the Runtime has checked them.
Backend* backend_at(PyObject* address) { return reinterpret_cast<Backend*>(PyLong_AsVoidPtr(address)); }

// The ints args[first..first+N) as uint64 (addresses, values and small enums alike); false with a
// Python error set when one is not an int or is out of range.
template <std::size_t N>
bool ints(PyObject* const* args, Py_ssize_t nargs, Py_ssize_t want, std::array<std::uint64_t, N>& out) {
  if (nargs != want) {
    PyErr_Format(PyExc_TypeError, "expected %zd arguments, got %zd", want, nargs);
    return false;
  }
  for (std::size_t i = 0; i < N; ++i) {
    out[i] = PyLong_AsUnsignedLong(args[nargs - N + i]);  // not ...LongLong: that one goes byte by byte
    if (out[i] == std::uint64_t(-1) && PyErr_Occurred()) return false;
  }
  return true;
}

static_assert(sizeof(unsigned long) == sizeof(std::uint64_t), "an LP64 platform");

// Runs a fast call, turning C++ exceptions into Python ones as the pybind11 functions do.
template <class Fn> PyObject* fast(Fn&& fn) {
  try {
    return fn();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const Error& e) {
    set_error(e);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// (backend, dest, source, n, pe, stream)
template <bool put>
PyObject* fast_copy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  std::array<std::uint64_t, 5> a;
  if (!ints(args, nargs, 6, a)) return nullptr;
  return fast([&] {
    if constexpr (put) backend_at(args[0])->put(a[0], a[1], a[2], int(a[3]), a[4]);
    else backend_at(args[0])->get(a[0], a[1], a[2], int(a[3]), a[4]);
    Py_RETURN_NONE;
  });
}

// (backend, dest, source, n, sig, value, op, pe, stream)
PyObject* fast_put_signal(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  std::array<std::uint64_t, 8> a;
  if (!ints(args, nargs, 9, a)) return nullptr;
  return fast([&] {
    backend_at(args[0])->put_signal(a[0], a[1], a[2], a[3], a[4], SignalOp(a[5]), int(a[6]), a[7]);
    Py_RETURN_NONE;
  });
}

PyObject* fast_signal_op(PyObject*, PyObject* const* args, Py_ssize_t nargs) {  // (backend, sig, value, op, pe, stream)
  std::array<std::uint64_t, 5> a;
  if (!ints(args, nargs, 6, a)) return nullptr;
  return fast([&] {
    backend_at(args[0])->signal_op(a[0], a[1], SignalOp(a[2]), int(a[3]), a[4]);
    Py_RETURN_NONE;
  });
}

// (backend, sig, cmp, value, stream) -> the value seen. Releases the GIL only to wait.
PyObject* fast_signal_wait_until(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  std::array<std::uint64_t, 4> a;
  if (!ints(args, nargs, 5, a)) return nullptr;
  return fast([&] {
    Backend* b = backend_at(args[0]);
    std::optional<std::uint64_t> seen = b->signal_ready(a[0], Cmp(a[1]), a[2]);
    if (!seen) {
      py::gil_scoped_release nogil;
      seen = b->signal_wait_until(a[0], Cmp(a[1]), a[2], a[3]);
    }
    return PyLong_FromUnsignedLongLong(*seen);
  });
}

// NOTE [hot calls]: even with the fast calls, the Runtime's checks of the tensors cost several
// times the host backend's call: each torch attribute read from Python costs about 80 ns, and a
// put_signal reads about fifteen. So the same calls also exist taking the tensors themselves,
// checked in C++ in one of two ways:
//   1. A tensor object seen before: once a tensor passes the Runtime's full checks, _runtime.py calls
//      HotPath.remember(t, address, nbytes, symmetric), which keeps a HotEntry for the tensor object
//      (its version counter, the epoch, address, nbytes and dtype). A hot call trusts that entry while
//      - the tensor object is the one the entry was made for (a weak reference tells: an entry goes
//        when its tensor does, before the tensor's memory could hold another object);
//      - the tensor's data pointer is still `address` (`t.data = ...` moves it without a new version);
//      - its version counter is still `version` (torch bumps it at every in-place op, resize_, set_,
//        transpose_ and as_strided_ included), or else its nbytes, dtype and contiguity are what
//        they were (a write into a source bumps the version too, and is the common case);
//      - for a symmetric role, `epoch` is the HotPath's: the Runtime takes a new epoch, unique in the
//        process, at every free, and -1 (no hot calls) at finalize and on GPU runtimes. A local role
//        needs no epoch (-1 in entries the Runtime checked only as local).
//   2. Any other tensor (a view made in the call: `buf[i * n:(i + 1) * n]`, `sig[k]`), from what it is
//      now (NOTE [view checks]): a new view costs a few torch reads more than a tensor seen before, not
//      the Runtime's checks in Python, and it is not remembered (most such views die with the call).
// Anything else, and any argument that is not plainly valid, returns NotImplemented: the Runtime
// then runs its full checks, which name what is wrong, and remembers the tensors that pass.
// The entries live in the HotPath, not in the tensors' __dict__: a lookup there costs a fraction
// of an attribute read, and the entry's numbers need no conversion from Python ints.
//
// Only tensors of type torch.Tensor itself take hot calls (a subclass may override what the
// checks read), and torch's own descriptors are called directly: looking a method up on the
// instance costs as much as calling it.
//
// NOTE [view checks]: NOTE [allocation identity] (_runtime.py) gives every symmetric allocation a
// storage of its own, and every view of the allocation (slices, indexing, dtype views, detach(),
// .data) shares that storage object. The HotPath holds the live allocations by storage object
// (AllocationTable: a reference to each storage, its first byte and size), added by rt.empty and
// dropped by rt.free. A tensor in a symmetric role is then checked from its storage (one of the
// live allocations'), its storage offset and nbytes (inside that allocation), its dtype and, for
// data, its contiguity: what the Runtime's _symmetric checks, without a bisection of the heap's
// allocations. A view of a freed allocation has a storage the table no longer holds, even once its
// bytes belong to a new allocation (whose storage is another object), so it misses, and the
// Runtime's checks name the use after free. A local role needs no table: CPU, contiguous, its data
// pointer, nbytes and dtype.
struct HotEntry {
  PyObject* ref = nullptr;  // a weak reference to the tensor (owned), whose callback forgets the entry
  long long version = 0;    // the tensor's version counter when checked
  long long epoch = -1;     // the HotPath's epoch then; -1: checked as a local tensor only
  std::uint64_t addr = 0, nbytes = 0;
  PyObject* dtype = nullptr;  // owned
};

// The entries of one HotPath, by tensor object. Used with the GIL held.
class EntryTable {
 public:
  EntryTable() = default;
  EntryTable(const EntryTable&) = delete;
  EntryTable& operator=(const EntryTable&) = delete;
  // With the table go its weak references, and with them their callbacks, which are never called.
  ~EntryTable() {
    for (auto& [t, e] : entries_) drop(e);
  }

  // The entry of tensor `t`, or null. The weak reference is checked too: should a tensor ever go
  // without its callback running, a new object at its address must not inherit its entry.
  HotEntry* find(PyObject* t) {
    auto it = entries_.find(t);
    if (it == entries_.end()) return nullptr;
    if (referent(it->second.ref) != t) {
      forget(t);
      return nullptr;
    }
    return &it->second;
  }
  // A new reference to a weak reference to `t` whose callback forgets t's entry; null with an error set.
  PyObject* watch(PyObject* t);
  HotEntry& put(PyObject* t, PyObject* ref) { return entries_[t] = HotEntry{ref}; }
  void forget(PyObject* t) {
    if (auto it = entries_.find(t); it != entries_.end()) {
      HotEntry e = it->second;
      entries_.erase(it);
      drop(e);
    }
  }
  std::size_t size() const { return entries_.size(); }

 private:
  static PyObject* referent(PyObject* ref) {  // borrowed; Py_None once the tensor is gone
#if PY_VERSION_HEX >= 0x030D0000
    PyObject* obj = nullptr;
    if (PyWeakref_GetRef(ref, &obj) <= 0) return Py_None;
    Py_DECREF(obj);  // alive: the caller holds the tensor
    return obj;
#else
    return PyWeakref_GET_OBJECT(ref);
#endif
  }
  static void drop(HotEntry& e) {
    Py_XDECREF(e.dtype);
    Py_XDECREF(e.ref);
  }
  std::unordered_map<PyObject*, HotEntry> entries_;
};

// NOTE [view checks]: the live symmetric allocations, by their storage object. Used with the GIL held.
class AllocationTable {
 public:
  struct Allocation {
    std::uint64_t addr = 0, nbytes = 0;
  };
  AllocationTable() = default;
  AllocationTable(const AllocationTable&) = delete;
  AllocationTable& operator=(const AllocationTable&) = delete;
  ~AllocationTable() { clear(); }

  const Allocation* find(PyObject* storage) const {
    auto it = live_.find(storage);
    return it == live_.end() ? nullptr : &it->second;
  }
  void add(PyObject* storage, std::uint64_t addr, std::uint64_t nbytes) {
    drop(addr);
    live_[Py_NewRef(storage)] = Allocation{addr, nbytes};
  }
  void drop(std::uint64_t addr) {  // frees are rare: a scan is fine
    for (auto it = live_.begin(); it != live_.end(); ++it)
      if (it->second.addr == addr) {
        PyObject* storage = it->first;
        live_.erase(it);
        Py_DECREF(storage);
        return;
      }
  }
  void clear() {
    for (auto& [storage, a] : live_) Py_DECREF(storage);
    live_.clear();
  }
  std::size_t size() const { return live_.size(); }

 private:
  std::unordered_map<PyObject*, Allocation> live_;  // owns a reference to each storage
};

struct HotPath {
  Backend* backend;
  int n_pes;
  long long epoch = -1;
  py::object uint64, signal_enum, cmp_enum;  // torch.uint64, unishmem.SIGNAL, unishmem.CMP
  py::object tensor_type;                    // torch.Tensor
  py::object data_ptr, version, nbytes, dtype, is_contiguous, is_cpu, storage, storage_offset;  // its descriptors
  std::vector<std::pair<PyObject*, std::uint64_t>> itemsizes;  // (torch dtype, bytes): the heap's dtypes
  EntryTable entries{};
  AllocationTable allocations{};
};

// The weak reference callback of an entry: self is (table address, tensor address).
PyObject* forget_entry(PyObject* self, PyObject* /*ref*/) {
  auto* table = static_cast<EntryTable*>(PyLong_AsVoidPtr(PyTuple_GET_ITEM(self, 0)));
  table->forget(static_cast<PyObject*>(PyLong_AsVoidPtr(PyTuple_GET_ITEM(self, 1))));
  Py_RETURN_NONE;
}
PyMethodDef forget_entry_def = {"forget_entry", forget_entry, METH_O, nullptr};

PyObject* EntryTable::watch(PyObject* t) {
  py::object self = py::make_tuple(reinterpret_cast<std::uintptr_t>(this), reinterpret_cast<std::uintptr_t>(t));
  py::object callback = py::reinterpret_steal<py::object>(PyCFunction_New(&forget_entry_def, self.ptr()));
  if (!callback) return nullptr;
  return PyWeakref_NewRef(t, callback.ptr());
}

HotPath& hot_at(PyObject* address) { return *reinterpret_cast<HotPath*>(PyLong_AsVoidPtr(address)); }

// torch's method or property `descr` of tensor `t`: a new reference, or null with an error set.
PyObject* method(const py::object& descr, PyObject* t) { return PyObject_Vectorcall(descr.ptr(), &t, 1, nullptr); }
PyObject* property(const py::object& descr, PyObject* t) {
  return Py_TYPE(descr.ptr())->tp_descr_get(descr.ptr(), t, reinterpret_cast<PyObject*>(Py_TYPE(t)));
}

PyObject* miss() { Py_RETURN_NOTIMPLEMENTED; }

enum class Found { hit, miss, error };

struct View {
  std::uint64_t addr = 0, nbytes = 0;
  PyObject* dtype = nullptr;  // borrowed from the entry
};

// The tensor still has the nbytes, dtype and contiguity it was checked with.
Found unchanged(const HotPath& h, PyObject* t, const View& v) {
  py::object nbytes = py::reinterpret_steal<py::object>(property(h.nbytes, t));
  py::object dtype = py::reinterpret_steal<py::object>(property(h.dtype, t));
  py::object contiguous = py::reinterpret_steal<py::object>(method(h.is_contiguous, t));
  if (!nbytes || !dtype || !contiguous) return Found::error;
  const bool same = PyLong_AsUnsignedLong(nbytes.ptr()) == v.nbytes && dtype.ptr() == v.dtype &&
                    contiguous.ptr() == Py_True;
  if (PyErr_Occurred()) return Found::error;
  return same ? Found::hit : Found::miss;
}

// The tensor's entry (NOTE [hot calls], 1.): hit, miss (none, or out of date) or error.
Found remembered(HotPath& h, PyObject* t, bool symmetric, View& v) {
  HotEntry* e = h.entries.find(t);
  if (!e || (symmetric && e->epoch != h.epoch)) return Found::miss;
  v = View{e->addr, e->nbytes, e->dtype};
  py::object ptr = py::reinterpret_steal<py::object>(method(h.data_ptr, t));
  if (!ptr) return Found::error;
  if (PyLong_AsUnsignedLong(ptr.ptr()) != v.addr) return PyErr_Occurred() ? Found::error : Found::miss;
  py::object version = py::reinterpret_steal<py::object>(property(h.version, t));
  if (!version) return Found::error;
  const long long now = PyLong_AsLongLong(version.ptr());
  if (now == -1 && PyErr_Occurred()) return Found::error;
  if (now == e->version) return Found::hit;
  const Found found = unchanged(h, t, v);
  if (found == Found::hit) e->version = now;  // the entry is current again
  return found;
}

// An int torch returned, or nothing with the error set.
std::optional<std::uint64_t> read_int(PyObject* x) {
  py::object owned = py::reinterpret_steal<py::object>(x);
  if (!x) return std::nullopt;
  const std::uint64_t v = PyLong_AsUnsignedLong(x);
  if (v == std::uint64_t(-1) && PyErr_Occurred()) return std::nullopt;
  return v;
}

enum class Role { local, symmetric, word };  // word: a symmetric 1-element tensor, contiguous as such

// What the tensor is now (NOTE [view checks]): its nbytes, dtype and (but for a word) contiguity,
// then where it lies: in a live allocation's storage for a symmetric role, on the CPU for a local one.
Found checked(HotPath& h, PyObject* t, Role role, View& v) {
  const auto nbytes = read_int(property(h.nbytes, t));
  py::object dtype = py::reinterpret_steal<py::object>(property(h.dtype, t));
  if (!nbytes || !dtype) return Found::error;
  if (*nbytes == 0) return Found::miss;  // empty tensors: the Runtime's checks (data_ptr() is 0)
  v.nbytes = *nbytes;
  v.dtype = dtype.ptr();  // borrowed: torch's dtypes live as long as torch
  if (role != Role::word) {
    py::object contiguous = py::reinterpret_steal<py::object>(method(h.is_contiguous, t));
    if (!contiguous) return Found::error;
    if (contiguous.ptr() != Py_True) return Found::miss;
  }
  if (role == Role::local) {
    py::object cpu = py::reinterpret_steal<py::object>(property(h.is_cpu, t));
    if (!cpu) return Found::error;
    if (cpu.ptr() != Py_True) return Found::miss;
    const auto addr = read_int(method(h.data_ptr, t));
    if (!addr) return Found::error;
    v.addr = *addr;
    return Found::hit;
  }
  py::object storage = py::reinterpret_steal<py::object>(method(h.storage, t));
  if (!storage) return Found::error;
  const AllocationTable::Allocation* a = h.allocations.find(storage.ptr());
  if (!a) return Found::miss;  // not the runtime's storage, or one of a freed allocation
  std::uint64_t itemsize = 0;
  for (auto [d, size] : h.itemsizes)
    if (d == v.dtype) itemsize = size;
  if (!itemsize) return Found::miss;
  const auto elements = read_int(method(h.storage_offset, t));
  if (!elements) return Found::error;
  const std::uint64_t offset = *elements * itemsize;
  if (offset > a->nbytes || v.nbytes > a->nbytes - offset) return Found::miss;
  v.addr = a->addr + offset;
  return Found::hit;
}

void remember(HotPath& h, py::handle tensor, std::uint64_t addr, std::uint64_t nbytes, bool symmetric);

Found view_of(HotPath& h, PyObject* t, Role role, View& v) {
  if (reinterpret_cast<PyObject*>(Py_TYPE(t)) != h.tensor_type.ptr()) return Found::miss;
  const bool symmetric = role != Role::local;
  Found found = remembered(h, t, symmetric, v);
  if (found != Found::miss) return found;
  found = checked(h, t, role, v);
  // Remembered only if something beside the call holds it: a view made in the call (`sig[k]`) is
  // held by the caller's stack alone, and dies with the call. A refcount says nothing of validity.
  if (found == Found::hit && Py_REFCNT(t) > 1) {
    try {
      remember(h, t, v.addr, v.nbytes, symmetric);
    } catch (py::error_already_set& e) {
      e.restore();
      return Found::error;
    }
  }
  return found;
}

// NOTE [hot calls]: what the Runtime's checks found for `t` in a role (symmetric or local).
void remember(HotPath& h, py::handle tensor, std::uint64_t addr, std::uint64_t nbytes, bool symmetric) {
  PyObject* t = tensor.ptr();
  if (reinterpret_cast<PyObject*>(Py_TYPE(t)) != h.tensor_type.ptr()) return;  // never takes a hot call
  HotEntry* e = h.entries.find(t);
  if (!symmetric && e && e->epoch == h.epoch && e->addr == addr && e->nbytes == nbytes)
    return;  // what a symmetric role found holds for a local role too
  py::object version = py::reinterpret_steal<py::object>(property(h.version, t));
  py::object dtype = py::reinterpret_steal<py::object>(property(h.dtype, t));
  if (!version || !dtype) throw py::error_already_set();
  const long long v = PyLong_AsLongLong(version.ptr());
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (!e) {
    PyObject* ref = h.entries.watch(t);
    if (!ref) throw py::error_already_set();
    e = &h.entries.put(t, ref);
  }
  Py_XSETREF(e->dtype, dtype.release().ptr());
  e->version = v;
  e->epoch = symmetric ? h.epoch : -1;
  e->addr = addr;
  e->nbytes = nbytes;
}

// A symmetric signal word: one naturally aligned uint64.
Found signal_of(HotPath& h, PyObject* t, View& v) {
  const Found found = view_of(h, t, Role::word, v);
  if (found != Found::hit) return found;
  return v.dtype == h.uint64.ptr() && v.nbytes == 8 && v.addr % 8 == 0 ? Found::hit : Found::miss;
}

// A plain int (or a member of `enum_type`, for op and cmp) in [0, bound), else nothing.
std::optional<std::uint64_t> small_int(PyObject* x, std::uint64_t bound, PyObject* enum_type = nullptr) {
  if (!PyLong_CheckExact(x) && reinterpret_cast<PyObject*>(Py_TYPE(x)) != enum_type) return std::nullopt;
  const std::uint64_t v = PyLong_AsUnsignedLong(x);
  if (PyErr_Occurred()) {
    PyErr_Clear();  // negative or too large: the Runtime's checks say so
    return std::nullopt;
  }
  if (v >= bound) return std::nullopt;
  return v;
}

std::optional<std::uint64_t> u64_of(PyObject* x) { return small_int(x, ~std::uint64_t(0)); }  // 2**64-1: slow path

PyObject* result(Found f) { return f == Found::error ? nullptr : miss(); }

#define UNISHMEM_HOT_ARGS(n)                                                                      \
  if (nargs != (n)) {                                                                             \
    PyErr_Format(PyExc_TypeError, "expected %d arguments, got %zd", (n), nargs);                  \
    return nullptr;                                                                               \
  }                                                                                               \
  HotPath& h = hot_at(args[0]);                                                                   \
  if (h.epoch < 0 || args[nargs - 1] != Py_None) return miss();

// (hot, dest, source, pe, stream): put (dest symmetric) or get (source symmetric).
template <bool put>
PyObject* hot_copy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  UNISHMEM_HOT_ARGS(5)
  View d, s;
  const auto pe = small_int(args[3], h.n_pes);
  if (!pe) return miss();
  constexpr Role dest_role = put ? Role::symmetric : Role::local, source_role = put ? Role::local : Role::symmetric;
  if (Found f = view_of(h, args[1], dest_role, d); f != Found::hit) return result(f);
  if (Found f = view_of(h, args[2], source_role, s); f != Found::hit) return result(f);
  if (d.nbytes != s.nbytes || d.dtype != s.dtype) return miss();
  return fast([&] {
    if constexpr (put) h.backend->put(d.addr, s.addr, d.nbytes, int(*pe), 0);
    else h.backend->get(d.addr, s.addr, d.nbytes, int(*pe), 0);
    Py_RETURN_NONE;
  });
}

// (hot, dest, source, signal, value, pe, op, stream)
PyObject* hot_put_signal(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  UNISHMEM_HOT_ARGS(8)
  View d, s, sig;
  const auto value = u64_of(args[4]);
  const auto pe = small_int(args[5], h.n_pes);
  const auto op = small_int(args[6], 2, h.signal_enum.ptr());
  if (!value || !pe || !op) return miss();
  if (Found f = view_of(h, args[1], Role::symmetric, d); f != Found::hit) return result(f);
  if (Found f = view_of(h, args[2], Role::local, s); f != Found::hit) return result(f);
  if (Found f = signal_of(h, args[3], sig); f != Found::hit) return result(f);
  if (d.nbytes != s.nbytes || d.dtype != s.dtype) return miss();
  return fast([&] {
    h.backend->put_signal(d.addr, s.addr, d.nbytes, sig.addr, *value, SignalOp(*op), int(*pe), 0);
    Py_RETURN_NONE;
  });
}

// (hot, signal, value, pe, op, stream)
PyObject* hot_signal_op(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  UNISHMEM_HOT_ARGS(6)
  View sig;
  const auto value = u64_of(args[2]);
  const auto pe = small_int(args[3], h.n_pes);
  const auto op = small_int(args[4], 2, h.signal_enum.ptr());
  if (!value || !pe || !op) return miss();
  if (Found f = signal_of(h, args[1], sig); f != Found::hit) return result(f);
  return fast([&] {
    h.backend->signal_op(sig.addr, *value, SignalOp(*op), int(*pe), 0);
    Py_RETURN_NONE;
  });
}

constexpr int kPollsHoldingGil = 1024;  // a few microseconds

// (hot, signal, cmp, value, stream) -> the value seen. Releases the GIL only to wait.
PyObject* hot_signal_wait_until(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  UNISHMEM_HOT_ARGS(5)
  View sig;
  const auto cmp = small_int(args[2], 6, h.cmp_enum.ptr());
  const auto value = u64_of(args[3]);
  if (!cmp || !value) return miss();
  if (Found f = signal_of(h, args[1], sig); f != Found::hit) return result(f);
  return fast([&] {
    // An answer on its way (a ping-pong's) comes within a few hundred polls: catching it with the
    // GIL held saves releasing and taking back the GIL, which costs more than such a wait.
    std::optional<std::uint64_t> seen;
    for (int i = 0; i < kPollsHoldingGil && !seen; ++i) seen = h.backend->signal_ready(sig.addr, Cmp(*cmp), *value);
    if (!seen) {
      py::gil_scoped_release nogil;
      seen = h.backend->signal_wait_until(sig.addr, Cmp(*cmp), *value, 0);
    }
    return PyLong_FromUnsignedLongLong(*seen);
  });
}

// (hot, stream): barrier_all and sync_all on the default stream have nothing to check.
template <bool complete>
PyObject* hot_world_barrier(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  UNISHMEM_HOT_ARGS(2)
  return fast([&] {
    {
      py::gil_scoped_release nogil;
      complete ? h.backend->barrier(kTeamWorld, 0) : h.backend->sync(kTeamWorld, 0);
    }
    Py_RETURN_NONE;
  });
}

#undef UNISHMEM_HOT_ARGS

// NOTE [hot methods]: even a call of the Runtime's Python method that only tries its hot call
// costs about as much again as the hot call (the frame, its defaults, two attribute reads). So a
// CPU Runtime's instance holds, under each method's name, a HotMethod: a C callable that takes
// the method's own arguments, supplies its trailing defaults, passes them to the hot call, and
// calls the method itself (`fallback`, the full checks) on a miss and whenever keywords or an
// unusual number of arguments are given. The Python method stays the one definition of the call.
using FastFunction = PyObject* (*)(PyObject*, PyObject* const*, Py_ssize_t);  // a METH_FASTCALL function

struct HotMethod {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  FastFunction hot_call;  // (hot, the method's arguments..., stream)
  PyObject* hot;             // HotPath.address
  PyObject* fallback;        // the Runtime's bound method
  PyObject* names;           // a tuple of the method's parameter names (interned), self excluded
  PyObject* defaults;        // a tuple: the values of its last len(defaults) parameters
  Py_ssize_t n_params;       // len(names)
};

constexpr Py_ssize_t kMaxHotParams = 8;

PyObject* hot_method_call(PyObject* self, PyObject* const* args, std::size_t nargsf, PyObject* kwnames) {
  auto* m = reinterpret_cast<HotMethod*>(self);
  if (!m->fallback) return PyErr_Format(PyExc_ReferenceError, "a Runtime method called while its Runtime is collected");
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), n_kw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  const Py_ssize_t n_required = m->n_params - PyTuple_GET_SIZE(m->defaults);
  PyObject* full[1 + kMaxHotParams] = {m->hot};
  bool ok = nargs <= m->n_params;
  for (Py_ssize_t i = 0; ok && i < nargs; ++i) full[1 + i] = args[i];
  for (Py_ssize_t k = 0; ok && k < n_kw; ++k) {  // names are interned: identity finds them
    Py_ssize_t i = nargs;
    while (i < m->n_params && PyTuple_GET_ITEM(m->names, i) != PyTuple_GET_ITEM(kwnames, k)) ++i;
    ok = i < m->n_params && !full[1 + i];
    if (ok) full[1 + i] = args[nargs + k];
  }
  for (Py_ssize_t i = nargs; ok && i < m->n_params; ++i)
    if (!full[1 + i]) {
      ok = i >= n_required;
      if (ok) full[1 + i] = PyTuple_GET_ITEM(m->defaults, i - n_required);
    }
  if (ok) {  // else: the method says what is wrong with the arguments
    PyObject* result = m->hot_call(nullptr, full, 1 + m->n_params);
    if (result != Py_NotImplemented) return result;
    Py_DECREF(result);
  }
  return PyObject_Vectorcall(m->fallback, args, nargsf, kwnames);
}

int hot_method_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* m = reinterpret_cast<HotMethod*>(self);
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(m->fallback);  // a bound method of the Runtime that holds this object: a cycle
  Py_VISIT(m->hot);
  Py_VISIT(m->names);
  Py_VISIT(m->defaults);
  return 0;
}

int hot_method_clear(PyObject* self) {
  auto* m = reinterpret_cast<HotMethod*>(self);
  Py_CLEAR(m->fallback);
  Py_CLEAR(m->hot);
  Py_CLEAR(m->names);
  Py_CLEAR(m->defaults);
  return 0;
}

void hot_method_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  hot_method_clear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyObject* hot_method_wrapped(PyObject* self, void*) {  // what inspect.signature() and help() read
  PyObject* fallback = reinterpret_cast<HotMethod*>(self)->fallback;
  if (!fallback) Py_RETURN_NONE;
  return Py_NewRef(fallback);
}

PyObject* hot_method_doc(PyObject* self, void*) {
  PyObject* fallback = reinterpret_cast<HotMethod*>(self)->fallback;
  if (!fallback) Py_RETURN_NONE;
  return PyObject_GetAttrString(fallback, "__doc__");
}

PyMemberDef hot_method_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(HotMethod, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};
PyGetSetDef hot_method_getset[] = {{"__wrapped__", hot_method_wrapped, nullptr, nullptr, nullptr},
                                   {"__doc__", hot_method_doc, nullptr, nullptr, nullptr},
                                   {nullptr, nullptr, nullptr, nullptr, nullptr}};
PyType_Slot hot_method_slots[] = {{Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
                                  {Py_tp_traverse, reinterpret_cast<void*>(hot_method_traverse)},
                                  {Py_tp_clear, reinterpret_cast<void*>(hot_method_clear)},
                                  {Py_tp_dealloc, reinterpret_cast<void*>(hot_method_dealloc)},
                                  {Py_tp_members, hot_method_members},
                                  {Py_tp_getset, hot_method_getset},
                                  {0, nullptr}};
#define UNISHMEM_STRING(x) #x
#define UNISHMEM_QUALIFIED(module) "unishmem." UNISHMEM_STRING(module) ".HotMethod"
PyType_Spec hot_method_spec = {UNISHMEM_QUALIFIED(UNISHMEM_MODULE_NAME), sizeof(HotMethod), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
                               hot_method_slots};
#undef UNISHMEM_QUALIFIED
#undef UNISHMEM_STRING
PyTypeObject* hot_method_type;

FastFunction hot_call_named(PyObject* name);  // the hot_* function of that name, or null with an error

// make_hot_method(name, hot, fallback, names, defaults): a HotMethod calling hot_<name>
// (NOTE [hot methods]).
PyObject* make_hot_method(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5 || !PyTuple_CheckExact(args[3]) || !PyTuple_CheckExact(args[4])) {
    PyErr_SetString(PyExc_TypeError, "make_hot_method(name, hot, fallback, names: tuple, defaults: tuple)");
    return nullptr;
  }
  const FastFunction hot_call = hot_call_named(args[0]);
  if (!hot_call) return nullptr;
  const Py_ssize_t n_params = PyTuple_GET_SIZE(args[3]);
  if (n_params < PyTuple_GET_SIZE(args[4]) || n_params > kMaxHotParams) {
    PyErr_Format(PyExc_ValueError, "make_hot_method: %zd parameters (at most %zd, and no fewer than the defaults)",
                 n_params, kMaxHotParams);
    return nullptr;
  }
  py::tuple names(n_params);
  for (Py_ssize_t i = 0; i < n_params; ++i) {
    PyObject* name = PyTuple_GET_ITEM(args[3], i);
    if (!PyUnicode_CheckExact(name)) {
      PyErr_SetString(PyExc_TypeError, "make_hot_method: parameter names must be str");
      return nullptr;
    }
    Py_INCREF(name);
    PyUnicode_InternInPlace(&name);  // a call's keyword names are interned: compared by identity
    PyTuple_SET_ITEM(names.ptr(), i, name);
  }
  auto* m = PyObject_GC_New(HotMethod, hot_method_type);
  if (!m) return nullptr;
  m->vectorcall = hot_method_call;
  m->hot_call = hot_call;
  m->hot = Py_NewRef(args[1]);
  m->fallback = Py_NewRef(args[2]);
  m->names = names.release().ptr();
  m->defaults = Py_NewRef(args[4]);
  m->n_params = n_params;
  PyObject_GC_Track(m);
  return reinterpret_cast<PyObject*>(m);
}

template <PyObject* (*F)(PyObject*, PyObject* const*, Py_ssize_t)>
constexpr PyMethodDef method(const char* name) {
  return {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(F)), METH_FASTCALL, nullptr};
}

PyMethodDef fast_calls[] = {
    method<fast_copy<true>>("fast_put"),
    method<fast_copy<false>>("fast_get"),
    method<fast_put_signal>("fast_put_signal"),
    method<fast_signal_op>("fast_signal_op"),
    method<fast_signal_wait_until>("fast_signal_wait_until"),
    method<hot_copy<true>>("hot_put"),
    method<hot_copy<false>>("hot_get"),
    method<hot_put_signal>("hot_put_signal"),
    method<hot_signal_op>("hot_signal_op"),
    method<hot_signal_wait_until>("hot_signal_wait_until"),
    method<hot_world_barrier<true>>("hot_barrier_all"),
    method<hot_world_barrier<false>>("hot_sync_all"),
    method<make_hot_method>("make_hot_method"),
    {nullptr, nullptr, 0, nullptr}};

FastFunction hot_call_named(PyObject* name) {
  const char* wanted = PyUnicode_AsUTF8(name);
  if (!wanted) return nullptr;
  for (const PyMethodDef* d = fast_calls; d->ml_name; ++d)
    if (std::string_view(d->ml_name) == std::string("hot_") + wanted)
      return reinterpret_cast<FastFunction>(reinterpret_cast<void (*)()>(d->ml_meth));
  PyErr_Format(PyExc_ValueError, "make_hot_method: no hot call hot_%s", wanted);
  return nullptr;
}

}  // namespace

void bind_fast_calls(py::module_& m) {
  if (PyModule_AddFunctions(m.ptr(), fast_calls) != 0) throw py::error_already_set();
  hot_method_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&hot_method_spec));  // kept for the life of the process
  if (!hot_method_type) throw py::error_already_set();
  py::class_<HotPath>(m, "HotPath", py::module_local())
      .def(py::init([](std::uintptr_t backend, int n_pes, py::object torch, py::dict itemsizes) -> HotPath* {
             py::object tensor = torch.attr("Tensor"), base = torch.attr("_C").attr("TensorBase");
             // Called as C descriptors: they must be torch's own methods and properties.
             const std::pair<const char*, PyTypeObject*> descriptors[] = {
                 {"data_ptr", &PyMethodDescr_Type},       {"is_contiguous", &PyMethodDescr_Type},
                 {"untyped_storage", &PyMethodDescr_Type}, {"storage_offset", &PyMethodDescr_Type},
                 {"_version", &PyGetSetDescr_Type},       {"nbytes", &PyGetSetDescr_Type},
                 {"dtype", &PyGetSetDescr_Type},          {"is_cpu", &PyGetSetDescr_Type}};
             for (auto [name, type] : descriptors)
               if (!PyObject_TypeCheck(base.attr(name).ptr(), type))
                 throw Error(ErrorKind::generic, std::string("torch.Tensor.") + name + " is not torch's C descriptor");
             auto* h = new HotPath{reinterpret_cast<Backend*>(backend),
                                   n_pes,
                                   -1,
                                   torch.attr("uint64"),
                                   py::module_::import("unishmem.enums").attr("SIGNAL"),
                                   py::module_::import("unishmem.enums").attr("CMP"),
                                   tensor,
                                   base.attr("data_ptr"),
                                   base.attr("_version"),
                                   base.attr("nbytes"),
                                   base.attr("dtype"),
                                   base.attr("is_contiguous"),
                                   base.attr("is_cpu"),
                                   base.attr("untyped_storage"),
                                   base.attr("storage_offset")};
             for (auto [dtype, size] : itemsizes)  // torch's dtypes live as long as torch: borrowed
               h->itemsizes.emplace_back(dtype.ptr(), size.cast<std::uint64_t>());
             return h;
           }),
           py::arg("backend"), py::arg("n_pes"), py::arg("torch"), py::arg("itemsizes"))
      .def_readwrite("epoch", &HotPath::epoch)
      .def("remember", &remember, py::arg("tensor"), py::arg("address"), py::arg("nbytes"), py::arg("symmetric"),
           "NOTE [hot calls]: trust what the full checks found for this tensor in this role.")
      .def(
          "add_allocation",
          [](HotPath& h, py::handle storage, std::uint64_t address, std::uint64_t nbytes) {
            h.allocations.add(storage.ptr(), address, nbytes);
          },
          py::arg("storage"), py::arg("address"), py::arg("nbytes"),
          "NOTE [view checks]: the storage of a new live allocation, its first byte and size.")
      .def(
          "drop_allocation", [](HotPath& h, std::uint64_t address) { h.allocations.drop(address); },
          py::arg("address"), "NOTE [view checks]: the allocation at `address` was freed.")
      .def("drop_allocations", [](HotPath& h) { h.allocations.clear(); }, "At finalize: none is live.")
      .def_property_readonly("entries", [](HotPath& h) { return h.entries.size(); })
      .def_property_readonly("allocations", [](HotPath& h) { return h.allocations.size(); })
      .def_property_readonly("address", [](HotPath& h) { return reinterpret_cast<std::uintptr_t>(&h); });
}

}  // namespace unishmem
