"""NOTE [debug waits]: with UNISHMEM_DEBUG_WAITS=1 or @unishmem.jit(debug_waits=True), every
device wait of a compiled kernel (signal_wait_until, wait_until*, barriers and syncs; the grid
barrier and the collectives written in Triton through the waits they call) records what it waits
for in a per-PE table in host memory before it waits, and clears it after; every signal it sends
records the last signal to that peer. The hang watchdog (unishmem/hang.py) reads the table.

- The table: int64 words in page-locked host memory that the GPU writes through (a torch pinned
  tensor; under unified addressing its host address is its device address). SLOTS wait slots of
  SLOT_WORDS words, slot = linear program id % SLOTS, then PEERS signal records of 4 words.
  Wait slot: STATE (0 free, else the wait's kind, hang.py's codes), ADDR (the word's device address),
  VALUE (expected, as int64 bits), INFO (our CMP code | dtype code << 8), SITE (crc32 of the calling
  function's module.qualname << 32 | its source line), PID (x | y << 20 | z << 40), ROW (index of
  the device function in _table.ROWS), NELEMS (words of a wait on many). Signal record:
  COUNT, ADDR, VALUE, OP.
- How a kernel finds it: a module global, unishmem_wait_table, defined (with the function that
  reads it) in unishmem_debug_waits.ll, which Triton links as one more extern library. The launch
  hook writes the table's address into each loaded module's global (cuModuleGetGlobal /
  hipModuleGetGlobal), as the vendors' module init writes theirs. The library in `extern_libs`
  is also what turns the mode on while compiling, so it is part of Triton's cache key: a debug
  build never serves a plain launch or the other way round, and with the mode off nothing is
  emitted: the generated code is the same as without this file.
- Thread 0 of a program writes its slot's fields, then STATE with a system-scope release
  exchange (so the host sees the fields before the state); after the wait the same thread clears
  STATE. A slot is shared by programs whose ids agree modulo SLOTS: grids larger than that
  may show one of them only.
"""

from __future__ import annotations

import os

import triton.language as tl

from .._wait_table import (
    ADDR,
    COUNT,
    INFO,
    NELEMS,
    PEER_WORDS,
    PEERS,
    PID,
    ROW,
    S_ADDR,
    S_OP,
    S_VALUE,
    SIGNAL_RECORDS,
    SITE,
    SLOT_WORDS,
    SLOTS,
    STATE,
    VALUE,
    WAIT_KINDS,
    site_key,
)
from ..enums import DTYPES, WAIT_DTYPES
from ._ir import as_scalar, branch, constexpr, extern_call, thread_id

LIBRARY = os.path.join(os.path.dirname(__file__), "unishmem_debug_waits.ll")
LIB_KEY = "unishmem_wait_table"  # extern_libs key; Triton's AMD backend links a library whose key an undefined
READER = "unishmem_wait_table_address"  # call's name contains: the reader of the table's global is called this
# the waited-on word's dtype code in a slot's INFO (unishmem.enums.DTYPES)
_DTYPES = {getattr(tl, name): DTYPES[name] for name in WAIT_DTYPES}


def enabled(semantic) -> bool:
    """Whether the kernel being compiled is a debug-waits build (NOTE [debug waits])."""
    return any(key == LIB_KEY for key, _ in (getattr(semantic.builder.options, "extern_libs", None) or ()))


def env_enabled() -> bool:
    from .._config import get

    return get("UNISHMEM_DEBUG_WAITS")


def _site(generator) -> int:
    fn = getattr(generator.jit_fn, "fn", generator.jit_fn)
    node = generator.cur_node
    line = generator.begin_line + node.lineno if node is not None and hasattr(node, "lineno") else 0
    return (site_key(fn.__module__, fn.__qualname__) << 32) | (line & 0xFFFFFFFF)


def _i64(semantic, value):
    return as_scalar(semantic, value, tl.int64)


def _word(semantic, base, index):
    return semantic.cast(semantic.add(base, _i64(semantic, index * 8), True), tl.pointer_type(tl.int64))


def _guarded(semantic, vendor: str, body):
    """body(table) on thread 0 when the table is set; returns nothing."""
    table = extern_call(semantic, READER, [], tl.int64, pure=True)
    ready = semantic.and_(
        semantic.not_equal(table, _i64(semantic, 0)),
        semantic.equal(thread_id(semantic, vendor), semantic.to_tensor(0)),
    )
    branch(semantic, ready, lambda: body(table))
    return table


def _release(semantic, ptr, value):
    tl.atomic_xchg(ptr, _i64(semantic, value), sem="release", scope="sys", _semantic=semantic)


def _slot(semantic, table):
    pid = [semantic.cast(tl.program_id(a, _semantic=semantic), tl.int64) for a in range(3)]
    nx, ny = (semantic.cast(tl.num_programs(a, _semantic=semantic), tl.int64) for a in range(2))
    linear = semantic.add(
        pid[0], semantic.mul(nx, semantic.add(pid[1], semantic.mul(ny, pid[2], True), True), True), True
    )
    offset = semantic.mul(semantic.mod(linear, _i64(semantic, SLOTS)), _i64(semantic, SLOT_WORDS * 8), True)
    packed = semantic.or_(
        pid[0], semantic.or_(semantic.shl(pid[1], _i64(semantic, 20)), semantic.shl(pid[2], _i64(semantic, 40)))
    )
    return semantic.add(table, offset, True), packed


def around_wait(row, row_index: int, args: dict, semantic, generator, vendor: str, emit):
    """emit() (the wait), recorded before and cleared after (NOTE [debug waits])."""
    kind = WAIT_KINDS[row.name]
    site = _site(generator)
    params = dict(row.params)
    ptr_name = next((n for n, k in row.params if k == "ptr"), None)
    slot = {}

    def record(table):
        base, packed = _slot(semantic, table)
        slot["base"] = base
        fields = {SITE: site, PID: packed, ROW: row_index}
        if ptr_name is not None:
            ptr = args[ptr_name]
            fields[ADDR] = semantic.cast(ptr, tl.int64)
            cmp = constexpr(args["cmp"], f"{row.name}: cmp")
            fields[INFO] = int(cmp) | _DTYPES.get(ptr.type.scalar.element_ty, 0) << 8
            target = "value" if "value" in params else "values"
            fields[VALUE] = args[target] if target == "value" else 0  # _vector forms: values stay in memory
            fields[NELEMS] = args["nelems"] if "nelems" in params else 1
        for index, value in fields.items():
            tl.store(_word(semantic, base, index), _i64(semantic, value), _semantic=semantic)
        _release(semantic, _word(semantic, base, STATE), kind)

    _guarded(semantic, vendor, record)
    value = emit()
    _guarded(semantic, vendor, lambda table: _release(semantic, _word(semantic, _slot(semantic, table)[0], STATE), 0))
    return value


def after_signal(row, args: dict, semantic, vendor: str) -> None:
    """Record the signal a program just sent: the last one to each peer (NOTE [debug waits])."""

    def record(table):
        pe = semantic.cast(args["pe"], tl.int64)
        offset = semantic.mul(semantic.mod(pe, _i64(semantic, PEERS)), _i64(semantic, PEER_WORDS * 8), True)
        base = semantic.add(semantic.add(table, _i64(semantic, SIGNAL_RECORDS * 8), True), offset, True)
        for index, value in (
            (S_ADDR, semantic.cast(args["sig"], tl.int64)),
            (S_VALUE, args["value"]),
            (S_OP, int(constexpr(args["op"], f"{row.name}: op"))),
        ):
            tl.store(_word(semantic, base, index), _i64(semantic, value), _semantic=semantic)
        tl.atomic_add(_word(semantic, base, COUNT), _i64(semantic, 1), sem="release", scope="sys", _semantic=semantic)

    _guarded(semantic, vendor, record)
