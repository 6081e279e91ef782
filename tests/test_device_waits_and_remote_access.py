"""Device library v2 under TRITON_INTERPRET=1 on the host backend, at 2 and 4 PEs: typed put with
signal, waits on many words, strided and tile puts, direct remote loads and stores, the grid
barrier, consume_token, the once-per-launch rule for device collectives; and the host waits on
many words. References are computed with torch from what each PE sent."""

import device_kernels
import torch
import triton.language as tl
from spmd import spmd

import unishmem
import unishmem.language as shl
from unishmem import CMP, UnishmemError

SPMD_ENV = {"TRITON_INTERPRET": "1", "UNISHMEM_DEADLOCK_TIMEOUT": "3"}
SIZES = (2, 4)


def ring(rt):
    return (rt.my_pe + 1) % rt.n_pes, (rt.my_pe - 1) % rt.n_pes


@unishmem.jit
def typed_put_signal(dst, src, sig, SCOPE: tl.constexpr, N: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    pid = tl.program_id(0)
    offs = pid * N + tl.arange(0, N)
    tl.store(src + offs, tl.load(src + offs) * 2)  # staged just before the send: what must arrive
    if SCOPE == 0:
        shl.put_signal(dst + pid * N, src + pid * N, N, sig, 1, shl.SIGNAL_ADD, peer)
    elif SCOPE == 1:
        shl.put_signal_nbi(dst + pid * N, src + pid * N, N, sig, 1, shl.SIGNAL_ADD, peer)
    elif SCOPE == 2:
        shl.put_signal_block(dst + pid * N, src + pid * N, N, sig, 1, shl.SIGNAL_ADD, peer)
    elif SCOPE == 3:
        shl.put_signal_nbi_block(dst + pid * N, src + pid * N, N, sig, 1, shl.SIGNAL_ADD, peer)
    elif SCOPE == 4:
        shl.put_signal_warp(dst + pid * N, src + pid * N, N, sig, 1, shl.SIGNAL_ADD, peer)
    else:
        shl.put_signal_nbi_warp(dst + pid * N, src + pid * N, N, sig, 1, shl.SIGNAL_ADD, peer)
    shl.signal_wait_until(sig, shl.CMP_GE, tl.num_programs(0))


@spmd(sizes=SIZES)
def test_typed_put_signal_every_scope(rt):
    right, left = ring(rt)
    n, programs = 16, 3
    for dtype in (torch.float32, torch.int64, torch.int8):  # (the interpreter's bfloat16 arithmetic is its bits')
        for scope in range(6):
            src = rt.empty(n * programs, dtype=dtype)
            dst = rt.zeros(n * programs, dtype=dtype)
            sig = rt.signals(1)
            src.copy_(torch.arange(n * programs) + 10 * rt.my_pe + scope)
            rt.barrier_all()
            typed_put_signal[(programs,)](dst, src, sig, SCOPE=scope, N=n)
            expect = ((torch.arange(n * programs) + 10 * left + scope) * 2).to(dtype)
            assert torch.equal(dst, expect), (dtype, scope, dst)
            assert rt.signal_fetch(sig) == programs  # ADD counted once per program
            rt.barrier_all()
            for t in (src, dst, sig):
                rt.free(t)


@unishmem.jit
def many_waits(ivars, values, indices, out, KIND: tl.constexpr, N: tl.constexpr):
    # program 0 sets words of the right neighbour; program 1 waits on this PE's words
    me = shl.my_pe()
    right = (me + 1) % shl.n_pes()
    if tl.program_id(0) == 0:
        shl.p(ivars + (me * 3 + 1) % N, me + 5, right)
        shl.p(ivars + (me * 3 + 2) % N, me + 5, right)
    else:
        left = (me + shl.n_pes() - 1) % shl.n_pes()
        if KIND == 0:
            shl.wait_until_all(ivars + (left * 3 + 1) % N, 1, shl.CMP_EQ, left + 5)
            tl.store(out, 1)
        elif KIND == 1:
            tl.store(out, shl.wait_until_any(ivars, N, shl.CMP_EQ, left + 5))
        elif KIND == 2:
            tl.store(out, shl.wait_until_some(ivars, N, indices, shl.CMP_NE, 0))
        elif KIND == 3:
            tl.store(out, shl.wait_until_any_vector(ivars, N, shl.CMP_GE, values))
        elif KIND == 4:
            tl.store(out, shl.wait_until_some_vector(ivars, N, indices, shl.CMP_GE, values))
        else:
            shl.wait_until_all_vector(ivars, N, shl.CMP_GE, values)
            tl.store(out, 1)


@spmd(sizes=SIZES)
def test_waits_on_many_words(rt):
    right, left = ring(rt)
    n = 8
    first, second = (left * 3 + 1) % n, (left * 3 + 2) % n
    for kind in range(6):
        ivars = rt.zeros(n, dtype=torch.int64)
        values = torch.full((n,), 2**40, dtype=torch.int64)  # unreachable, but for the two words set
        values[second] = left + 5
        if kind == 5:
            values = torch.zeros(n, dtype=torch.int64)  # every word: >= 0 holds at once
        indices = torch.full((n,), -1, dtype=torch.int64)
        out = torch.full((1,), -1, dtype=torch.int64)
        rt.barrier_all()
        many_waits[(2,)](ivars, values, indices, out, KIND=kind, N=n)
        rt.barrier_all()  # every PE's program 0 has set its words
        if kind in (0, 5):
            assert out.item() == 1, kind
        elif kind == 1:
            assert out.item() in (first, second), (kind, out)
        elif kind == 3:
            assert out.item() == second, (kind, out)
        else:
            count = out.item()
            found = indices[:count].tolist()
            expect = [second] if kind == 4 else sorted({first, second})
            assert set(found) <= set(expect) and found and sorted(found) == found, (kind, found)
        assert ivars[first].item() == left + 5 and ivars[second].item() == left + 5
        rt.free(ivars)


@spmd(sizes=SIZES)
def test_host_waits_on_many_words(rt):
    right, left = ring(rt)
    ivars = rt.zeros(6, dtype=torch.int32)
    rt.barrier_all()
    rt.put(ivars[3:5], torch.tensor([rt.my_pe + 1, rt.my_pe + 2], dtype=torch.int32), right)
    assert rt.wait_until_any(ivars, CMP.GT, 0) in (3, 4)
    assert rt.wait_until_some(ivars, CMP.EQ, [0, 0, 0, left + 1, left + 2, 9]) == [0, 1, 2, 3, 4]
    rt.wait_until_all(ivars[3:5], CMP.GE, 1)
    rt.wait_until_all(ivars, CMP.EQ, torch.tensor([0, 0, 0, left + 1, left + 2, 0]))
    for bad, message in (
        ((ivars, CMP.EQ, [1, 2]), "2 values for 6 words"),
        ((torch.zeros(3, dtype=torch.int32), CMP.EQ, 0), "not in the symmetric heap"),
        ((rt.zeros(2, dtype=torch.float32), CMP.EQ, 0), "must be a non-empty contiguous"),
    ):
        try:
            rt.wait_until_all(*bad)
        except (TypeError, ValueError, unishmem.NotSymmetricError) as e:
            assert message in str(e), e
        else:
            raise AssertionError(f"no error for {message}")
    rt.barrier_all()
    rt.free(ivars)


@unishmem.jit
def strided(dst, src, SCOPE: tl.constexpr, N: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    if SCOPE == 0:
        shl.iput(dst, src, 2, 3, N, peer)
    elif SCOPE == 1:
        shl.iput_block(dst, src, 2, 3, N, peer)
    elif SCOPE == 2:
        shl.iget(dst, src, 2, 3, N, peer)
    else:
        shl.iget_block(dst, src, 2, 3, N, peer)


@unishmem.jit
def tile_put(dst, src, ROWS: tl.constexpr, COLS: tl.constexpr, LD_DST: tl.constexpr, LD_SRC: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    shl.put_tile_block(dst + 1, LD_DST, src + 2, LD_SRC, ROWS, COLS * 4, peer)


@spmd(sizes=SIZES)
def test_strided_and_tile_puts(rt):
    right, left = ring(rt)
    n = 5
    src = rt.empty(3 * n, dtype=torch.int32)
    dst = rt.zeros(2 * n, dtype=torch.int32)
    src.copy_(torch.arange(3 * n, dtype=torch.int32) + 100 * rt.my_pe)
    for scope in range(4):
        dst.zero_()
        rt.barrier_all()
        strided[(1,)](dst, src, SCOPE=scope, N=n)
        rt.barrier_all()
        sender = left if scope < 2 else right  # a put lands here from the left; a get reads the right
        expect = torch.zeros(2 * n, dtype=torch.int32)
        expect[::2] = (torch.arange(3 * n, dtype=torch.int32) + 100 * sender)[::3]
        assert torch.equal(dst, expect), (scope, dst)
    a = rt.empty((6, 8), dtype=torch.float32)
    b = rt.zeros((5, 10), dtype=torch.float32)
    a.copy_(torch.arange(48, dtype=torch.float32).reshape(6, 8) + 1000 * rt.my_pe)
    rt.barrier_all()
    tile_put[(1,)](b, a, ROWS=4, COLS=3, LD_DST=10, LD_SRC=8)
    rt.barrier_all()
    expect = torch.zeros(5, 10)
    expect.view(-1)[1:].unfold(0, 3, 10)[:4].copy_(
        (torch.arange(48.0).reshape(6, 8) + 1000 * left).view(-1)[2:].unfold(0, 3, 8)[:4]
    )
    assert torch.equal(b, expect), b
    rt.barrier_all()
    for t in (src, dst, a, b):
        rt.free(t)


@unishmem.jit
def direct_access(buf, out, N: tl.constexpr):
    me = shl.my_pe()
    peer = (me + 1) % shl.n_pes()
    offs = tl.arange(0, N)
    shl.store_remote(buf + offs, offs + me * 100, peer, mask=offs < N - 2)
    shl.barrier_all()
    tl.store(out + offs, shl.load_remote(buf + offs, peer, mask=offs < N - 1, other=-1))
    tl.store(out + N, shl.load_remote(buf, peer))


@spmd(sizes=SIZES)
def test_load_and_store_remote_with_masks(rt):
    right, left = ring(rt)
    n = 8
    buf = rt.full((n,), 7, dtype=torch.int32)
    out = torch.zeros(n + 1, dtype=torch.int32)
    rt.barrier_all()
    direct_access[(1,)](buf, out, N=n)
    expect_buf = torch.cat([torch.arange(n - 2, dtype=torch.int32) + left * 100, torch.full((2,), 7)])
    assert torch.equal(buf, expect_buf.to(torch.int32)), buf
    right_buf = torch.cat([torch.arange(n - 2) + rt.my_pe * 100, torch.tensor([7, -1])]).to(torch.int32)
    assert torch.equal(out[:n], right_buf) and out[n].item() == rt.my_pe * 100, out
    rt.barrier_all()
    rt.free(buf)


@unishmem.jit(resident=8)
def persistent(slots, seen, counter, ROUNDS: tl.constexpr):
    # every program of every PE writes its slot on the right neighbour, then all meet
    pid = tl.program_id(0)
    n = tl.num_programs(0)
    me = shl.my_pe()
    right = (me + 1) % shl.n_pes()
    for r in range(ROUNDS):
        shl.p(slots + pid, (me + 1) * 1000 + r * 10 + pid, right)
        shl.quiet()
        shl.barrier_all_grid(counter)
        total = 0
        for i in range(n):
            total += tl.load(slots + i, volatile=True)
        tl.store(seen + r * n + pid, total)
        shl.barrier_all_grid(counter)  # no program overwrites a slot another still reads


@spmd(sizes=SIZES)
def test_grid_barrier_orders_every_program_of_every_pe(rt):
    right, left = ring(rt)
    programs, rounds = 4, 3
    slots = rt.zeros(programs, dtype=torch.int64)
    counter = rt.zeros(1, dtype=torch.int64)
    seen = torch.zeros(rounds * programs, dtype=torch.int64)
    rt.barrier_all()
    persistent[(programs,)](slots, seen, counter, ROUNDS=rounds, launch_cooperative_grid=True)
    expect = torch.tensor([sum((left + 1) * 1000 + r * 10 + i for i in range(programs)) for r in range(rounds)])
    assert torch.equal(seen.view(rounds, programs), expect[:, None].expand(rounds, programs)), seen
    signal = rt.signals(1)  # a uint64 signal word counts as well as an int64 one
    seen.zero_()
    persistent[(programs,)](slots, seen, signal, ROUNDS=rounds, launch_cooperative_grid=True)
    assert torch.equal(seen.view(rounds, programs), expect[:, None].expand(rounds, programs)), seen
    try:
        persistent[(programs * 3,)](slots, seen, counter, ROUNDS=rounds, launch_cooperative_grid=True)
    except UnishmemError as e:
        assert "a cooperative launch of 12 programs needs them all resident, and at most 8 are here" in str(e), e
    else:
        raise AssertionError("a cooperative launch larger than the resident programs was accepted")
    rt.barrier_all()
    rt.free(slots)
    rt.free(counter)
    rt.free(signal)


@unishmem.jit
def guarded_load(data, sig, out, N: tl.constexpr):
    token = shl.signal_wait_until(sig, shl.CMP_EQ, 1)
    offs = shl.consume_token(data + tl.arange(0, N), token)
    tl.store(out + tl.arange(0, N), tl.load(offs))


@unishmem.jit
def every_program_barriers(buf):
    shl.barrier_all()


@spmd(sizes=SIZES)
def test_consume_token_and_one_collective_caller_per_launch(rt):
    right, left = ring(rt)
    data = rt.empty(4, dtype=torch.float32)
    data.fill_(rt.my_pe)
    sig = rt.signals(1)
    rt.barrier_all()
    rt.put_signal(data, torch.full((4,), float(rt.my_pe + 10)), sig, 1, right, unishmem.SIGNAL.SET)
    out = torch.zeros(4)
    guarded_load[(1,)](data, sig, out, N=4)
    assert torch.equal(out, torch.full((4,), float(left + 10)))
    try:
        every_program_barriers[(2,)](data)
    except UnishmemError as e:
        assert "called by program (1, 0, 0) of a launch whose program (0, 0, 0) called a device collective" in str(e)
    else:
        raise AssertionError("two programs' barrier_all were accepted")
    rt.barrier_all()  # the job goes on
    rt.free(data)
    rt.free(sig)


@unishmem.jit
def block_wait(ivars):
    shl.wait_until(ivars + tl.arange(0, 4), shl.CMP_EQ, 0)


@spmd(sizes=(2,))
def test_a_block_passed_to_a_scalar_wait_is_refused(rt):
    ivars = rt.zeros(4, dtype=torch.int64)
    try:
        block_wait[(1,)](ivars)
    except ValueError as e:
        assert (
            "wait_until: ptr must be a scalar, got a block of shape [4] (wait on many words with "
            "wait_until_all/any/some)" in str(e)
        ), e
    else:
        raise AssertionError("a block of pointers was accepted")
    rt.barrier_all()
    rt.free(ivars)


@unishmem.jit
def wait_on_a_peer(sig, words, out, N: tl.constexpr):
    me = shl.my_pe()
    right = (me + 1) % shl.n_pes()
    offs = tl.arange(0, N)
    tl.store(words + offs, tl.full((N,), 1, tl.int64) * (me + 1))
    shl.signal_op(sig, me + 1, shl.SIGNAL_SET, me)
    theirs = shl.remote_ptr(sig, right)  # the neighbour's own words, waited on where they are
    seen = shl.signal_wait_until(theirs, shl.CMP_EQ, right + 1)
    shl.wait_until(shl.remote_ptr(words, right) + N - 1, shl.CMP_EQ, right + 1)
    shl.wait_until_all(shl.remote_ptr(words, right), N, shl.CMP_EQ, right + 1)
    tl.store(out, seen.to(tl.int64))
    tl.store(out + 1, shl.signal_fetch(theirs).to(tl.int64))
    tl.store(out + 2, shl.test(shl.remote_ptr(words, right), shl.CMP_EQ, right + 1).to(tl.int64))


@spmd(sizes=SIZES)
def test_waits_on_a_peers_words(rt):
    """A wait on a word of a peer (through remote_ptr), as compiled waits load from any address the GPU
    reaches: the interpreter waits on that PE's word, checked as this PE's copy of it is."""
    right, _ = ring(rt)
    sig, words, out = rt.signals(1), rt.zeros(8, dtype=torch.int64), rt.zeros(3, dtype=torch.int64)
    wait_on_a_peer[(1,)](sig, words, out, N=8)
    assert out.tolist() == [right + 1, right + 1, 1]
    rt.barrier_all()
    for t in (sig, words, out):
        rt.free(t)


@unishmem.jit
def wait_forever_on_a_peer(sig):
    right = (shl.my_pe() + 1) % shl.n_pes()
    shl.signal_wait_until(shl.remote_ptr(sig, right), shl.CMP_EQ, 5)


@spmd(sizes=(2,))
def test_a_hang_on_a_peers_word_names_the_peer(rt):
    right, _ = ring(rt)
    sig = rt.signals(1)
    offset = sig.data_ptr() - rt.heap_base
    try:
        wait_forever_on_a_peer[(1,)](sig)
    except unishmem.DeadlockError as e:
        report = str(e)
    else:
        raise AssertionError("no DeadlockError")
    mine = next(line for line in report.splitlines() if line.startswith(f"PE {rt.my_pe} waits for "))
    assert mine.startswith(f"PE {rt.my_pe} waits for signal at heap offset {offset} of PE {right} to become == 5"), (
        report
    )
    assert report.splitlines()[report.splitlines().index(mine) + 1].startswith("  can never be satisfied: "), report
    rt.free(sig)


@unishmem.jit
def token_of_a_range_wait(words, values, out, VECTOR: tl.constexpr, N: tl.constexpr):
    me = shl.my_pe()
    offs = tl.arange(0, N)
    tl.store(words + offs, offs + me)
    if VECTOR:
        token = shl.wait_until_all_vector(words, N, shl.CMP_EQ, values)
    else:
        token = shl.wait_until_all(words + N - 1, 1, shl.CMP_EQ, N - 1 + me)
    tl.store(out, token.to(tl.int64))
    tl.store(out + 1, tl.load(shl.consume_token(words, token) + N - 1))


@spmd(sizes=SIZES)
def test_a_range_wait_returns_a_token_consume_token_takes(rt):
    n = 8
    words, values, out = rt.zeros(n, dtype=torch.int64), rt.empty(n, dtype=torch.int64), rt.zeros(2, dtype=torch.int64)
    values.copy_(torch.arange(n) + rt.my_pe)
    for vector in (False, True):
        token_of_a_range_wait[(1,)](words, values, out, VECTOR=vector, N=n)
        assert out.tolist() == [n if vector else 1, n - 1 + rt.my_pe], (vector, out)
    rt.barrier_all()
    for t in (words, values, out):
        rt.free(t)


# What consume_token refuses, in the same words interpreted as compiled (tests/test_device_compile.py
# compiles the same body, device_kernels' consume_nothing); a tensor descriptor it takes.
@unishmem.jit
def consume_nothing(buf, out, sig, N: tl.constexpr):
    tl.store(out, tl.load(shl.consume_token(buf, None)))


@unishmem.jit
def consume_a_descriptor(buf, out, sig, N: tl.constexpr):
    desc = tl.make_tensor_descriptor(buf, shape=[N], strides=[1], block_shape=[N])
    token = shl.signal_wait_until(sig, shl.CMP_GE, 1)
    tl.store(out + tl.arange(0, N), shl.consume_token(desc, token).load([0]))


@spmd(sizes=(2,))
def test_consume_token_refuses_none_and_takes_a_descriptor(rt):
    buf, out, sig = rt.zeros(8), rt.zeros(8), rt.signals(1)
    try:
        consume_nothing[(1,)](buf, out, sig, N=8)
    except ValueError as e:
        assert device_kernels.CONSUME_NOTHING in str(e), e
    else:
        raise AssertionError("consume_token took None")
    buf.copy_(torch.arange(8.0) + rt.my_pe)
    rt.signal_op(sig, 1, rt.my_pe)
    consume_a_descriptor[(1,)](buf, out, sig, N=8)
    assert torch.equal(out, torch.arange(8.0) + rt.my_pe)
    rt.barrier_all()
    for t in (buf, out, sig):
        rt.free(t)
