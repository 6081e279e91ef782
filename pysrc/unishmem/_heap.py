"""A runtime's symmetric heap on this PE: where it lies, its table of live allocations, and the checks
of addresses against them (NOTE [address checks]). The runtime allocates and frees through the
backend and records each allocation here; the device library's host side (language/_host.py) checks
the pointers it is given with the same methods, so both raise the same errors for the same memory."""

from __future__ import annotations

import bisect
import mmap
import weakref
from dataclasses import dataclass

import torch

from .errors import NotSymmetricError


@dataclass
class Allocation:
    offset: int
    nbytes: int
    dtype: torch.dtype
    live: bool = True
    storage: weakref.ref | None = None  # the storage its tensors share (NOTE [allocation identity])

    def offset_of(self, t: torch.Tensor) -> int:
        """The heap offset of `t`, a tensor over this allocation's storage: also once its storage
        was moved off the heap (NOTE [freed memory]), when its data_ptr() is no heap address."""
        # ignore: torch's stubs allow a SymInt, which only a traced tensor gives; this one is eager
        return self.offset + t.storage_offset() * t.element_size()  # type: ignore[return-value]


# NOTE [freed memory]: on a CPU runtime rt.free points the freed allocation's storage (NOTE
# [allocation identity]), and with it every tensor over it, at private memory of the same size: an
# anonymous mapping, whose pages are committed only where a stale write lands (it reads zeros at
# first). torch's own operations on a freed tensor then never reach the heap, whose bytes may belong
# to a new allocation. UntypedStorage._swap_data_ptr_ hands the heap's DataPtr to the private storage
# made for it, which drops it on return: that releases the DLPack view of the heap, never the heap
# (the backend owns its mapping), and the private mapping goes when the last tensor over the storage does.
# finalize needs no swap: the host backend then maps private memory over its whole heap (Mapping::retire).
# A GPU runtime does not do this: a same-size device buffer per free would take the device memory the
# free gave back, and a smaller or null pointer faults. There a torch write through a freed tensor
# reaches whatever allocation holds its bytes now (docs/getting-started.md, Freed memory).
def move_off_heap(storage: torch.UntypedStorage) -> None:
    private = torch.frombuffer(mmap.mmap(-1, storage.nbytes()), dtype=torch.uint8).untyped_storage()
    storage._swap_data_ptr_(private)  # type: ignore[attr-defined]  # private torch API, not in its stubs


class SymmetricHeap:
    def __init__(self, base: int, size: int):
        self.base, self.size = base, size
        self._allocs: dict[int, Allocation] = {}  # by heap offset
        self._offsets: list[int] = []  # sorted keys of _allocs

    def add(self, offset: int, nbytes: int, dtype: torch.dtype) -> Allocation:
        alloc = self._allocs[offset] = Allocation(offset, nbytes, dtype)
        bisect.insort(self._offsets, offset)
        return alloc

    def remove(self, alloc: Allocation) -> None:
        alloc.live = False
        del self._allocs[alloc.offset]
        self._offsets.remove(alloc.offset)

    def at(self, offset: int) -> Allocation | None:
        """The live allocation that starts at heap offset `offset`."""
        return self._allocs.get(offset)

    def live(self) -> list[Allocation]:
        return [a for a in self._allocs.values() if a.live]

    # NOTE [address checks]: these take addresses, not tensors. The host API calls them for what its
    # tensors turn out to be; device functions under TRITON_INTERPRET=1 (language/_host.py), which get
    # pointers, call the same ones, so both raise the same errors for the same memory.

    def holds(self, addr: int, nbytes: int) -> bool:
        return self.base <= addr and addr + nbytes <= self.base + self.size

    def check_in_heap(self, addr: int, nbytes: int, name: str) -> int:
        """addr, if nbytes bytes from it lie in the symmetric heap."""
        if nbytes < 0:
            raise ValueError(f"{name}: negative size {nbytes}")
        if not self.holds(addr, nbytes):
            raise NotSymmetricError(
                f"{name} (at {addr:#x}, {nbytes} bytes) is not in the symmetric heap; "
                "allocate it with rt.empty()/zeros()/signals()"
            )
        return addr

    def check_range(self, addr: int, nbytes: int, name: str) -> int:
        """addr, if nbytes bytes from it lie in one live symmetric allocation."""
        self.check_in_heap(addr, nbytes, name)
        offset = addr - self.base
        i = bisect.bisect_right(self._offsets, offset) - 1
        alloc = self._allocs[self._offsets[i]] if i >= 0 else None
        # an empty range may start one past the end (a zero-byte put that carries only its signal)
        if (
            alloc is None
            or offset > (end := alloc.offset + alloc.nbytes)
            or (offset == end and nbytes and alloc.nbytes)
        ):
            raise NotSymmetricError(f"{name} (heap offset {offset}) is in no live allocation (freed?)")
        if offset + nbytes > alloc.offset + alloc.nbytes:
            raise ValueError(
                f"{name} spans {nbytes} bytes from heap offset {offset}, past the end of its "
                f"allocation ({alloc.nbytes} bytes at offset {alloc.offset})"
            )
        return addr

    def check_aligned(self, addr: int, size: int, name: str) -> int:
        if addr % size:  # atomics and waits need a naturally aligned word
            raise ValueError(f"{name} at heap offset {addr - self.base} is not {size}-byte aligned")
        return addr
