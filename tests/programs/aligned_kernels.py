"""A masked fp16 copy for `unishmem compile`'s "aligned" (tests/test_compile_cli.py): compiled as a launch
on aligned tensors with n % 16 == 0 specialises it, as the default (every pointer aligned) and as for
unaligned data."""

import triton.language as tl

import unishmem


@unishmem.jit
def copy(dst, src, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


SIGNATURE = {"dst": "*fp16", "src": "*fp16", "n": "i32"}
COMPILE = {
    copy: [
        {"signature": SIGNATURE, "constexprs": {"BLOCK": 1024}, "aligned": ["dst", "src", "n"]},
        {"signature": SIGNATURE, "constexprs": {"BLOCK": 1024}},
        {"signature": SIGNATURE, "constexprs": {"BLOCK": 1024}, "aligned": []},
    ]
}
