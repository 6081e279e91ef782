"""Host-initiated atomics on a GPU peer's word that this PE reaches by load/store.

NOTE [peer atomics]: NVSHMEM implements host-initiated atomics only over a remote transport. To a
peer it reaches over P2P (another GPU of the node, or another PE on the same GPU) 3.4.5's
nvshmem_int64_atomic_fetch_add prints "not implemented" and returns 0 (seen on an H200), and
rocSHMEM's IPC host context implements only add, fetch_add and compare-swap (VENDOR_NOTES.md). So a
GPU runtime does an atomic on a reachable peer's word with the GPU's own system-scope atomics: one
one-program launch on the current stream (so it follows the stream's earlier work, as the host's
other calls do), then the old value read back. Peers reached only over a network keep the library's
host atomics. The rocSHMEM side of this has not run on AMD hardware. Each op of enums.ATOMIC_OPS is one of six device atomics; signed and unsigned words of
one size share a binary, since add, exchange, compare-swap and the bitwise ops act on bits alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
import triton
import triton.language as tl

from ._dtypes import DTYPE_CODES
from .enums import ATOMIC_OPS

_ADD, _XCHG, _CAS, _AND, _OR, _XOR = range(6)
# op name -> (device atomic, the value it is given: "value", or a fixed one). A table on purpose, a row
# per name of enums.ATOMIC_OPS: an op and its fetch_ twin lower alike (the old value goes unused).
_LOWERING: dict[str, tuple[int, int | Literal["value"]]] = {
    "fetch": (_ADD, 0),
    "set": (_XCHG, "value"),
    "swap": (_XCHG, "value"),
    "compare_swap": (_CAS, "value"),
    "fetch_add": (_ADD, "value"),
    "add": (_ADD, "value"),
    "fetch_inc": (_ADD, 1),
    "inc": (_ADD, 1),
    "fetch_and": (_AND, "value"),
    "and": (_AND, "value"),
    "fetch_or": (_OR, "value"),
    "or": (_OR, "value"),
    "fetch_xor": (_XOR, "value"),
    "xor": (_XOR, "value"),
}
_BY_CODE = {ATOMIC_OPS[name]: lowering for name, lowering in _LOWERING.items()}
_WORD_DTYPES = {4: torch.int32, 8: torch.int64}  # by size; the word's own signedness does not matter
_ITEMSIZE = {code: dtype.itemsize for dtype, code in DTYPE_CODES.items()}


@triton.jit(do_not_specialize=["kind"])
def _peer_atomic(word, io, kind):
    """`io` holds [value, cond] in and the word's old value out."""
    value = tl.load(io)
    cond = tl.load(io + 1)
    if kind == 0:
        old = tl.atomic_add(word, value, sem="acq_rel", scope="sys")
    elif kind == 1:
        old = tl.atomic_xchg(word, value, sem="acq_rel", scope="sys")
    elif kind == 2:
        old = tl.atomic_cas(word, cond, value, sem="acq_rel", scope="sys")
    elif kind == 3:
        old = tl.atomic_and(word, value, sem="acq_rel", scope="sys")
    elif kind == 4:
        old = tl.atomic_or(word, value, sem="acq_rel", scope="sys")
    else:
        old = tl.atomic_xor(word, value, sem="acq_rel", scope="sys")
    tl.store(io, old)


def _signed(bits: int, size: int) -> int:
    top = 1 << (8 * size)
    bits &= top - 1
    return bits - top if bits >= top >> 1 else bits


def make(native, heap_of: Callable[[int], torch.Tensor], device: torch.device) -> Callable:
    """The runtime's atomic call, with native.atomic's arguments (op code, dtype code, address, value
    bits, cond bits, pe) and result (the old value's bits)."""
    base = native.heap_base

    def atomic(op: int, code: int, addr: int, value: int, cond: int, pe: int) -> int:
        try:
            heap = heap_of(pe)
        except ValueError:  # not reachable by load/store: over the network, the library's own
            return native.atomic(op, code, addr, value, cond, pe)
        size, (kind, given) = _ITEMSIZE[code], _BY_CODE[op]
        offset, word_dtype = addr - base, _WORD_DTYPES[size]
        word = heap[offset : offset + size].view(word_dtype)
        v = _signed(value if given == "value" else given, size)
        io = torch.tensor([v, _signed(cond, size)], dtype=word_dtype, device=device)
        _peer_atomic[(1,)](word, io, kind)
        return int(io[0].item()) & ((1 << (8 * size)) - 1)  # the old value's bits

    return atomic
