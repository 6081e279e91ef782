"""NOTE [Triton implementations]: device functions that unishmem.language writes in Triton itself,
over the table's other functions, where a vendor has no C-linkage symbol for them (a `Triton` entry
in _table.py) or where no vendor has one. A generated builtin calls them through the code generator
it is given (`_generator.call_JitFunction`) when compiling; a row whose `host` is "" also runs its
Triton implementation under TRITON_INTERPRET=1, on the host backend's functions.
"""
import triton
import triton.language as tl

from .. import language as shl


@triton.jit
def iput(dest, source, dst_stride, src_stride, nelems, pe):
    # rocSHMEM has no strided put: one element at a time, each issued once per program (p)
    for i in range(nelems):
        shl.p(dest + i * dst_stride, tl.load(source + i * src_stride), pe)


@triton.jit
def iget(dest, source, dst_stride, src_stride, nelems, pe):
    for i in range(nelems):
        tl.store(dest + i * dst_stride, shl.g(source + i * src_stride, pe))


@triton.jit
def put_tile_block(dest, dest_ld, source, source_ld, rows, row_bytes, pe):
    for r in range(rows):  # one blocking row put each: the tile's rows need not be contiguous on either side
        shl.putmem_block(dest + r * dest_ld, source + r * source_ld, row_bytes, pe)


@triton.jit
def _reachable(remote):
    tl.device_assert(remote.to(tl.int64) != 0, "load_remote/store_remote: the peer is not reachable by "
                     "load/store (remote_ptr is null); use get/put for it")
    return remote


@triton.jit
def load_remote(ptr, pe, mask=None, other=None):
    return tl.load(_reachable(shl.remote_ptr(ptr, pe)), mask=mask, other=other)


@triton.jit
def store_remote(ptr, value, pe, mask=None):
    tl.store(_reachable(shl.remote_ptr(ptr, pe)), value, mask=mask)


@triton.jit
def _grid_sync(counter):
    # every program adds 1; the launch has passed once the counter reaches the next multiple of
    # the program count (monotonic: no reset, so consecutive barriers cannot mix)
    n = tl.num_programs(0) * tl.num_programs(1) * tl.num_programs(2)
    arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    shl.wait_until(counter, shl.CMP_GE, arrived - arrived % n + n)


@triton.jit
def barrier_all_grid(counter):
    _grid_sync(counter)
    if tl.program_id(0) + tl.program_id(1) + tl.program_id(2) == 0:
        shl.barrier_all()
    _grid_sync(counter)
