"""Core: a runtime's private wiring (NOTE [private core]). The user's object is the Runtime
(_runtime.py), which makes one Core and answers the public API over it."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from . import _config, _races
from ._checks import (
    Shape,
    address_of,
    allocation_of,
    as_index,
    check_fill,
    check_pe,
    contiguous_strides,
    disjoint,
    dtype_code_of,
    reduce_codes,
    signal_code,
    to_bits,
)
from ._dtypes import DTYPE_CODES
from ._heap import Allocation, SymmetricHeap, move_off_heap
from ._hot import HotPath
from ._team import Team
from ._version import __version__
from ._workspaces import WorkspaceStore
from .enums import SIGNAL
from .errors import NotInitializedError, NotSymmetricError, UnishmemWarning
from .hang import Diagnostics

if TYPE_CHECKING:
    from .backends import Opened
    from .bootstrap import Bootstrap

_SET = int(SIGNAL.SET)
_U64 = 2**64


def _barrier(run: Callable):
    """run(), an allocation or free: a barrier of the world (NOTE [happens-before]), so that what was done
    with freed bytes comes before what is done with them once allocated again."""
    races = _races.checker()
    return run() if races is None else races.barrier(0, run, quiet=True, every=True)


class Core:
    """NOTE [private core]: what a runtime is made of, each part the owner of its state: `native` (the
    backend, which trusts its input), `heap` (SymmetricHeap, _heap.py), `hot_path` (HotPath, _hot.py),
    `workspaces` (WorkspaceStore, _workspaces.py), `diagnostics` (hang.Diagnostics), the bootstrap,
    the vendor's module init, the stream lookup, the teams, the argument checks the host API and the
    package share, allocation and free, and the collectives with their rejection protocol
    (`reject_on_error`). The Runtime, Team, the helpers, the device library's host side and the
    kernels are handed the Core (the kernels through _active.core()); none calls the user's API, and
    the Core never sees its Runtime. Nothing outside this module reads or assigns a Core's private
    attributes (tests/test_layout.py checks)."""

    def __init__(
        self, opened: Opened, bootstrap: Bootstrap, hang_dir: str | None, on_end: Callable[[Core], None]
    ) -> None:
        native = opened.native
        self.native = native
        self.backend: str = opened.backend.name
        self.device: torch.device = opened.device
        self.on_cpu = self.device.type == "cpu"
        self.my_pe: int = native.my_pe
        self.n_pes: int = native.n_pes
        self.launcher: str = bootstrap.placement.launcher
        self.bootstrap = bootstrap
        self.version: dict[str, Any] = {
            "unishmem": __version__,
            "backend": self.backend,
            "torch": torch.__version__,
            **opened.version,
        }
        self.heap_of = opened.heap_of
        self.stream_of = opened.stream_of
        # Vendor device state for a freshly loaded GPU module (handle as int); None on host.
        # The kernel-load hook (triton_support.py) calls it.
        self.module_init = opened.module_init
        self.atomic = opened.atomic or native.atomic
        self._on_end = on_end  # told once this core is finalized (_active.forget)
        self.finalized = False
        # NOTE [hang report]: the watchdog (where UNISHMEM_HANG_TIMEOUT is set) and the debug wait table
        self.diagnostics = Diagnostics(self, hang_dir)
        self.heap_base: int = native.heap_base
        self.heap_size: int = native.heap_size
        self.hot_path = HotPath(native, self.on_cpu)  # NOTE [hot paths] (_hot.py)
        self._typed: dict[tuple[int, torch.dtype], torch.Tensor] = {}
        self.heap = SymmetricHeap(self.heap_base, self.heap_size)  # its allocations (NOTE [address checks])
        self.workspaces = WorkspaceStore(self)  # unishmem.kernels' symmetric buffers (NOTE [workspaces])
        self.team_world = Team(self, 0, "world")
        self.team_node = Team(self, 1, "node")
        # On several hosts (or simulated nodes) each node team is smaller than the world on every PE
        # alike, and init is the last point collective over the world before kernels may run on it.
        if self.team_node.n_pes < self.n_pes:
            self.workspaces.split(self.team_world, [(self.team_node, True)], _config.team_arena(self.heap_size))
        _races.start(self, opened.segments)  # where UNISHMEM_RACE_CHECK is set (NOTE [race check])

    # ---- lifetime ---------------------------------------------------------------------------

    def check_active(self) -> None:
        """NotInitializedError once this runtime is finalized."""
        if self.finalized:
            raise NotInitializedError("this runtime was finalized; call unishmem.init() for a new one")

    def finalize(self) -> None:
        """Collective: frees whatever is still allocated (warning about it) and leaves the job."""
        if self.finalized:
            return
        self.free_workspaces()
        self.workspaces.free_arenas()
        self.teardown(collective=True)

    def free_workspaces(self) -> None:
        self.check_active()
        self.workspaces.free_workspaces()

    def teardown(self, collective: bool) -> None:
        """Leave the job: with the peers (finalize), or alone after an error, so that they learn of it."""
        live = self.heap.live()
        if live and collective:
            warnings.warn(
                f"PE {self.my_pe}: finalize freed {len(live)} symmetric allocation(s) still live "
                f"({sum(a.nbytes for a in live)} bytes); free them with rt.free()",
                UnishmemWarning,
                stacklevel=4,
            )
        for a in live:
            a.live = False
        self.finalized = True
        self.hot_path.end()
        _races.stop()
        self._on_end(self)
        try:
            (self.native.finalize if collective else self.native.abandon)()
        finally:
            self.diagnostics.remove_hang_dir()
            self.bootstrap.close()

    # ---- teams ------------------------------------------------------------------------------

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
        if not isinstance(team, Team) or not team.belongs_to(self):
            raise TypeError(f"team must be a unishmem.Team of this runtime or None, got {team!r}")
        team.check()
        return team

    # ---- argument checks ----------------------------------------------------------------------

    def local(self, t, name: str, contiguous: bool = True) -> tuple[int, int]:
        """(address, bytes) of `t`, a tensor on this runtime's device (contiguous unless told)."""
        if type(t) is not torch.Tensor and not isinstance(t, torch.Tensor):  # the first test is the cheaper
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_cpu if self.on_cpu else t.device != self.device:  # is_cpu: the cheaper test (hot paths)
            raise ValueError(f"{name} is on {t.device}, but this runtime's device is {self.device}")
        if contiguous and not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (shape {tuple(t.shape)}, strides {t.stride()})")
        return t.data_ptr() or address_of(t), t.nbytes

    def symmetric(self, t, name: str, contiguous: bool = True) -> tuple[int, int]:
        """As local(), and `t` lies in a live allocation of the symmetric heap."""
        addr, nbytes = self.local(t, name, contiguous)
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

    def signal_address(self, sig, name: str = "signal") -> int:
        """The address of `sig`, a 1-element uint64 symmetric view."""
        addr, nbytes = self.symmetric(sig, name)
        if nbytes != 8 or sig.dtype is not torch.uint64:  # 8 bytes of uint64: one element
            raise TypeError(
                f"{name} must be a 1-element torch.uint64 view of rt.signals(), got "
                f"{sig.dtype} with {sig.numel()} elements"
            )
        return self.heap.check_aligned(addr, 8, name)

    def signal_args(self, value: int, op: SIGNAL | int, pe: int) -> tuple[int, int, int]:
        """A signal update's value bits, op code and target PE, checked."""
        if type(value) is not int or not 0 <= value < _U64:
            value = to_bits(value, torch.uint64, "value")
        code = _SET if op is SIGNAL.SET else signal_code(op)
        if type(pe) is not int or not 0 <= pe < self.n_pes:
            pe = check_pe(pe, self.n_pes)
        return value, code, pe

    @staticmethod
    def same_kind(dest, source, what: str, dest_elems: int | None = None) -> None:
        """dest and source agree in dtype, and dest has `dest_elems` elements (default: as many as source).
        Hot paths call it only once equal byte counts and dtypes have failed to show that, for its message."""
        if dest.dtype != source.dtype:
            raise TypeError(f"{what}: dest is {dest.dtype} but source is {source.dtype}")
        expected = source.numel() if dest_elems is None else dest_elems
        if dest.numel() != expected:
            raise ValueError(
                f"{what}: dest has {dest.numel()} elements, expected {expected} for a source of {source.numel()}"
            )

    # ---- symmetric memory -------------------------------------------------------------------
    # Allocation and free are collective over the world: their local checks run inside
    # reject_on_error, so a PE whose arguments fail still enters the call (see collective()).

    def empty(self, shape: Shape, dtype: torch.dtype) -> torch.Tensor:
        """Collective: an uninitialised tensor in the symmetric heap."""
        self.check_active()
        dims, nbytes = self.reject_on_error(0, lambda: allocation_of(shape, dtype))
        return self._allocate(dims, dtype, nbytes)

    def filled(self, shape: Shape, value: bool | int | float, dtype: torch.dtype, check_value: bool) -> torch.Tensor:
        """Collective: a symmetric tensor of `value`, filled on every PE before any peer may write it."""
        self.check_active()

        def check():
            args = allocation_of(shape, dtype)
            if check_value:
                check_fill(value, dtype)
            return args

        dims, nbytes = self.reject_on_error(0, check)
        t = self._allocate(dims, dtype, nbytes)
        t.fill_(value)
        # No peer may write into it before every PE has filled its copy (on the current stream).
        self.native.sync(0, self.stream_of(None))
        return t

    def zeros(self, shape: Shape, dtype: torch.dtype) -> torch.Tensor:
        """Collective: a zeroed symmetric tensor."""
        return self.filled(shape, 0, dtype, check_value=False)

    def signals(self, n: int) -> torch.Tensor:
        """Collective: n zeroed uint64 signal words."""
        self.check_active()

        def check():
            count = as_index(n, "signals(n): n")
            if count < 1:
                raise ValueError(f"signals(n): n={count} must be >= 1")
            return count

        return self.zeros((self.reject_on_error(0, check),), torch.uint64)

    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype, nbytes: int) -> torch.Tensor:
        offset = _barrier(lambda: self.native.malloc(nbytes, DTYPE_CODES[dtype])) - self.heap_base
        alloc = self.heap.add(offset, nbytes, dtype)
        # NOTE [allocation identity]: each allocation gets a storage of its own over its bytes (the
        # DLPack view of a slice of the heap, at least a byte: the allocator gives 0 bytes some) and
        # that storage carries its Allocation. Every tensor sharing it (views, dtype views,
        # detach(), .data) is then known as this allocation's, also once it is freed and its bytes
        # belong to another: symmetric() and free() ask the storage, in constant time. On a CPU
        # runtime free() moves that storage off the heap (NOTE [freed memory], _heap.py).
        with torch.inference_mode(False):  # the heap never becomes an inference tensor
            storage = torch.from_dlpack(self.heap_of(self.my_pe)[offset : offset + max(nbytes, 1)]).untyped_storage()
            t = torch.empty(0, dtype=dtype, device=self.device).set_(storage, 0, shape, contiguous_strides(shape))
        storage._unishmem_allocation = alloc  # type: ignore[attr-defined]  # NOTE [allocation identity]
        alloc.storage = weakref.ref(storage)  # weak: the storage holds its allocation
        self.hot_path.add_allocation(storage, self.heap_base + offset, nbytes)  # NOTE [view checks]
        return t

    def free(self, t: torch.Tensor) -> None:
        """Collective and explicit: nothing is freed by garbage collection."""
        self.check_active()
        alloc = self.reject_on_error(0, lambda: self._allocation_of(t))
        _barrier(lambda: self.native.free(self.heap_base + alloc.offset))
        self.heap.remove(alloc)
        self.hot_path.drop_allocation(self.heap_base + alloc.offset)  # NOTE [view checks]: its views miss
        storage = alloc.storage()
        if self.on_cpu and storage is not None:  # None: no tensor over it is left
            move_off_heap(storage)  # NOTE [freed memory]: torch's writes through its tensors miss the heap

    def _allocation_of(self, t) -> Allocation:
        """The live allocation that `t` starts, for free()."""
        addr, nbytes = self.local(t, "tensor to free", contiguous=False)
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
        if not isinstance(t, torch.Tensor) or t.device != self.device or self.finalized:
            return False
        own = getattr(t.untyped_storage(), "_unishmem_allocation", None)  # NOTE [allocation identity]
        return own.live if own is not None else self.heap.holds(address_of(t), 0)

    def peer(self, t: torch.Tensor, pe: int) -> torch.Tensor | None:
        """PE `pe`'s copy of symmetric tensor `t`, for direct loads and stores; None if unreachable."""
        self.check_active()
        self.symmetric(t, "tensor", contiguous=False)
        check_pe(pe, self.n_pes)
        if self.native.peer_ptr(address_of(t), pe) == 0:
            return None
        offset = address_of(t) - self.heap_base
        key = (pe, t.dtype)
        if key not in self._typed:
            self._typed[key] = self.heap_of(pe).view(t.dtype)
        return self._typed[key].as_strided(t.shape, t.stride(), offset // t.element_size())

    # ---- collectives --------------------------------------------------------------------------
    # A PE whose arguments fail the checks still enters the collective, marked as rejected,
    # so that every member raises instead of waiting for it.

    def reject_on_error(self, slot: int, check: Callable[[], Any]) -> Any:
        """check()'s result; if it raises, this PE enters the collective on team `slot` as
        rejected first, so that the other members raise too and every barrier count stays equal."""
        try:
            return check()
        except (TypeError, ValueError):
            self.native.reject_collective(slot)
            raise

    def collective(self, team, check: Callable[[Team], tuple], run: Callable, dest=None, source=None) -> None:
        """run(team's slot, *check(team)); dest and source: the collective's tensors (none: a barrier or sync)."""
        self.check_active()
        if team is None:
            team = self.team_world
        elif not isinstance(team, Team) or not team.belongs_to(self):
            self.native.reject_collective(self.team_world.slot)  # no team to enter: the others are likely here
            raise TypeError(f"team must be a unishmem.Team of this runtime or None, got {team!r}")
        else:
            team.check()  # a destroyed team was destroyed on every member: none is waiting in a call on it
        try:  # reject_on_error, inline (NOTE [hot paths])
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

    def barrier(self, team: Team | None, stream) -> None:
        self.collective(team, lambda t: (self.stream_of(stream),), self.native.barrier)

    def sync(self, team: Team | None, stream) -> None:
        self.collective(team, lambda t: (self.stream_of(stream),), self.native.sync)

    def _pair(self, dest, source, what: str, dest_elems: int | None = None, in_place_ok: bool = False):
        """Check a collective's symmetric dest and source; `in_place_ok`: dest may be source."""
        d, dn = self.symmetric(dest, "dest")
        s, sn = self.symmetric(source, "source")
        if dest.dtype != source.dtype or dn != (sn if dest_elems is None else dest_elems * source.element_size()):
            self.same_kind(dest, source, what, dest_elems)
        return disjoint(d, dn, s, sn, what, in_place_ok), s, sn

    def broadcast(self, dest, source, root: int, team: Team | None, stream) -> None:
        def check(t):
            d, s, n = self._pair(dest, source, "broadcast", in_place_ok=True)
            return d, s, n, dtype_code_of(source, "broadcast"), check_pe(root, t.n_pes, "root"), self.stream_of(stream)

        self.collective(team, check, self.native.broadcast, dest, source)

    def fcollect(self, dest, source, team: Team | None, stream) -> None:
        def check(t):
            d, s, n = self._pair(dest, source, "fcollect", source.numel() * t.n_pes)
            return d, s, n, dtype_code_of(source, "fcollect"), self.stream_of(stream)

        self.collective(team, check, self.native.fcollect, dest, source)

    def alltoall(self, dest, source, team: Team | None, stream) -> None:
        def check(t):
            d, s, n = self._pair(dest, source, "alltoall")
            if source.numel() % t.n_pes:
                raise ValueError(f"alltoall: {source.numel()} elements do not split into {t.n_pes} equal blocks")
            return d, s, n // t.n_pes, dtype_code_of(source, "alltoall"), self.stream_of(stream)

        self.collective(team, check, self.native.alltoall, dest, source)

    def reduce(self, dest, source, op: str, team: Team | None, stream, scatter: bool = False) -> None:
        """All-reduce of `source` into `dest` (dest may be source); `scatter`: member i keeps block i."""
        what = "reducescatter" if scatter else "reduce"

        def check(t):
            dtype_code, op_code = reduce_codes(op, source.dtype, what)
            if scatter and source.numel() % t.n_pes:
                raise ValueError(f"reducescatter: {source.numel()} elements do not split into {t.n_pes} blocks")
            d, s, _ = self._pair(
                dest, source, what, source.numel() // t.n_pes if scatter else None, in_place_ok=not scatter
            )
            return d, s, dest.numel(), dtype_code, op_code, self.stream_of(stream)

        self.collective(team, check, self.native.reducescatter if scatter else self.native.reduce, dest, source)
