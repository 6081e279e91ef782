# Generated from language/_table.py by `python -m unishmem.language._stubs --write`: do not edit.

from typing import Any

import triton.language as tl

def my_pe() -> tl.tensor:
    """This PE's number in the world team."""

def n_pes() -> tl.tensor:
    """The number of PEs in the world team."""

def remote_ptr(ptr: Any, pe: Any) -> tl.tensor:
    """`ptr` (a pointer or a block of them) on PE `pe`, for direct loads and stores; null where not reachable."""

def p(dest: Any, value: Any, pe: Any) -> None:
    """Store one element into PE `pe`'s `dest`."""

def g(source: Any, pe: Any) -> tl.tensor:
    """Load one element from PE `pe`'s `source`."""

def signal_op(sig: Any, value: Any, op: Any, pe: Any) -> None: ...
def signal_wait_until(sig: Any, cmp: Any, value: Any) -> tl.tensor:
    """Wait until the local signal compares true with `value`; returns the signal's value."""

def signal_fetch(sig: Any) -> tl.tensor: ...
def wait_until(ptr: Any, cmp: Any, value: Any) -> tl.tensor:
    """Wait until the word at ptr compares true; returns 1, made once the wait is over: a token for
    consume_token."""

def test(ptr: Any, cmp: Any, value: Any) -> tl.tensor:
    """1 if the local value compares true, else 0."""

def fence() -> None:
    """Order this PE's puts to each peer before its later puts to that peer."""

def quiet() -> None:
    """Complete every put this PE issued."""

def quiet_pe(pe: Any) -> None:
    """Complete every put this PE issued to PE `pe`: a quiet() on both vendors (NVSHMEM has no per-PE quiet;
    rocSHMEM's rocshmem_pe_quiet takes an array of PEs in memory, which a program has no place for), so it also
    completes the puts to the other PEs."""

def barrier_all() -> None: ...
def sync_all() -> None: ...
def barrier_all_block() -> None: ...
def sync_all_block() -> None: ...
def barrier_all_warp() -> None: ...
def sync_all_warp() -> None: ...
def putmem(dest: Any, source: Any, nbytes: Any, pe: Any) -> None: ...
def getmem(dest: Any, source: Any, nbytes: Any, pe: Any) -> None: ...
def putmem_nbi(dest: Any, source: Any, nbytes: Any, pe: Any) -> None: ...
def getmem_nbi(dest: Any, source: Any, nbytes: Any, pe: Any) -> None: ...
def putmem_signal(dest: Any, source: Any, nbytes: Any, sig: Any, value: Any, op: Any, pe: Any) -> None: ...
def putmem_signal_nbi(dest: Any, source: Any, nbytes: Any, sig: Any, value: Any, op: Any, pe: Any) -> None: ...
def putmem_block(dest: Any, source: Any, nbytes: Any, pe: Any) -> None: ...
def getmem_block(dest: Any, source: Any, nbytes: Any, pe: Any) -> None: ...
def putmem_nbi_block(dest: Any, source: Any, nbytes: Any, pe: Any) -> None: ...
def getmem_nbi_block(dest: Any, source: Any, nbytes: Any, pe: Any) -> None: ...
def putmem_signal_block(dest: Any, source: Any, nbytes: Any, sig: Any, value: Any, op: Any, pe: Any) -> None: ...
def putmem_signal_nbi_block(dest: Any, source: Any, nbytes: Any, sig: Any, value: Any, op: Any, pe: Any) -> None: ...
def putmem_warp(dest: Any, source: Any, nbytes: Any, pe: Any) -> None: ...
def getmem_warp(dest: Any, source: Any, nbytes: Any, pe: Any) -> None: ...
def putmem_nbi_warp(dest: Any, source: Any, nbytes: Any, pe: Any) -> None: ...
def getmem_nbi_warp(dest: Any, source: Any, nbytes: Any, pe: Any) -> None: ...
def putmem_signal_warp(dest: Any, source: Any, nbytes: Any, sig: Any, value: Any, op: Any, pe: Any) -> None: ...
def putmem_signal_nbi_warp(dest: Any, source: Any, nbytes: Any, sig: Any, value: Any, op: Any, pe: Any) -> None: ...
def put_signal(dest: Any, source: Any, nelems: Any, sig: Any, value: Any, op: Any, pe: Any) -> None:
    """putmem_signal counted in elements."""

def put_signal_nbi(dest: Any, source: Any, nelems: Any, sig: Any, value: Any, op: Any, pe: Any) -> None:
    """putmem_signal_nbi counted in elements."""

def put_signal_block(dest: Any, source: Any, nelems: Any, sig: Any, value: Any, op: Any, pe: Any) -> None:
    """putmem_signal_block counted in elements."""

def put_signal_nbi_block(dest: Any, source: Any, nelems: Any, sig: Any, value: Any, op: Any, pe: Any) -> None:
    """putmem_signal_nbi_block counted in elements."""

def put_signal_warp(dest: Any, source: Any, nelems: Any, sig: Any, value: Any, op: Any, pe: Any) -> None:
    """putmem_signal_warp counted in elements."""

def put_signal_nbi_warp(dest: Any, source: Any, nelems: Any, sig: Any, value: Any, op: Any, pe: Any) -> None:
    """putmem_signal_nbi_warp counted in elements."""

def wait_until_all(ivars: Any, nelems: Any, cmp: Any, value: Any) -> tl.tensor:
    """Wait until each of the nelems words at ivars compares true; returns nelems, made once the wait is over: a
    token for consume_token."""

def wait_until_any(ivars: Any, nelems: Any, cmp: Any, value: Any) -> tl.tensor:
    """Wait until one of the nelems words at ivars compares true; returns its index."""

def wait_until_some(ivars: Any, nelems: Any, indices: Any, cmp: Any, value: Any) -> tl.tensor:
    """Wait until at least one of the nelems words at ivars compares true; writes the indices of those that do
    to indices (int64) and returns how many."""

def wait_until_all_vector(ivars: Any, nelems: Any, cmp: Any, values: Any) -> tl.tensor:
    """Wait until each of the nelems words at ivars compares true; returns nelems, made once the wait is over: a
    token for consume_token. Word i compares with values[i]."""

def wait_until_any_vector(ivars: Any, nelems: Any, cmp: Any, values: Any) -> tl.tensor:
    """Wait until one of the nelems words at ivars compares true; returns its index. Word i compares with
    values[i]."""

def wait_until_some_vector(ivars: Any, nelems: Any, indices: Any, cmp: Any, values: Any) -> tl.tensor:
    """Wait until at least one of the nelems words at ivars compares true; writes the indices of those that do
    to indices (int64) and returns how many. Word i compares with values[i]."""

def put(dest: Any, source: Any, nelems: Any, pe: Any) -> None: ...
def get(dest: Any, source: Any, nelems: Any, pe: Any) -> None: ...
def put_nbi(dest: Any, source: Any, nelems: Any, pe: Any) -> None: ...
def get_nbi(dest: Any, source: Any, nelems: Any, pe: Any) -> None: ...
def put_block(dest: Any, source: Any, nelems: Any, pe: Any) -> None: ...
def get_block(dest: Any, source: Any, nelems: Any, pe: Any) -> None: ...
def put_nbi_block(dest: Any, source: Any, nelems: Any, pe: Any) -> None: ...
def get_nbi_block(dest: Any, source: Any, nelems: Any, pe: Any) -> None: ...
