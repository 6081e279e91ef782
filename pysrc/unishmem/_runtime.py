"""Runtime: the public host API (Team: _team.py). Every argument check is made here or in _checks.py,
once, for every backend; the native backends below trust what they are given."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import torch

from . import _active, _config, _races
from ._checks import (
    address_of,
    allocation_of,
    as_index,
    check_fill,
    check_pe,
    cmp_code,
    contiguous_strides,
    disjoint,
    dtype_code_of,
    from_bits,
    reduce_codes,
    signal_code,
    to_bits,
)
from ._dtypes import ATOMIC_DTYPES, DTYPE_CODES, WAIT_DTYPES
from ._heap import Allocation, SymmetricHeap, move_off_heap
from ._hot import HotPath
from ._team import Team
from ._version import __version__
from ._workspaces import WorkspaceStore
from .enums import ATOMIC_OPS, CMP, SIGNAL
from .errors import NotInitializedError, NotSymmetricError, UnishmemWarning
from .hang import Diagnostics

if TYPE_CHECKING:
    from .backends import Opened
    from .bootstrap import Bootstrap

Shape = int | Sequence[int]  # a tensor shape as torch takes it

# NOTE [hot paths]: put, get, the signal calls and the collectives are called in tight loops
# (`unishmem bench` times them), so their checks (_checks.py) avoid building enums and storage
# objects where a cheaper test says the same.
_SET = int(SIGNAL.SET)
_U64 = 2**64


def _barrier(run: Callable):
    """run(), an allocation or free: a barrier of the world (NOTE [happens-before]), so that what was done
    with freed bytes comes before what is done with them once allocated again."""
    races = _races.checker()
    return run() if races is None else races.barrier(0, run, quiet=True, every=True)


def _completed() -> None:
    """After a host quiet or fence: every put this PE issued is complete."""
    races = _races.checker()
    if races is not None:
        races.complete(races.current(), every=True)


class Runtime:
    """The process's handle on the symmetric heap and its peers. Made by unishmem.init().

    NOTE [runtime helpers]: the runtime makes its helpers, each the owner of its state, and the
    package's other modules use them through their methods: `native` (the backend), `heap`
    (SymmetricHeap, _heap.py), `hot_path` (HotPath, _hot.py), `workspaces` (WorkspaceStore,
    _workspaces.py) and `diagnostics` (hang.Diagnostics). Nothing outside this module reads or assigns
    a Runtime's private attributes, nor outside _team.py a Team's (tests/test_layout.py checks)."""

    def __init__(self, opened: Opened, bootstrap: Bootstrap, hang_dir: str | None = None):
        native = opened.native
        self.native = native
        self.backend: str = opened.backend.name
        self.device: torch.device = opened.device
        self._on_cpu = self.device.type == "cpu"
        self.my_pe: int = native.my_pe
        self.n_pes: int = native.n_pes
        self.launcher = bootstrap.placement.launcher
        self.bootstrap = bootstrap
        self.version: dict[str, Any] = {
            "unishmem": __version__,
            "backend": self.backend,
            "torch": torch.__version__,
            **opened.version,
        }
        self.heap_of = opened.heap_of
        self._stream_of = opened.stream_of
        # Vendor device state for a freshly loaded GPU module (handle as int); None on host.
        # The kernel-load hook (triton_support.py) calls it.
        self.module_init = opened.module_init
        self._atomic_call = opened.atomic or native.atomic
        # NOTE [hang report]: the watchdog (where UNISHMEM_HANG_TIMEOUT is set) and the debug wait table
        self.diagnostics = Diagnostics(self, hang_dir)
        self.heap_base = native.heap_base
        self.heap_size = native.heap_size
        self.hot_path = HotPath(native, self._on_cpu)  # NOTE [hot paths] (_hot.py)
        if _config.get("UNISHMEM_RACE_CHECK") is None:  # checked calls go through the methods (NOTE [race check])
            self.hot_path.install(self, Runtime)
        self._typed: dict[tuple[int, torch.dtype], torch.Tensor] = {}
        self.heap = SymmetricHeap(self.heap_base, self.heap_size)  # its allocations (NOTE [address checks])
        self._finalized = False
        self.workspaces = WorkspaceStore(self)  # unishmem.kernels' symmetric buffers (NOTE [workspaces])
        self.team_world = Team(self, 0, "world")
        self.team_node = Team(self, 1, "node")
        # On several hosts (or simulated nodes) each node team is smaller than the world on every PE
        # alike, and init is the last point collective over the world before kernels may run on it.
        if self.team_node.n_pes < self.n_pes:
            self.workspaces.split(self.team_world, [(self.team_node, True)], _config.team_arena(self.heap_size))
        _races.start(self, opened.segments)  # where UNISHMEM_RACE_CHECK is set (NOTE [race check])

    def __repr__(self) -> str:
        return (
            f"<unishmem.Runtime backend={self.backend} pe={self.my_pe}/{self.n_pes} device={self.device} "
            f"heap={self.heap_size} bytes>"
        )

    # ---- lifetime ---------------------------------------------------------------------------

    def __enter__(self) -> Runtime:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.finalize()
        else:
            self._teardown(collective=False)  # peers learn of the error instead of waiting for us

    def finalize(self) -> None:
        """Collective. Frees whatever is still allocated (warning about it) and leaves the job."""
        if self._finalized:
            return
        self.free_workspaces()
        self.workspaces.free_arenas()
        self._teardown(collective=True)

    def free_workspaces(self) -> None:
        """Collective: frees the symmetric workspaces unishmem.kernels made, empties the team
        arenas and frees those of teams destroyed everywhere (NOTE [workspaces])."""
        self.check_active()
        self.workspaces.free_workspaces()

    def _teardown(self, collective: bool) -> None:
        live = self.heap.live()
        if live and collective:
            warnings.warn(
                f"PE {self.my_pe}: finalize freed {len(live)} symmetric allocation(s) still live "
                f"({sum(a.nbytes for a in live)} bytes); free them with rt.free()",
                UnishmemWarning,
                stacklevel=3,
            )
        for a in live:
            a.live = False
        self._finalized = True
        self.hot_path.end()
        _races.stop()
        _active.forget(self)
        try:
            (self.native.finalize if collective else self.native.abandon)()
        finally:
            self.diagnostics.remove_hang_dir()
            self.bootstrap.close()

    @property
    def finalized(self) -> bool:
        """Whether finalize() (or leaving after an error) has ended this runtime."""
        return self._finalized

    def check_active(self) -> None:
        """NotInitializedError once this runtime is finalized."""
        if self._finalized:
            raise NotInitializedError("this runtime was finalized; call unishmem.init() for a new one")

    # ---- symmetric memory -------------------------------------------------------------------

    def _typed_heap(self, pe: int, dtype: torch.dtype) -> torch.Tensor:
        key = (pe, dtype)
        if key not in self._typed:
            self._typed[key] = self.heap_of(pe).view(dtype)
        return self._typed[key]

    # Allocation and free are collective over the world: their local checks run inside
    # _checked, so a PE whose arguments fail still enters the call (see _collective).

    def empty(self, shape: Shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Collective: an uninitialised tensor in the symmetric heap."""
        self.check_active()
        shape, nbytes = self.checked(0, lambda: allocation_of(shape, dtype))
        return self._allocate(shape, dtype, nbytes)

    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype, nbytes: int) -> torch.Tensor:
        offset = _barrier(lambda: self.native.malloc(nbytes, DTYPE_CODES[dtype])) - self.heap_base
        alloc = self.heap.add(offset, nbytes, dtype)
        # NOTE [allocation identity]: each allocation gets a storage of its own over its bytes (the
        # DLPack view of a slice of the heap, at least a byte: the allocator gives 0 bytes some) and
        # that storage carries its Allocation. Every tensor sharing it (views, dtype views,
        # detach(), .data) is then known as this allocation's, also once it is freed and its bytes
        # belong to another: _symmetric and rt.free ask the storage, in constant time. On a CPU
        # runtime rt.free moves that storage off the heap (NOTE [freed memory], _heap.py).
        with torch.inference_mode(False):  # the heap never becomes an inference tensor
            storage = torch.from_dlpack(self.heap_of(self.my_pe)[offset : offset + max(nbytes, 1)]).untyped_storage()
            t = torch.empty(0, dtype=dtype, device=self.device).set_(storage, 0, shape, contiguous_strides(shape))
        storage._unishmem_allocation = alloc
        alloc.storage = weakref.ref(storage)  # weak: the storage holds its allocation
        self.hot_path.add_allocation(storage, self.heap_base + offset, nbytes)  # NOTE [view checks]
        return t

    def _filled(self, shape, value, dtype, check_value: bool = True) -> torch.Tensor:
        self.check_active()

        def check():
            args = allocation_of(shape, dtype)
            if check_value:
                check_fill(value, dtype)
            return args

        dims, nbytes = self.checked(0, check)
        t = self._allocate(dims, dtype, nbytes)
        t.fill_(value)
        # No peer may write into it before every PE has filled its copy (on the current stream).
        self.native.sync(0, self._stream_of(None))
        return t

    def zeros(self, shape: Shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self._filled(shape, 0, dtype, check_value=False)

    def full(self, shape: Shape, value: bool | int | float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self._filled(shape, value, dtype)

    def empty_like(self, other: torch.Tensor) -> torch.Tensor:
        return self.empty(tuple(other.shape), other.dtype)

    def signals(self, n: int) -> torch.Tensor:
        """Collective: n zeroed uint64 signal words."""
        self.check_active()

        def check():
            count = as_index(n, "signals(n): n")
            if count < 1:
                raise ValueError(f"signals(n): n={count} must be >= 1")
            return count

        return self._filled((self.checked(0, check),), 0, torch.uint64, check_value=False)

    def free(self, t: torch.Tensor) -> None:
        """Collective and explicit: nothing is freed by garbage collection."""
        self.check_active()
        alloc = self.checked(0, lambda: self._allocation_of(t))
        _barrier(lambda: self.native.free(self.heap_base + alloc.offset))
        self.heap.remove(alloc)
        self.hot_path.drop_allocation(self.heap_base + alloc.offset)  # NOTE [view checks]: its views miss
        storage = alloc.storage()
        if self._on_cpu and storage is not None:  # None: no tensor over it is left
            move_off_heap(storage)  # NOTE [freed memory]: torch's writes through its tensors miss the heap

    def _allocation_of(self, t) -> Allocation:
        """The live allocation that `t` starts, for rt.free."""
        addr, nbytes = self._local(t, "tensor to free", contiguous=False)
        alloc = getattr(t.untyped_storage(), "_unishmem_allocation", None)  # NOTE [allocation identity]
        if alloc is not None and not alloc.live:  # its data_ptr() may lie off the heap (NOTE [freed memory])
            raise ValueError(
                f"rt.free: the tensor at heap offset {alloc.offset_of(t)} is not a live symmetric allocation: "
                "it was freed already (its bytes may belong to another allocation now)"
            )
        if not self.heap.holds(addr, nbytes):
            raise NotSymmetricError(f"rt.free: the tensor at {addr:#x} is not in the symmetric heap")
        offset = addr - self.heap_base
        if alloc is None:  # a tensor the runtime did not make: by its address
            alloc = self.heap.at(offset)
        if alloc is None or alloc.offset != offset:
            raise ValueError(
                f"rt.free: the tensor at heap offset {offset} is not a live symmetric "
                "allocation (freed already, or a view that does not start one)"
            )
        return alloc

    def is_symmetric(self, t: torch.Tensor) -> bool:
        """True for any view into this PE's symmetric heap; False for one of a freed allocation."""
        if not isinstance(t, torch.Tensor) or t.device != self.device or self._finalized:
            return False
        own = getattr(t.untyped_storage(), "_unishmem_allocation", None)  # NOTE [allocation identity]
        return own.live if own is not None else self.heap.holds(address_of(t), 0)

    def peer(self, t: torch.Tensor, pe: int) -> torch.Tensor | None:
        """PE `pe`'s copy of symmetric tensor `t`, for direct loads and stores; None if unreachable."""
        self.check_active()
        self._symmetric(t, "tensor", contiguous=False)
        check_pe(pe, self.n_pes)
        if self.native.peer_ptr(address_of(t), pe) == 0:
            return None
        offset = address_of(t) - self.heap_base
        return self._typed_heap(pe, t.dtype).as_strided(t.shape, t.stride(), offset // t.element_size())

    # ---- argument checks ----------------------------------------------------------------------

    def _local(self, t, name: str, contiguous: bool = True) -> tuple[int, int]:
        if type(t) is not torch.Tensor and not isinstance(t, torch.Tensor):  # the first test is the cheaper
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_cpu if self._on_cpu else t.device != self.device:  # is_cpu: the cheaper test (hot paths)
            raise ValueError(f"{name} is on {t.device}, but this runtime's device is {self.device}")
        if contiguous and not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (shape {tuple(t.shape)}, strides {t.stride()})")
        return t.data_ptr() or address_of(t), t.nbytes

    def _symmetric(self, t, name: str, contiguous: bool = True) -> tuple[int, int]:
        addr, nbytes = self._local(t, name, contiguous)
        own = getattr(t.untyped_storage(), "_unishmem_allocation", None)  # NOTE [allocation identity]
        if own is not None:
            if not own.live:  # its data_ptr() may lie off the heap (NOTE [freed memory])
                raise NotSymmetricError(
                    f"{name} (heap offset {own.offset_of(t)}, {nbytes} bytes) was freed (use after free; its bytes "
                    "may belong to another allocation now): allocate it again with rt.empty()"
                )
            offset = addr - self.heap_base
            if own.offset <= offset and offset + nbytes <= own.offset + own.nbytes:
                return addr, nbytes  # fast path: inside the live allocation it was made by
        return self.heap.check_range(addr, nbytes, name), nbytes

    def _signal(self, sig, name: str = "signal") -> int:
        addr, nbytes = self._symmetric(sig, name)
        if nbytes != 8 or sig.dtype is not torch.uint64:  # 8 bytes of uint64: one element
            raise TypeError(
                f"{name} must be a 1-element torch.uint64 view of rt.signals(), got "
                f"{sig.dtype} with {sig.numel()} elements"
            )
        return self.heap.check_aligned(addr, 8, name)

    def _word(self, t, name: str, dtypes) -> int:
        addr, _ = self._symmetric(t, name)
        if t.dtype not in dtypes or t.numel() != 1:
            raise TypeError(
                f"{name} must be a 1-element symmetric tensor of {', '.join(map(str, dtypes))}; got "
                f"{t.dtype} with {t.numel()} elements"
            )
        return self.heap.check_aligned(addr, t.element_size(), name)

    def kernel_teams(self) -> Iterator[Team]:
        """The world, the node team and every live team with a team arena (NOTE [workspaces]): the
        teams unishmem.kernels can run on."""
        yield self.team_world
        yield self.team_node
        yield from self.workspaces.arena_teams()

    def checked_team(self, team: Team | None) -> Team:
        """The Team a call names: `team`, checked, or the world for None."""
        if team is None:
            return self.team_world
        if not isinstance(team, Team) or team.runtime is not self:
            raise TypeError(f"team must be a unishmem.Team of this runtime or None, got {team!r}")
        team.check()
        return team

    @staticmethod
    def _same_kind(dest, source, what: str, dest_elems: int | None = None):
        """dest and source agree in dtype, and dest has `dest_elems` elements (default: as many as source).
        Hot paths call it only once equal byte counts and dtypes have failed to show that, for its message."""
        if dest.dtype != source.dtype:
            raise TypeError(f"{what}: dest is {dest.dtype} but source is {source.dtype}")
        expected = source.numel() if dest_elems is None else dest_elems
        if dest.numel() != expected:
            raise ValueError(
                f"{what}: dest has {dest.numel()} elements, expected {expected} for a source of {source.numel()}"
            )

    # ---- host-initiated communication -------------------------------------------------------

    # NOTE [hot paths]: on a CPU Runtime, a call of the point-to-point methods below first tries
    # its hot call (NOTE [hot calls] and [hot methods], fast_calls.cpp), which trusts tensors these
    # checks passed before; the methods themselves run only when it cannot. They check
    # everything, inlining the cheap cases of _check_active, _check_pe, _bits, _signal_code and
    # _stream_of (a call each costs about as much as the test) and falling back to those
    # functions, which name what is wrong; then they remember the tensors that passed. On the
    # host backend streams do not exist: _stream_of is `lambda stream: 0` there.

    # put, get and put_signal repeat their checks on purpose: a shared helper would cost each call a frame
    # and its arguments (NOTE [hot paths]), and the three differ in which tensor is symmetric.
    def put(self, dest: torch.Tensor, source: torch.Tensor, pe: int, stream: torch.cuda.Stream | None = None) -> None:
        """Copy local `source` into PE `pe`'s `dest` (symmetric)."""
        if self._finalized:
            self.check_active()
        hot = self.hot_path
        d, n = self._symmetric(dest, "dest")
        s, m = self._local(source, "source")
        if n != m or dest.dtype is not source.dtype:
            self._same_kind(dest, source, "put")
        if type(pe) is not int or not 0 <= pe < self.n_pes:
            pe = check_pe(pe, self.n_pes)
        races = _races.checker()  # NOTE [race check]: None unless UNISHMEM_RACE_CHECK is set
        if races is not None:
            races.put(d, s, n, pe)
        hot.fast_put(hot.backend, d, s, n, pe, 0 if self._on_cpu else self._stream_of(stream))
        hot.remember(dest, d, n, True)
        hot.remember(source, s, n, False)

    def get(self, dest: torch.Tensor, source: torch.Tensor, pe: int, stream: torch.cuda.Stream | None = None) -> None:
        """Copy PE `pe`'s `source` (symmetric) into local `dest`."""
        if self._finalized:
            self.check_active()
        hot = self.hot_path
        d, n = self._local(dest, "dest")
        s, m = self._symmetric(source, "source")
        if n != m or dest.dtype is not source.dtype:
            self._same_kind(dest, source, "get")
        if type(pe) is not int or not 0 <= pe < self.n_pes:
            pe = check_pe(pe, self.n_pes)
        races = _races.checker()
        if races is not None:
            races.get(d, s, n, pe)
        hot.fast_get(hot.backend, d, s, n, pe, 0 if self._on_cpu else self._stream_of(stream))
        hot.remember(dest, d, n, False)
        hot.remember(source, s, n, True)

    def put_signal(
        self,
        dest: torch.Tensor,
        source: torch.Tensor,
        signal: torch.Tensor,
        value: int,
        pe: int,
        op: SIGNAL | int = SIGNAL.SET,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        """put, then update PE `pe`'s `signal` once the data has arrived."""
        if self._finalized:
            self.check_active()
        hot = self.hot_path
        d, n = self._symmetric(dest, "dest")
        s, m = self._local(source, "source")
        if n != m or dest.dtype is not source.dtype:
            self._same_kind(dest, source, "put_signal")
        sig = self._signal(signal)
        value, code, pe = self.signal_args(value, op, pe)
        races = _races.checker()
        if races is not None:
            races.put_signal(d, s, n, sig, pe)
        hot.fast_put_signal(hot.backend, d, s, n, sig, value, code, pe, 0 if self._on_cpu else self._stream_of(stream))
        hot.remember(dest, d, n, True)
        hot.remember(source, s, n, False)
        hot.remember(signal, sig, 8, True)

    def signal_args(self, value: int, op: SIGNAL | int, pe: int) -> tuple[int, int, int]:
        """A signal update's value bits, op code and target PE, checked."""
        if type(value) is not int or not 0 <= value < _U64:
            value = to_bits(value, torch.uint64, "value")
        code = _SET if op is SIGNAL.SET else signal_code(op)
        if type(pe) is not int or not 0 <= pe < self.n_pes:
            pe = check_pe(pe, self.n_pes)
        return value, code, pe

    def signal_op(
        self,
        signal: torch.Tensor,
        value: int,
        pe: int,
        op: SIGNAL | int = SIGNAL.SET,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        if self._finalized:
            self.check_active()
        hot = self.hot_path
        sig = self._signal(signal)
        value, code, pe = self.signal_args(value, op, pe)
        races = _races.checker()
        if races is not None:
            races.signal(sig, pe)
        hot.fast_signal_op(hot.backend, sig, value, code, pe, 0 if self._on_cpu else self._stream_of(stream))
        hot.remember(signal, sig, 8, True)

    def _signal_wait_args(self, signal, cmp, value) -> tuple[int, int, int]:
        """A signal wait's address, value bits and cmp code, checked: the one check of both waits."""
        if self._finalized:
            self.check_active()
        sig = self._signal(signal)
        if type(value) is not int or not 0 <= value < _U64:
            value = to_bits(value, torch.uint64, "value")
        return sig, value, cmp_code(cmp)

    def signal_wait_until(
        self, signal: torch.Tensor, cmp: CMP | int, value: int, stream: torch.cuda.Stream | None = None
    ) -> int:
        """Wait until the local `signal` compares true against `value`; returns the value seen."""
        hot = self.hot_path
        sig, value, code = self._signal_wait_args(signal, cmp, value)
        hot.remember(signal, sig, 8, True)  # before the wait, which may raise on a peer's failure
        seen = hot.fast_signal_wait_until(hot.backend, sig, code, value, 0 if self._on_cpu else self._stream_of(stream))
        _races.waited(sig, 8)
        return seen

    def signal_wait_until_on_stream(
        self, signal: torch.Tensor, cmp: CMP | int, value: int, stream: torch.cuda.Stream | None = None
    ) -> None:
        """Make `stream` wait until the local `signal` compares true against `value`: work enqueued
        on it afterwards runs after the wait. Returns None at once, so that a CUDA graph can hold
        it (not yet run on a GPU). The host backend has no streams (the calling thread's order is
        its stream order): there this call is the wait itself, as signal_wait_until. Built against
        rocSHMEM headers without rocshmem_signal_wait_until_on_stream, the rocshmem backend uses
        HIP's stream waits, which refuse CMP.LT, CMP.LE, CMP.NE of a nonzero value and CMP.GT
        2**64-1 (docs/backends.md)."""
        sig, value, code = self._signal_wait_args(signal, cmp, value)
        self.native.signal_wait_until_on_stream(sig, code, value, self._stream_of(stream))
        _races.waited(sig, 8)  # the host backend's is the wait itself

    def signal_fetch(self, signal: torch.Tensor) -> int:
        self.check_active()
        sig = self._signal(signal)
        seen = self.native.signal_fetch(sig)
        _races.waited(sig, 8)
        return seen

    def wait_until(self, ivar: torch.Tensor, cmp: CMP | int, value: int) -> None:
        """Wait until the local 1-element int32/int64/uint32/uint64 `ivar` compares true against `value`."""
        self.check_active()
        addr = self._word(ivar, "ivar", WAIT_DTYPES)
        self.native.wait_until(addr, DTYPE_CODES[ivar.dtype], cmp_code(cmp), to_bits(value, ivar.dtype, "value"))
        _races.waited(addr, ivar.element_size())

    def test(self, ivar: torch.Tensor, cmp: CMP | int, value: int) -> bool:
        self.check_active()
        addr = self._word(ivar, "ivar", WAIT_DTYPES)
        true = self.native.test(addr, DTYPE_CODES[ivar.dtype], cmp_code(cmp), to_bits(value, ivar.dtype, "value"))
        if true:
            _races.waited(addr, ivar.element_size())
        return true

    def _words(self, ivars, cmp, value, what: str) -> tuple[int, list[int], int, int]:
        """(address, one value's bits per word, dtype code, cmp code) for a wait on every word of
        the 1-D symmetric `ivars`; `value` is one integer for all, or one per word (the _vector forms)."""
        self.check_active()
        if ivars.dtype not in WAIT_DTYPES or ivars.dim() != 1 or ivars.numel() == 0 or not ivars.is_contiguous():
            raise TypeError(
                f"{what}: ivars must be a non-empty contiguous 1-D symmetric tensor of "
                f"{', '.join(map(str, WAIT_DTYPES))}; got {ivars.dtype} of shape {list(ivars.shape)}"
            )
        addr, _ = self._symmetric(ivars, f"{what}: ivars")
        self.heap.check_aligned(addr, ivars.element_size(), f"{what}: ivars")
        n = ivars.numel()
        values = value.tolist() if isinstance(value, torch.Tensor) else value
        if isinstance(values, (list, tuple)):
            if len(values) != n:
                raise ValueError(f"{what}: {len(values)} values for {n} words")
        else:
            values = [values] * n
        bits = [to_bits(v, ivars.dtype, f"{what}: value") for v in values]
        return addr, bits, DTYPE_CODES[ivars.dtype], cmp_code(cmp)

    def wait_until_all(self, ivars: torch.Tensor, cmp: CMP | int, value: int) -> None:
        """Wait until every word of `ivars` compares true against `value` (or its own entry of a
        sequence of values)."""
        addr, bits, code, c = self._words(ivars, cmp, value, "wait_until_all")
        size = ivars.element_size()
        for i, b in enumerate(bits):
            self.native.wait_until(addr + i * size, code, c, b)
        _races.waited(addr, size, len(bits))

    def wait_until_any(self, ivars: torch.Tensor, cmp: CMP | int, value: int) -> int:
        """Wait until some word of `ivars` compares true; returns its index."""
        addr, bits, code, c = self._words(ivars, cmp, value, "wait_until_any")
        found = self.native.wait_until_any(addr, ivars.element_size(), code, c, bits)
        _races.waited(addr + found * ivars.element_size(), ivars.element_size())
        return found

    def wait_until_some(self, ivars: torch.Tensor, cmp: CMP | int, value: int) -> list[int]:
        """Wait until at least one word of `ivars` compares true; returns the indices of all that do."""
        addr, bits, code, c = self._words(ivars, cmp, value, "wait_until_some")
        size = ivars.element_size()
        first = self.native.wait_until_any(addr, size, code, c, bits)
        found = [i for i, b in enumerate(bits) if i == first or self.native.test(addr + i * size, code, c, b)]
        for i in found:
            _races.waited(addr + i * size, size)
        return found

    def quiet(self, stream: torch.cuda.Stream | None = None) -> None:
        self.check_active()
        self.native.quiet(self._stream_of(stream))
        _completed()

    def fence(self) -> None:
        self.check_active()
        self.native.fence()
        _completed()

    def _atomic(self, op: str, dest, pe: int, value: int = 0, cond: int = 0) -> int:
        self.check_active()
        addr = self._word(dest, "dest", ATOMIC_DTYPES)
        v, c, pe = to_bits(value, dest.dtype, "value"), to_bits(cond, dest.dtype, "cond"), check_pe(pe, self.n_pes)
        races = _races.checker()
        key = races.amo(addr, dest.element_size(), pe) if races is not None else None
        out = self._atomic_call(ATOMIC_OPS[op], DTYPE_CODES[dest.dtype], addr, v, c, pe)
        if key is not None:
            races.acquire(races.current(), key)
        return from_bits(out, dest.dtype)

    def atomic_fetch(self, dest: torch.Tensor, pe: int) -> int:
        return self._atomic("fetch", dest, pe)

    def atomic_set(self, dest: torch.Tensor, value: int, pe: int) -> None:
        self._atomic("set", dest, pe, value)

    def atomic_swap(self, dest: torch.Tensor, value: int, pe: int) -> int:
        return self._atomic("swap", dest, pe, value)

    def atomic_compare_swap(self, dest: torch.Tensor, cond: int, value: int, pe: int) -> int:
        """Set PE `pe`'s `dest` to `value` if it equals `cond`; returns the old value."""
        return self._atomic("compare_swap", dest, pe, value, cond)

    def atomic_fetch_add(self, dest: torch.Tensor, value: int, pe: int) -> int:
        return self._atomic("fetch_add", dest, pe, value)

    def atomic_add(self, dest: torch.Tensor, value: int, pe: int) -> None:
        self._atomic("add", dest, pe, value)

    def atomic_fetch_inc(self, dest: torch.Tensor, pe: int) -> int:
        return self._atomic("fetch_inc", dest, pe)

    def atomic_inc(self, dest: torch.Tensor, pe: int) -> None:
        self._atomic("inc", dest, pe)

    def atomic_fetch_and(self, dest: torch.Tensor, value: int, pe: int) -> int:
        return self._atomic("fetch_and", dest, pe, value)

    def atomic_and(self, dest: torch.Tensor, value: int, pe: int) -> None:
        self._atomic("and", dest, pe, value)

    def atomic_fetch_or(self, dest: torch.Tensor, value: int, pe: int) -> int:
        return self._atomic("fetch_or", dest, pe, value)

    def atomic_or(self, dest: torch.Tensor, value: int, pe: int) -> None:
        self._atomic("or", dest, pe, value)

    def atomic_fetch_xor(self, dest: torch.Tensor, value: int, pe: int) -> int:
        return self._atomic("fetch_xor", dest, pe, value)

    def atomic_xor(self, dest: torch.Tensor, value: int, pe: int) -> None:
        self._atomic("xor", dest, pe, value)

    # ---- synchronisation and collectives ------------------------------------------------------
    # A PE whose arguments fail the checks still enters the collective, marked as rejected,
    # so that every member raises instead of waiting for it.

    def checked(self, slot: int, check: Callable[[], Any]) -> Any:
        """check()'s result; if it raises, this PE enters the collective on team `slot` as
        rejected first, so that the other members raise too and every barrier count stays equal."""
        try:
            return check()
        except (TypeError, ValueError):
            self.native.reject_collective(slot)
            raise

    def _collective(self, team, check: Callable[[Team], tuple], run: Callable, dest=None, source=None) -> None:
        """run(team's slot, *check(team)); dest and source: the collective's tensors (none: a barrier or sync)."""
        self.check_active()
        if team is None:
            team = self.team_world
        elif not isinstance(team, Team) or team.runtime is not self:
            self.native.reject_collective(self.team_world.slot)  # no team to enter: the others are likely here
            raise TypeError(f"team must be a unishmem.Team of this runtime or None, got {team!r}")
        else:
            team.check()  # a destroyed team was destroyed on every member: none is waiting in a call on it
        try:  # _checked, inline (NOTE [hot paths])
            args = check(team)
        except (TypeError, ValueError):
            self.native.reject_collective(team.slot)
            raise
        races = _races.checker()
        if races is None:
            run(team.slot, *args)
        elif dest is None:
            races.barrier(team.slot, lambda: run(team.slot, *args), quiet=run == self.native.barrier, every=True)
        else:
            call = lambda: run(team.slot, *args)  # noqa: E731
            races.collective(team.slot, call, source.data_ptr(), source.nbytes, dest.data_ptr(), dest.nbytes)

    # barrier_all and sync_all on the default stream have nothing to check: they skip _collective's
    # machinery, which costs more than the host barrier itself (about 0.3 us of 0.57 us at 2 PEs).

    def barrier_all(self, stream: torch.cuda.Stream | None = None) -> None:
        if stream is not None or self._finalized or _races.checker() is not None:
            return self.barrier(None, stream)
        self.native.barrier(self.team_world.slot, self._stream_of(None))

    def sync_all(self, stream: torch.cuda.Stream | None = None) -> None:
        if stream is not None or self._finalized or _races.checker() is not None:
            return self.sync(None, stream)
        self.native.sync(self.team_world.slot, self._stream_of(None))

    def barrier(self, team: Team | None = None, stream: torch.cuda.Stream | None = None) -> None:
        """Complete this PE's outstanding puts, then wait for every member of `team`."""
        self._collective(team, lambda t: (self._stream_of(stream),), self.native.barrier)

    def sync(self, team: Team | None = None, stream: torch.cuda.Stream | None = None) -> None:
        """Wait for every member of `team` (no completion of outstanding puts)."""
        self._collective(team, lambda t: (self._stream_of(stream),), self.native.sync)

    def _pair(self, dest, source, what: str, dest_elems: int | None = None, in_place_ok: bool = False):
        """Check a collective's symmetric dest and source; `in_place_ok`: dest may be source."""
        d, dn = self._symmetric(dest, "dest")
        s, sn = self._symmetric(source, "source")
        if dest.dtype != source.dtype or dn != (sn if dest_elems is None else dest_elems * source.element_size()):
            self._same_kind(dest, source, what, dest_elems)
        return disjoint(d, dn, s, sn, what, in_place_ok), s, sn

    def broadcast(
        self,
        dest: torch.Tensor,
        source: torch.Tensor,
        root: int,
        team: Team | None = None,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        """Copy `source` of the team's PE `root` into every member's `dest`."""

        def check(t):
            d, s, n = self._pair(dest, source, "broadcast", in_place_ok=True)
            return d, s, n, dtype_code_of(source, "broadcast"), check_pe(root, t.n_pes, "root"), self._stream_of(stream)

        self._collective(team, check, self.native.broadcast, dest, source)

    def fcollect(
        self,
        dest: torch.Tensor,
        source: torch.Tensor,
        team: Team | None = None,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        """All-gather: `dest` receives the team's `source` blocks in team order."""

        def check(t):
            d, s, n = self._pair(dest, source, "fcollect", source.numel() * t.n_pes)
            return d, s, n, dtype_code_of(source, "fcollect"), self._stream_of(stream)

        self._collective(team, check, self.native.fcollect, dest, source)

    def alltoall(
        self,
        dest: torch.Tensor,
        source: torch.Tensor,
        team: Team | None = None,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        """Block j of this PE's `source` goes to block my_pe of member j's `dest`."""

        def check(t):
            d, s, n = self._pair(dest, source, "alltoall")
            if source.numel() % t.n_pes:
                raise ValueError(f"alltoall: {source.numel()} elements do not split into {t.n_pes} equal blocks")
            return d, s, n // t.n_pes, dtype_code_of(source, "alltoall"), self._stream_of(stream)

        self._collective(team, check, self.native.alltoall, dest, source)

    def _reduction(self, dest, source, op, what: str, stream):
        def check(t):
            dtype_code, op_code = reduce_codes(op, source.dtype, what)
            if what == "reducescatter" and source.numel() % t.n_pes:
                raise ValueError(f"reducescatter: {source.numel()} elements do not split into {t.n_pes} blocks")
            scatter = what == "reducescatter"
            d, s, _ = self._pair(
                dest, source, what, source.numel() // t.n_pes if scatter else None, in_place_ok=not scatter
            )
            return d, s, dest.numel(), dtype_code, op_code, self._stream_of(stream)

        return check

    def reduce(
        self,
        dest: torch.Tensor,
        source: torch.Tensor,
        op: str = "sum",
        team: Team | None = None,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        """All-reduce of `source` into `dest` over `team` (dest may be source)."""
        self._collective(team, self._reduction(dest, source, op, "reduce", stream), self.native.reduce, dest, source)

    def reducescatter(
        self,
        dest: torch.Tensor,
        source: torch.Tensor,
        op: str = "sum",
        team: Team | None = None,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        """Reduce `source` over `team`; member i receives block i of the result in `dest`."""
        self._collective(
            team, self._reduction(dest, source, op, "reducescatter", stream), self.native.reducescatter, dest, source
        )
