"""Under TRITON_INTERPRET=1 a device function refuses what the host API refuses, with the same error:
both call the same address-level checks of the heap (NOTE [address checks] in _heap.py). Each case below was
accepted, or failed with another error, while language/_host.py had checks of its own."""

import pytest
import torch
import triton.language as tl
from spmd import spmd

import unishmem
import unishmem.language as shl

SPMD_ENV = {"TRITON_INTERPRET": "1", "UNISHMEM_DEADLOCK_TIMEOUT": "3"}


@unishmem.jit
def putmem(dst, src, NBYTES: tl.constexpr, pe):
    shl.putmem(dst, src, NBYTES, pe)


@unishmem.jit
def getmem(dst, src, NBYTES: tl.constexpr, pe):
    shl.getmem(dst, src, NBYTES, pe)


@unishmem.jit
def reduce(team, dst, src, N: tl.constexpr, OP: tl.constexpr):
    shl.reduce(team, dst, src, N, OP)


@unishmem.jit
def fcollect(team, dst, src, N: tl.constexpr):
    shl.fcollect(team, dst, src, N)


@unishmem.jit
def signal_wait_until(sig, CMP: tl.constexpr, VALUE: tl.constexpr):
    shl.signal_wait_until(sig, CMP, VALUE)


@unishmem.jit
def wait_until(ivar, CMP: tl.constexpr, VALUE: tl.constexpr):
    shl.wait_until(ivar, CMP, VALUE)


@unishmem.jit
def signal_op(sig, VALUE: tl.constexpr, OP: tl.constexpr, pe):
    shl.signal_op(sig, VALUE, OP, pe)


def same_error(host_call, device_call, device_prefix=""):
    """device_call() raises what host_call() raises: the same type and the same message, after the
    device function's name where the host's words name only the argument."""
    with pytest.raises((unishmem.UnishmemError, ValueError, TypeError)) as want:
        host_call()
    with pytest.raises(type(want.value)) as got:
        device_call()
    expected = device_prefix + str(want.value)
    assert type(got.value) is type(want.value) and str(got.value) == expected, (got.value, want.value)
    return str(want.value)


@spmd(sizes=(2,))
def test_rma_into_a_freed_tensor_is_not_symmetric(rt):
    local = torch.zeros(16, dtype=torch.int32)
    x = rt.zeros(16, dtype=torch.int32)
    # Over the heap, of no allocation's storage (NOTE [allocation identity]): the host API checks it by
    # address, as a device checks a pointer. (A view of x says it was freed: test_errors.py.)
    view = rt.peer(x, rt.my_pe)
    rt.free(x)
    message = same_error(lambda: rt.put(view, local, 0), lambda: putmem[(1,)](view, local, 64, 0))
    assert "dest (heap offset" in message and "is in no live allocation" in message, message
    message = same_error(lambda: rt.get(local, view, 0), lambda: getmem[(1,)](local, view, 64, 0))
    assert "source (heap offset" in message and "is in no live allocation" in message, message
    # x itself now lies off the heap (NOTE [freed memory]): a kernel given it gets no heap address
    with pytest.raises(unishmem.NotSymmetricError, match=r"dest \(at 0x\w+, 64 bytes\) is not in the symmetric heap"):
        putmem[(1,)](x, local, 64, 0)


@spmd(sizes=(2,))
def test_rma_past_the_end_of_an_allocation(rt):
    x, after = rt.zeros(16, dtype=torch.int32), rt.zeros(16, dtype=torch.int32)
    local = torch.zeros(32, dtype=torch.int32)
    past_end = torch.as_strided(rt.peer(x, rt.my_pe), (32,), (1,))  # x's own storage ends with x
    message = same_error(lambda: rt.put(past_end, local, 1), lambda: putmem[(1,)](x, local, 128, 1))
    assert "past the end of its allocation (64 bytes" in message, message
    same_error(lambda: rt.get(local, past_end, 1), lambda: getmem[(1,)](local, x, 128, 1))
    rt.barrier_all()
    rt.free(x)
    rt.free(after)


@spmd(sizes=(2,))
def test_reduce_refuses_an_unknown_op_and_dtype(rt):
    team = rt.team_world.handle
    x, y = rt.zeros(8), rt.zeros(8)
    message = same_error(lambda: rt.reduce(x, y, "mean"), lambda: reduce[(1,)](team, x, y, 8, "mean"))
    assert message == "reduce: op='mean' is not one of sum, min, max, prod", message
    u, v = rt.zeros(8, dtype=torch.uint32), rt.zeros(8, dtype=torch.uint32)
    message = same_error(lambda: rt.reduce(u, v), lambda: reduce[(1,)](team, u, v, 8, "sum"))
    assert message.startswith("reduce: dtype torch.uint32 is not supported"), message
    rt.barrier_all()
    for t in (x, y, u, v):
        rt.free(t)


@spmd(sizes=(2,))
def test_collectives_refuse_overlapping_dest_and_source(rt):
    team = rt.team_world.handle
    x = rt.zeros(16)
    message = same_error(lambda: rt.reduce(x[4:12], x[0:8]), lambda: reduce[(1,)](team, x[4:12], x, 8, "sum"))
    assert message == "reduce: dest and source overlap", message
    reduce[(1,)](team, x, x, 8, "sum")  # in place is fine, as for rt.reduce
    gathered = x[0 : 8 * rt.n_pes]
    message = same_error(lambda: rt.fcollect(gathered, x[0:8]), lambda: fcollect[(1,)](team, x, x, 8))
    assert message == "fcollect: dest and source overlap", message
    rt.barrier_all()
    rt.free(x)


@spmd(sizes=(2,))
def test_waits_and_signals_refuse_bad_codes_and_values(rt):
    sig, ivar = rt.signals(1), rt.zeros(1, dtype=torch.int64)
    message = same_error(
        lambda: rt.signal_wait_until(sig, 9, 0), lambda: signal_wait_until[(1,)](sig, 9, 0), "signal_wait_until: "
    )
    assert message == "cmp=9 is not a valid CMP", message
    same_error(lambda: rt.wait_until(ivar, 9, 0), lambda: wait_until[(1,)](ivar, 9, 0), "wait_until: ")
    message = same_error(lambda: rt.signal_op(sig, 1, 0, op=7), lambda: signal_op[(1,)](sig, 1, 7, 0), "signal_op: ")
    assert message == "op=7 is not a valid SIGNAL", message
    assert sig.item() == 0 and ivar.item() == 0
    rt.barrier_all()
    # A value is converted to the signal's uint64, as a compiled call converts it (the host API, which
    # takes Python ints, refuses -1); the backend used to refuse it with a binding's TypeError.
    signal_op[(1,)](sig, -1, 0, rt.my_pe)
    assert sig.view(torch.int64).item() == -1
    rt.barrier_all()
    rt.free(sig)
    rt.free(ivar)
