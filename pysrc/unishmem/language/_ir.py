"""Small builders of Triton IR that the device library's generated functions and its debug waits
share: constants, casts, extern calls, the thread id and an scf.if."""

from __future__ import annotations

import triton.language as tl

from ._vendor import THREAD_ID


def constexpr(value, what: str):
    if isinstance(value, tl.constexpr):
        return value.value
    if isinstance(value, tl.tensor):
        raise ValueError(
            f"{what} must be a compile-time constant (tl.constexpr), such as shl.SIGNAL_SET "
            f"or shl.CMP_EQ, not a run-time value"
        )
    return value


def as_scalar(semantic, value, ty: tl.dtype):
    """A run-time value or constant, as a scalar of type `ty`."""
    value = value.value if isinstance(value, tl.constexpr) else value
    return semantic.cast(semantic.to_tensor(value), ty)


def extern_call(semantic, symbol: str, args: list, ret: tl.dtype, pure: bool = False):
    key = tuple(a.dtype for a in args)
    return tl.core.extern_elementwise("", "", args, {key: (symbol, ret)}, is_pure=pure, _semantic=semantic)


def thread_id(semantic, vendor: str):
    how, what = THREAD_ID[vendor]
    if how == "asm":
        return tl.core.inline_asm_elementwise(what, "=r", [], dtype=tl.int32, is_pure=True, pack=1, _semantic=semantic)
    return semantic.cast(extern_call(semantic, what, [semantic.to_tensor(0)], tl.int64, pure=True), tl.int32)


def branch(semantic, cond, then, otherwise=None, ty=None):
    """An scf.if on a scalar `cond`. With a result type `ty`, both branches give a scalar of it."""
    builder = semantic.builder
    ip = builder.get_insertion_point()
    if_op = builder.create_if_op([ty.to_ir(builder)] if ty else [], cond.handle, otherwise is not None)
    for block, body in ((if_op.get_then_block(), then), (if_op.get_else_block(), otherwise))[: 1 + bool(otherwise)]:
        builder.set_insertion_point_to_start(block)
        value = body()
        if ty is not None:
            builder.create_yield_op([semantic.cast(value, ty).handle])
    builder.restore_insertion_point(ip)
    return tl.tensor(if_op.get_result(0), ty) if ty else None
