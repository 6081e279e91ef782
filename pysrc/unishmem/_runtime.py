"""Runtime: the user's object, the public host API over a private Core (_core.py, NOTE [private
core]). Every argument check is made here or in the core, once, for every backend; the
native backends below trust what they are given."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

import torch

from . import _config, _races
from ._checks import Shape, check_pe, cmp_code, from_bits, to_bits
from ._dtypes import ATOMIC_DTYPES, DTYPE_CODES, WAIT_DTYPES
from .enums import ATOMIC_OPS, CMP, SIGNAL

if TYPE_CHECKING:
    from ._core import Core
    from ._team import Team

# NOTE [hot paths]: put, get, the signal calls and the collectives are called in tight loops
# (`unishmem bench` times them), so their checks (_checks.py) avoid building enums and storage
# objects where a cheaper test says the same.
_U64 = 2**64


def _completed() -> None:
    """After a host quiet or fence: every put this PE issued is complete."""
    races = _races.checker()
    if races is not None:
        races.complete(races.current(), every=True)


class Runtime:
    """The process's handle on the symmetric heap and its peers. Made by unishmem.init().

    Its public attributes are the API and read-only facts; what it is made of is its Core's (NOTE
    [private core]), which it keeps private: the hot methods below reach the parts they use through
    private attributes set once here (an attribute each, not a chain: NOTE [hot paths]). Nothing
    outside this module reads or assigns a Runtime's private attributes, nor reaches a name that is not
    its API (tests/test_layout.py lists the names and checks both)."""

    def __init__(self, core: Core):
        self._core = core
        self._native = core.native
        self._hot = core.hot_path
        self._heap = core.heap
        self._on_cpu = core.on_cpu
        self._stream_of = core.stream_of
        self._n = core.n_pes
        self._check_active = core.check_active
        self._local = core.local
        self._symmetric = core.symmetric
        self._signal = core.signal_address
        self._signal_args = core.signal_args
        self._same_kind = core.same_kind
        self._world = core.team_world.slot
        if _config.get("UNISHMEM_RACE_CHECK") is None:  # checked calls go through the methods (NOTE [race check])
            core.hot_path.install(self, Runtime)

    def __repr__(self) -> str:
        return (
            f"<unishmem.Runtime backend={self.backend} pe={self.my_pe}/{self.n_pes} device={self.device} "
            f"heap={self.heap_size} bytes>"
        )

    # ---- facts ------------------------------------------------------------------------------

    @property
    def backend(self) -> str:
        """The backend: "host", "nvshmem" or "rocshmem"."""
        return self._core.backend

    @property
    def device(self) -> torch.device:
        return self._core.device

    @property
    def my_pe(self) -> int:
        return self._core.my_pe

    @property
    def n_pes(self) -> int:
        return self._n

    @property
    def version(self) -> dict[str, Any]:
        """The versions of unishmem, torch and the backend's libraries."""
        return dict(self._core.version)

    @property
    def launcher(self) -> str:
        """What started this process's job (`unishmem run`, torchrun, mpirun, ...)."""
        return self._core.launcher

    @property
    def heap_base(self) -> int:
        """The address of this PE's symmetric heap."""
        return self._core.heap_base

    @property
    def heap_size(self) -> int:
        """The symmetric heap's bytes on each PE."""
        return self._core.heap_size

    @property
    def team_world(self) -> Team:
        return self._core.team_world

    @property
    def team_node(self) -> Team:
        """The PEs sharing this host (NVSHMEM TEAM_NODE, rocSHMEM TEAM_SHARED)."""
        return self._core.team_node

    @property
    def finalized(self) -> bool:
        """Whether finalize() (or leaving after an error) has ended this runtime."""
        return self._core.finalized

    # ---- lifetime ---------------------------------------------------------------------------

    def __enter__(self) -> Runtime:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.finalize()
        else:
            self._core.teardown(collective=False)  # peers learn of the error instead of waiting for us

    def finalize(self) -> None:
        """Collective. Frees whatever is still allocated (warning about it) and leaves the job."""
        self._core.finalize()

    def free_workspaces(self) -> None:
        """Collective: frees the symmetric workspaces unishmem.kernels made, empties the team
        arenas and frees those of teams destroyed everywhere (NOTE [workspaces])."""
        self._core.free_workspaces()

    # ---- symmetric memory -------------------------------------------------------------------

    def empty(self, shape: Shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Collective: an uninitialised tensor in the symmetric heap."""
        return self._core.empty(shape, dtype)

    def zeros(self, shape: Shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Collective: a zeroed tensor in the symmetric heap."""
        return self._core.zeros(shape, dtype)

    def full(self, shape: Shape, value: bool | int | float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Collective: a tensor of `value` in the symmetric heap."""
        return self._core.filled(shape, value, dtype, check_value=True)

    def empty_like(self, other: torch.Tensor) -> torch.Tensor:
        return self.empty(tuple(other.shape), other.dtype)

    def signals(self, n: int) -> torch.Tensor:
        """Collective: n zeroed uint64 signal words."""
        return self._core.signals(n)

    def free(self, t: torch.Tensor) -> None:
        """Collective and explicit: nothing is freed by garbage collection."""
        self._core.free(t)

    def is_symmetric(self, t: torch.Tensor) -> bool:
        """True for any view into this PE's symmetric heap; False for one of a freed allocation."""
        return self._core.is_symmetric(t)

    def peer(self, t: torch.Tensor, pe: int) -> torch.Tensor | None:
        """PE `pe`'s copy of symmetric tensor `t`, for direct loads and stores; None if unreachable."""
        return self._core.peer(t, pe)

    # ---- argument checks the core does not share --------------------------------------------

    def _word(self, t, name: str, dtypes) -> int:
        addr, _ = self._symmetric(t, name)
        if t.dtype not in dtypes or t.numel() != 1:
            raise TypeError(
                f"{name} must be a 1-element symmetric tensor of {', '.join(map(str, dtypes))}; got "
                f"{t.dtype} with {t.numel()} elements"
            )
        return self._heap.check_aligned(addr, t.element_size(), name)

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
        if self._core.finalized:
            self._check_active()
        hot = self._hot
        d, n = self._symmetric(dest, "dest")
        s, m = self._local(source, "source")
        if n != m or dest.dtype is not source.dtype:
            self._same_kind(dest, source, "put")
        if type(pe) is not int or not 0 <= pe < self._n:
            pe = check_pe(pe, self._n)
        races = _races.checker()  # NOTE [race check]: None unless UNISHMEM_RACE_CHECK is set
        if races is not None:
            races.put(d, s, n, pe)
        hot.fast_put(hot.backend, d, s, n, pe, 0 if self._on_cpu else self._stream_of(stream))
        hot.remember(dest, d, n, True)
        hot.remember(source, s, n, False)

    def get(self, dest: torch.Tensor, source: torch.Tensor, pe: int, stream: torch.cuda.Stream | None = None) -> None:
        """Copy PE `pe`'s `source` (symmetric) into local `dest`."""
        if self._core.finalized:
            self._check_active()
        hot = self._hot
        d, n = self._local(dest, "dest")
        s, m = self._symmetric(source, "source")
        if n != m or dest.dtype is not source.dtype:
            self._same_kind(dest, source, "get")
        if type(pe) is not int or not 0 <= pe < self._n:
            pe = check_pe(pe, self._n)
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
        if self._core.finalized:
            self._check_active()
        hot = self._hot
        d, n = self._symmetric(dest, "dest")
        s, m = self._local(source, "source")
        if n != m or dest.dtype is not source.dtype:
            self._same_kind(dest, source, "put_signal")
        sig = self._signal(signal)
        value, code, pe = self._signal_args(value, op, pe)
        races = _races.checker()
        if races is not None:
            races.put_signal(d, s, n, sig, pe)
        hot.fast_put_signal(hot.backend, d, s, n, sig, value, code, pe, 0 if self._on_cpu else self._stream_of(stream))
        hot.remember(dest, d, n, True)
        hot.remember(source, s, n, False)
        hot.remember(signal, sig, 8, True)

    def signal_op(
        self,
        signal: torch.Tensor,
        value: int,
        pe: int,
        op: SIGNAL | int = SIGNAL.SET,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        if self._core.finalized:
            self._check_active()
        hot = self._hot
        sig = self._signal(signal)
        value, code, pe = self._signal_args(value, op, pe)
        races = _races.checker()
        if races is not None:
            races.signal(sig, pe)
        hot.fast_signal_op(hot.backend, sig, value, code, pe, 0 if self._on_cpu else self._stream_of(stream))
        hot.remember(signal, sig, 8, True)

    def _signal_wait_args(self, signal, cmp, value) -> tuple[int, int, int]:
        """A signal wait's address, value bits and cmp code, checked: the one check of both waits."""
        if self._core.finalized:
            self._check_active()
        sig = self._signal(signal)
        if type(value) is not int or not 0 <= value < _U64:
            value = to_bits(value, torch.uint64, "value")
        return sig, value, cmp_code(cmp)

    def signal_wait_until(
        self, signal: torch.Tensor, cmp: CMP | int, value: int, stream: torch.cuda.Stream | None = None
    ) -> int:
        """Wait until the local `signal` compares true against `value`; returns the value seen."""
        hot = self._hot
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
        self._native.signal_wait_until_on_stream(sig, code, value, self._stream_of(stream))
        _races.waited(sig, 8)  # the host backend's is the wait itself

    def signal_fetch(self, signal: torch.Tensor) -> int:
        self._check_active()
        sig = self._signal(signal)
        seen = self._native.signal_fetch(sig)
        _races.waited(sig, 8)
        return seen

    def wait_until(self, ivar: torch.Tensor, cmp: CMP | int, value: int) -> None:
        """Wait until the local 1-element int32/int64/uint32/uint64 `ivar` compares true against `value`."""
        self._check_active()
        addr = self._word(ivar, "ivar", WAIT_DTYPES)
        self._native.wait_until(addr, DTYPE_CODES[ivar.dtype], cmp_code(cmp), to_bits(value, ivar.dtype, "value"))
        _races.waited(addr, ivar.element_size())

    def test(self, ivar: torch.Tensor, cmp: CMP | int, value: int) -> bool:
        self._check_active()
        addr = self._word(ivar, "ivar", WAIT_DTYPES)
        true = self._native.test(addr, DTYPE_CODES[ivar.dtype], cmp_code(cmp), to_bits(value, ivar.dtype, "value"))
        if true:
            _races.waited(addr, ivar.element_size())
        return true

    def _words(self, ivars, cmp, value, what: str) -> tuple[int, list[int], int, int]:
        """(address, one value's bits per word, dtype code, cmp code) for a wait on every word of
        the 1-D symmetric `ivars`; `value` is one integer for all, or one per word (the _vector forms)."""
        self._check_active()
        if ivars.dtype not in WAIT_DTYPES or ivars.dim() != 1 or ivars.numel() == 0 or not ivars.is_contiguous():
            raise TypeError(
                f"{what}: ivars must be a non-empty contiguous 1-D symmetric tensor of "
                f"{', '.join(map(str, WAIT_DTYPES))}; got {ivars.dtype} of shape {list(ivars.shape)}"
            )
        addr, _ = self._symmetric(ivars, f"{what}: ivars")
        self._heap.check_aligned(addr, ivars.element_size(), f"{what}: ivars")
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
            self._native.wait_until(addr + i * size, code, c, b)
        _races.waited(addr, size, len(bits))

    def wait_until_any(self, ivars: torch.Tensor, cmp: CMP | int, value: int) -> int:
        """Wait until some word of `ivars` compares true; returns its index."""
        addr, bits, code, c = self._words(ivars, cmp, value, "wait_until_any")
        found = self._native.wait_until_any(addr, ivars.element_size(), code, c, bits)
        _races.waited(addr + found * ivars.element_size(), ivars.element_size())
        return found

    def wait_until_some(self, ivars: torch.Tensor, cmp: CMP | int, value: int) -> list[int]:
        """Wait until at least one word of `ivars` compares true; returns the indices of all that do."""
        addr, bits, code, c = self._words(ivars, cmp, value, "wait_until_some")
        size = ivars.element_size()
        first = self._native.wait_until_any(addr, size, code, c, bits)
        found = [i for i, b in enumerate(bits) if i == first or self._native.test(addr + i * size, code, c, b)]
        for i in found:
            _races.waited(addr + i * size, size)
        return found

    def quiet(self, stream: torch.cuda.Stream | None = None) -> None:
        self._check_active()
        self._native.quiet(self._stream_of(stream))
        _completed()

    def fence(self) -> None:
        self._check_active()
        self._native.fence()
        _completed()

    def _atomic(self, op: str, dest, pe: int, value: int = 0, cond: int = 0) -> int:
        self._check_active()
        addr = self._word(dest, "dest", ATOMIC_DTYPES)
        v, c, pe = to_bits(value, dest.dtype, "value"), to_bits(cond, dest.dtype, "cond"), check_pe(pe, self._n)
        races = _races.checker()
        key = races.amo(addr, dest.element_size(), pe) if races is not None else None
        out = self._core.atomic(ATOMIC_OPS[op], DTYPE_CODES[dest.dtype], addr, v, c, pe)
        if races is not None and key is not None:
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

    # ---- synchronisation and collectives (the core's: the helpers run them too) ------------------
    # barrier_all and sync_all on the default stream have nothing to check: they skip the collective
    # machinery, which costs more than the host barrier itself (about 0.3 us of 0.57 us at 2 PEs).

    def barrier_all(self, stream: torch.cuda.Stream | None = None) -> None:
        if stream is not None or self._core.finalized or _races.checker() is not None:
            return self.barrier(None, stream)
        self._native.barrier(self._world, self._stream_of(None))

    def sync_all(self, stream: torch.cuda.Stream | None = None) -> None:
        if stream is not None or self._core.finalized or _races.checker() is not None:
            return self.sync(None, stream)
        self._native.sync(self._world, self._stream_of(None))

    def barrier(self, team: Team | None = None, stream: torch.cuda.Stream | None = None) -> None:
        """Complete this PE's outstanding puts, then wait for every member of `team`."""
        self._core.barrier(team, stream)

    def sync(self, team: Team | None = None, stream: torch.cuda.Stream | None = None) -> None:
        """Wait for every member of `team` (no completion of outstanding puts)."""
        self._core.sync(team, stream)

    def broadcast(
        self,
        dest: torch.Tensor,
        source: torch.Tensor,
        root: int,
        team: Team | None = None,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        """Copy `source` of the team's PE `root` into every member's `dest`."""
        self._core.broadcast(dest, source, root, team, stream)

    def fcollect(
        self,
        dest: torch.Tensor,
        source: torch.Tensor,
        team: Team | None = None,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        """All-gather: `dest` receives the team's `source` blocks in team order."""
        self._core.fcollect(dest, source, team, stream)

    def alltoall(
        self,
        dest: torch.Tensor,
        source: torch.Tensor,
        team: Team | None = None,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        """Block j of this PE's `source` goes to block my_pe of member j's `dest`."""
        self._core.alltoall(dest, source, team, stream)

    def reduce(
        self,
        dest: torch.Tensor,
        source: torch.Tensor,
        op: str = "sum",
        team: Team | None = None,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        """All-reduce of `source` into `dest` over `team` (dest may be source)."""
        self._core.reduce(dest, source, op, team, stream)

    def reducescatter(
        self,
        dest: torch.Tensor,
        source: torch.Tensor,
        op: str = "sum",
        team: Team | None = None,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        """Reduce `source` over `team`; member i receives block i of the result in `dest`."""
        self._core.reduce(dest, source, op, team, stream, scatter=True)
