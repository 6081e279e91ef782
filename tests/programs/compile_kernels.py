"""Kernels for `unishmem compile` (tests/test_compile_cli.py): one that compiles for every target, one
that rocSHMEM cannot compile (it has no fp16 put), one with a type error inside a helper it calls, and one
with no COMPILE entry."""

import triton
import triton.language as tl

import unishmem
import unishmem.language as shl


@unishmem.jit
def ring_p(buf, N: tl.constexpr):
    me = shl.my_pe()
    shl.p(buf + N, me, (me + 1) % shl.n_pes())


@unishmem.jit
def half_p(hbuf, pe):
    shl.p(hbuf, 1.0, pe)


@triton.jit
def _wrap(x):
    return x % tl.num_programs(0)  # uint64 % int32: Triton refuses to mix the signedness


@unishmem.jit
def mixed_sign(words):
    tl.store(words, _wrap(tl.load(words)))


@unishmem.jit
def undeclared(buf, pe, BLOCK: tl.constexpr):
    shl.p(buf, BLOCK, pe)


COMPILE = {
    ring_p: {"signature": {"buf": "*i32"}, "constexprs": {"N": 8}},
    "half_p": [{"signature": {"hbuf": "*fp16", "pe": "i32"}}],
    mixed_sign: {"signature": {"words": "*u64"}},
}
