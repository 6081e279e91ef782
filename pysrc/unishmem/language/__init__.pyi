# Generated from language/_table.py by `python -m unishmem.language._stubs --write`: do not edit.

from typing import Any

import triton.language as tl

from ._build import atomic_function as atomic_function
from ._build import device_function as device_function
from ._externs import barrier_all as barrier_all
from ._externs import barrier_all_block as barrier_all_block
from ._externs import barrier_all_warp as barrier_all_warp
from ._externs import fence as fence
from ._externs import g as g
from ._externs import get as get
from ._externs import get_block as get_block
from ._externs import get_nbi as get_nbi
from ._externs import get_nbi_block as get_nbi_block
from ._externs import getmem as getmem
from ._externs import getmem_block as getmem_block
from ._externs import getmem_nbi as getmem_nbi
from ._externs import getmem_nbi_block as getmem_nbi_block
from ._externs import getmem_nbi_warp as getmem_nbi_warp
from ._externs import getmem_warp as getmem_warp
from ._externs import my_pe as my_pe
from ._externs import n_pes as n_pes
from ._externs import p as p
from ._externs import put as put
from ._externs import put_block as put_block
from ._externs import put_nbi as put_nbi
from ._externs import put_nbi_block as put_nbi_block
from ._externs import put_signal as put_signal
from ._externs import put_signal_block as put_signal_block
from ._externs import put_signal_nbi as put_signal_nbi
from ._externs import put_signal_nbi_block as put_signal_nbi_block
from ._externs import put_signal_nbi_warp as put_signal_nbi_warp
from ._externs import put_signal_warp as put_signal_warp
from ._externs import putmem as putmem
from ._externs import putmem_block as putmem_block
from ._externs import putmem_nbi as putmem_nbi
from ._externs import putmem_nbi_block as putmem_nbi_block
from ._externs import putmem_nbi_warp as putmem_nbi_warp
from ._externs import putmem_signal as putmem_signal
from ._externs import putmem_signal_block as putmem_signal_block
from ._externs import putmem_signal_nbi as putmem_signal_nbi
from ._externs import putmem_signal_nbi_block as putmem_signal_nbi_block
from ._externs import putmem_signal_nbi_warp as putmem_signal_nbi_warp
from ._externs import putmem_signal_warp as putmem_signal_warp
from ._externs import putmem_warp as putmem_warp
from ._externs import quiet as quiet
from ._externs import quiet_pe as quiet_pe
from ._externs import remote_ptr as remote_ptr
from ._externs import signal_fetch as signal_fetch
from ._externs import signal_op as signal_op
from ._externs import signal_wait_until as signal_wait_until
from ._externs import sync_all as sync_all
from ._externs import sync_all_block as sync_all_block
from ._externs import sync_all_warp as sync_all_warp
from ._externs import test as test
from ._externs import wait_until as wait_until
from ._externs import wait_until_all as wait_until_all
from ._externs import wait_until_all_vector as wait_until_all_vector
from ._externs import wait_until_any as wait_until_any
from ._externs import wait_until_any_vector as wait_until_any_vector
from ._externs import wait_until_some as wait_until_some
from ._externs import wait_until_some_vector as wait_until_some_vector
from ._table import ATOMICS as ATOMICS
from ._table import ROWS as ROWS

FUNCTIONS: list[str]
SIGNAL_SET: tl.constexpr
SIGNAL_ADD: tl.constexpr
CMP_EQ: tl.constexpr
CMP_NE: tl.constexpr
CMP_GT: tl.constexpr
CMP_GE: tl.constexpr
CMP_LT: tl.constexpr
CMP_LE: tl.constexpr

__all__ = [
    "my_pe",
    "n_pes",
    "team_my_pe",
    "team_n_pes",
    "team_translate_pe",
    "remote_ptr",
    "mc_ptr",
    "load_remote",
    "store_remote",
    "put_tile_block",
    "barrier_all_grid",
    "p",
    "g",
    "signal_op",
    "signal_wait_until",
    "signal_fetch",
    "wait_until",
    "test",
    "fence",
    "quiet",
    "quiet_pe",
    "barrier_all",
    "sync_all",
    "barrier_all_block",
    "sync_all_block",
    "barrier_all_warp",
    "sync_all_warp",
    "barrier",
    "sync",
    "barrier_block",
    "barrier_warp",
    "sync_block",
    "sync_warp",
    "broadcast",
    "fcollect",
    "broadcast_warp",
    "fcollect_warp",
    "alltoall",
    "reduce",
    "putmem",
    "getmem",
    "putmem_nbi",
    "getmem_nbi",
    "putmem_signal",
    "putmem_signal_nbi",
    "putmem_block",
    "getmem_block",
    "putmem_nbi_block",
    "getmem_nbi_block",
    "putmem_signal_block",
    "putmem_signal_nbi_block",
    "putmem_warp",
    "getmem_warp",
    "putmem_nbi_warp",
    "getmem_nbi_warp",
    "putmem_signal_warp",
    "putmem_signal_nbi_warp",
    "put_signal",
    "put_signal_nbi",
    "put_signal_block",
    "put_signal_nbi_block",
    "put_signal_warp",
    "put_signal_nbi_warp",
    "wait_until_all",
    "wait_until_any",
    "wait_until_some",
    "wait_until_all_vector",
    "wait_until_any_vector",
    "wait_until_some_vector",
    "iput",
    "iget",
    "iput_block",
    "iget_block",
    "put",
    "get",
    "put_nbi",
    "get_nbi",
    "put_block",
    "get_block",
    "put_nbi_block",
    "get_nbi_block",
    "atomic_fetch",
    "atomic_set",
    "atomic_swap",
    "atomic_compare_swap",
    "atomic_fetch_add",
    "atomic_add",
    "atomic_fetch_inc",
    "atomic_inc",
    "consume_token",
    "SIGNAL_SET",
    "SIGNAL_ADD",
    "CMP_EQ",
    "CMP_NE",
    "CMP_GT",
    "CMP_GE",
    "CMP_LT",
    "CMP_LE",
]

def team_my_pe(team: Any) -> tl.tensor: ...
def team_n_pes(team: Any) -> tl.tensor: ...
def team_translate_pe(src_team: Any, pe: Any, dst_team: Any) -> tl.tensor: ...
def mc_ptr(ptr: Any) -> tl.tensor:
    """The multicast address of `ptr` for the world team (a store to it reaches every PE's copy; NVLink SHARP on
    NVSwitch machines), or null where the machine has none; always null on rocSHMEM and on the host backend,
    which have no multicast."""

def load_remote(ptr: Any, pe: Any, mask: Any = None, other: Any = None) -> tl.tensor:
    """A volatile tl.load of `ptr` (a pointer or block of them) on PE `pe`, which must be reachable by
    load/store: when it is not, a device assertion says so when compiled with TRITON_DEBUG=1, and a ValueError
    always does under TRITON_INTERPRET=1. Every call reads memory (PTX ld.volatile, relaxed at system scope; an
    LLVM volatile load on AMD), so a loop may spin on it; it orders nothing: loads of data the value guards need
    consume_token or fence."""

def store_remote(ptr: Any, value: Any, pe: Any, mask: Any = None) -> None:
    """tl.store of `value` to `ptr` on PE `pe`, which must be reachable by load/store."""

def put_tile_block(dest: Any, dest_ld: Any, source: Any, source_ld: Any, rows: Any, row_bytes: Any, pe: Any) -> None:
    """Put `rows` rows of `row_bytes` bytes, `source_ld` elements apart at source, to rows `dest_ld` elements
    apart at PE `pe`'s dest; complete for the source on return."""

def barrier_all_grid(counter: Any) -> None:
    """Every program of the launch, then every PE, then every program again. `counter`: a zeroed int64 word (or
    a uint64 signal word) of the symmetric heap kept for this use (never reset); the launch must be cooperative
    (launch_cooperative_grid=True) so that all its programs are resident."""

def barrier(team: Any) -> None: ...
def sync(team: Any) -> None: ...
def barrier_block(team: Any) -> None: ...
def barrier_warp(team: Any) -> None: ...
def sync_block(team: Any) -> None: ...
def sync_warp(team: Any) -> None: ...
def broadcast(team: Any, dest: Any, source: Any, nelems: Any, root: Any) -> None: ...
def fcollect(team: Any, dest: Any, source: Any, nelems: Any) -> None: ...
def broadcast_warp(team: Any, dest: Any, source: Any, nelems: Any, root: Any) -> None:
    """broadcast issued by the program's first warp (NOTE [execution rule]); rocSHMEM has no C-linkage
    collective: there the whole program runs unishmem's Triton implementation."""

def fcollect_warp(team: Any, dest: Any, source: Any, nelems: Any) -> None:
    """fcollect issued by the program's first warp (NOTE [execution rule]); rocSHMEM has no C-linkage
    collective: there the whole program runs unishmem's Triton implementation."""

def alltoall(team: Any, dest: Any, source: Any, nelems: Any) -> None: ...
def reduce(team: Any, dest: Any, source: Any, nelems: Any, op: Any) -> None: ...
def iput(dest: Any, source: Any, dst_stride: Any, src_stride: Any, nelems: Any, pe: Any) -> None:
    """Strided put: nelems elements, src_stride apart at source, to dst_stride apart at PE pe's dest (strides in
    elements)."""

def iget(dest: Any, source: Any, dst_stride: Any, src_stride: Any, nelems: Any, pe: Any) -> None:
    """Strided get: the mirror of iput."""

def iput_block(dest: Any, source: Any, dst_stride: Any, src_stride: Any, nelems: Any, pe: Any) -> None:
    """Strided put: nelems elements, src_stride apart at source, to dst_stride apart at PE pe's dest (strides in
    elements)."""

def iget_block(dest: Any, source: Any, dst_stride: Any, src_stride: Any, nelems: Any, pe: Any) -> None:
    """Strided get: the mirror of iput."""

def atomic_fetch(dest: Any, pe: Any) -> tl.tensor:
    """atomic_fetch(dest, pe): an atomic on PE pe's dest (NOTE [atomics])."""

def atomic_set(dest: Any, value: Any, pe: Any) -> None:
    """atomic_set(dest, value, pe): an atomic on PE pe's dest (NOTE [atomics])."""

def atomic_swap(dest: Any, value: Any, pe: Any) -> tl.tensor:
    """atomic_swap(dest, value, pe): an atomic on PE pe's dest (NOTE [atomics])."""

def atomic_compare_swap(dest: Any, cond: Any, value: Any, pe: Any) -> tl.tensor:
    """atomic_compare_swap(dest, cond, value, pe): an atomic on PE pe's dest (NOTE [atomics])."""

def atomic_fetch_add(dest: Any, value: Any, pe: Any) -> tl.tensor:
    """atomic_fetch_add(dest, value, pe): an atomic on PE pe's dest (NOTE [atomics])."""

def atomic_add(dest: Any, value: Any, pe: Any) -> None:
    """atomic_add(dest, value, pe): an atomic on PE pe's dest (NOTE [atomics])."""

def atomic_fetch_inc(dest: Any, pe: Any) -> tl.tensor:
    """atomic_fetch_inc(dest, pe): an atomic on PE pe's dest (NOTE [atomics])."""

def atomic_inc(dest: Any, pe: Any) -> None:
    """atomic_inc(dest, pe): an atomic on PE pe's dest (NOTE [atomics])."""

def consume_token(x: Any, token: Any) -> tl.tensor:
    """`x` unchanged, made data-dependent on `token` (a value a wait returned), so that loads addressed by `x`
    cannot be issued before the wait (Triton's pipeliner would otherwise move them above it). `x` may be a
    tensor descriptor: its loads and gathers then take their offsets through the token."""
