"""NOTE [device table]: every device function of unishmem.language is one row here: its unified
name, parameters, result, who issues it, its host implementation (interpreter) and its symbol in
each vendor's bitcode. unishmem.language generates the public functions from these rows.

A vendor's entry is a Sym (its bitcode has the function with C linkage), Missing (no such function:
compiling for it fails with the reason) or Triton (NOTE [triton rows]: unishmem.language implements
it in Triton for that vendor, in _triton_impl.py).

Symbol templates are filled per target: {pre}/{suf} from the scope (see _vendor.SCOPES), {T} from
the element type of the first pointer parameter, {op} from a reduction op, {sigop} from a signal op.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Sym:
    template: str
    args: tuple[str, ...] | None = None  # parameters passed, in order (default: all but name-only ones)
    arg_kinds: dict = field(default_factory=dict)  # per-vendor kind overrides of parameters
    void: bool = False  # the vendor function returns nothing (result comes from `then`)
    then: Sym | None = None  # a second call whose result is the function's result


NULL = "NULL"  # in Sym.args: a null pointer (the OpenSHMEM `status` argument: no word excluded)
WORLD = "WORLD"  # in Sym.args: the vendor's world team (_vendor.WORLD_TEAM)


@dataclass(frozen=True)
class Missing:
    reason: str


@dataclass(frozen=True)
class Triton:
    impl: str  # the @triton.jit function of _triton_impl.py that implements the row (NOTE [Triton implementations])


@dataclass(frozen=True)
class DeviceFn:
    name: str
    params: tuple[tuple[str, str], ...]  # (name, kind); kinds: ptr size pe u64 val team sigop cmp redop
    # None, "i32", "u64", "val" (element type), "ptr" (first pointer's type), "token" (an int64 made once the
    # call has returned, for consume_token: the number of words waited on)
    result: str | None
    issue: str  # "all": every thread (block scope, queries); "one": thread 0;
    # "warp": the first warp; "*_synced": between two block barriers,
    # so the other threads see its effect (blocking gets, quiet, barriers);
    # "*_sends": after a block barrier, so it sends what every thread
    # stored before it (puts of every scope, NOTE [execution rule])
    host: str  # name of the host implementation in _host.py
    symbols: dict  # vendor -> Sym | Missing | Triton
    scope: str = ""  # "", "_block" or "_warp": picks {pre}/{suf}
    types: str | None = None  # type table for {T}: "rma", "wait" or "reduce"
    doc: str = ""
    optional: tuple[str, ...] = ()  # trailing parameters that default to None (masks)
    blocks: bool = False  # its pointers may be blocks (elementwise); else scalars only
    once_per_grid: bool = False  # a collective the vendors allow from one program of a launch


MEM = (("dest", "ptr"), ("source", "ptr"), ("nbytes", "size"), ("pe", "pe"))
TYPED = (("dest", "ptr"), ("source", "ptr"), ("nelems", "size"), ("pe", "pe"))
SIGNALED = (
    ("dest", "ptr"),
    ("source", "ptr"),
    ("nbytes", "size"),
    ("sig", "ptr"),
    ("value", "u64"),
    ("op", "sigop"),
    ("pe", "pe"),
)
TYPED_SIGNALED = (
    ("dest", "ptr"),
    ("source", "ptr"),
    ("nelems", "size"),
    ("sig", "ptr"),
    ("value", "u64"),
    ("op", "sigop"),
    ("pe", "pe"),
)
ISSUE_OF_SCOPE = {"": "one", "_block": "all", "_warp": "warp"}


def issue_of(scope: str, reads_local: bool = False, blocking_get: bool = False) -> str:
    issue = ISSUE_OF_SCOPE[scope]
    if blocking_get and issue != "all":
        return issue + "_synced"
    return issue + "_sends" if reads_local else issue


# rocSHMEM's src/device/rocshmem_wrapper.cc exports no C-linkage team query, team barrier/sync,
# broadcast, fcollect, alltoall or reduction: those are C++ only and take a rocshmem_team_t pointer
# (there is no rocshmem_<T>_<op>_reduce_wg). unishmem.language computes them in Triton from the
# team descriptor (NOTE [team descriptor]) over my_pe, putmem_wg, uint64 atomics and waits.


def both(template: str, **kw) -> dict:
    return {"nvshmem": Sym(template, **kw), "rocshmem": Sym(template, **kw)}


def in_triton(impl: str) -> dict:
    return {"nvshmem": Triton(impl), "rocshmem": Triton(impl)}


STRIDED = (
    ("dest", "ptr"),
    ("source", "ptr"),
    ("dst_stride", "size"),
    ("src_stride", "size"),
    ("nelems", "size"),
    ("pe", "pe"),
)


def _many_word_waits() -> list[DeviceFn]:
    """wait_until_all/any/some on nelems consecutive words (+ _vector: a value per word). Thread 0
    waits between block barriers (NOTE [execution rule]); its index or count reaches every thread."""
    rows = []
    for vector in ("", "_vector"):
        target = ("values", "ptr") if vector else ("value", "val")
        for kind, extra, result in (("all", (), "token"), ("any", (), "i64"), ("some", (("indices", "ptr"),), "i64")):
            params = (("ivars", "ptr"), ("nelems", "size"), *extra, ("cmp", "cmp"), target)
            args = ("ivars", "nelems", *(n for n, _ in extra), NULL, "cmp", target[0])
            name = f"wait_until_{kind}{vector}"
            rows.append(
                DeviceFn(
                    name,
                    params,
                    result,
                    "one_synced",
                    name,
                    both("{pre}{T}_" + name, args=args),
                    types="wait",
                    doc=_WAIT_DOCS[kind] + (" Word i compares with values[i]." if vector else ""),
                )
            )
    return rows


_WAIT_DOCS = {
    "all": "Wait until each of the nelems words at ivars compares true; returns nelems, made once the wait is "
    "over: a token for consume_token.",
    "any": "Wait until one of the nelems words at ivars compares true; returns its index.",
    "some": "Wait until at least one of the nelems words at ivars compares true; writes the indices of those "
    "that do to indices (int64) and returns how many.",
}


def _scoped_team_syncs() -> list[DeviceFn]:
    """barrier and sync on a team, by the whole program (_block) or its first warp (_warp); rocSHMEM has no
    C-linkage team barrier: there the whole program runs unishmem's Triton one."""
    rows = []
    for base, nvshmem in (("barrier", "nvshmemx_barrier"), ("sync", "nvshmemx_team_sync")):
        for scope in ("_block", "_warp"):
            rows.append(
                DeviceFn(
                    base + scope,
                    (("team", "team"),),
                    None,
                    "all" if scope == "_block" else "warp_synced",
                    base,
                    {"nvshmem": Sym(nvshmem + scope), "rocshmem": Triton(base + "_impl")},
                    scope=scope,
                )
            )
    return rows


def _rows() -> list[DeviceFn]:
    rows = [
        DeviceFn("my_pe", (), "i32", "all", "my_pe", both("{pre}my_pe"), doc="This PE's number in the world team."),
        DeviceFn("n_pes", (), "i32", "all", "n_pes", both("{pre}n_pes"), doc="The number of PEs in the world team."),
        DeviceFn(
            "team_my_pe",
            (("team", "team"),),
            "i32",
            "all",
            "team_my_pe",
            {"nvshmem": Sym("nvshmem_team_my_pe"), "rocshmem": Triton("team_my_pe_impl")},
        ),
        DeviceFn(
            "team_n_pes",
            (("team", "team"),),
            "i32",
            "all",
            "team_n_pes",
            {"nvshmem": Sym("nvshmem_team_n_pes"), "rocshmem": Triton("team_n_pes_impl")},
        ),
        DeviceFn(
            "team_translate_pe",
            (("src_team", "team"), ("pe", "pe"), ("dst_team", "team")),
            "i32",
            "all",
            "team_translate_pe",
            {"nvshmem": Sym("nvshmem_team_translate_pe"), "rocshmem": Triton("team_translate_pe_impl")},
        ),
        DeviceFn(
            "remote_ptr",
            (("ptr", "ptr"), ("pe", "pe")),
            "ptr",
            "all",
            "remote_ptr",
            both("{pre}ptr"),
            blocks=True,
            doc="`ptr` (a pointer or a block of them) on PE `pe`, for direct loads and stores; "
            "null where not reachable.",
        ),
        DeviceFn(
            "mc_ptr",
            (("ptr", "ptr"),),
            "ptr",
            "all",
            "mc_ptr",
            {"nvshmem": Sym("nvshmemx_mc_ptr", args=(WORLD, "ptr")), "rocshmem": Triton("no_multicast")},
            doc="The multicast address of `ptr` for the world team (a store to it reaches every PE's copy; "
            "NVLink SHARP on NVSwitch machines), or null where the machine has none; always null on rocSHMEM "
            "and on the host backend, which have no multicast.",
        ),
        DeviceFn(
            "load_remote",
            (("ptr", "ptr"), ("pe", "pe"), ("mask", "val"), ("other", "val")),
            "val",
            "all",
            "",
            in_triton("load_remote"),
            optional=("mask", "other"),
            blocks=True,
            doc="A volatile tl.load of `ptr` (a pointer or block of them) on PE `pe`, which must be reachable "
            "by load/store: when it is not, a device assertion says so when compiled with TRITON_DEBUG=1, "
            "and a ValueError always does under TRITON_INTERPRET=1. Every call reads memory (PTX "
            "ld.volatile, relaxed at system scope; an LLVM volatile load on AMD), so a loop may spin on "
            "it; it orders nothing: loads of data the value guards need consume_token or fence.",
        ),
        DeviceFn(
            "store_remote",
            (("ptr", "ptr"), ("value", "val"), ("pe", "pe"), ("mask", "val")),
            None,
            "all",
            "",
            in_triton("store_remote"),
            optional=("mask",),
            blocks=True,
            doc="tl.store of `value` to `ptr` on PE `pe`, which must be reachable by load/store.",
        ),
        DeviceFn(
            "put_tile_block",
            (
                ("dest", "ptr"),
                ("dest_ld", "size"),
                ("source", "ptr"),
                ("source_ld", "size"),
                ("rows", "size"),
                ("row_bytes", "size"),
                ("pe", "pe"),
            ),
            None,
            "all",
            "",
            in_triton("put_tile_block"),
            doc="Put `rows` rows of `row_bytes` bytes, `source_ld` elements apart at source, to rows "
            "`dest_ld` elements apart at PE `pe`'s dest; complete for the source on return.",
        ),
        DeviceFn(
            "barrier_all_grid",
            (("counter", "ptr"),),
            None,
            "all",
            "",
            in_triton("barrier_all_grid"),
            doc="Every program of the launch, then every PE, then every program again. `counter`: a "
            "zeroed int64 word (or a uint64 signal word) of the symmetric heap kept for this use (never reset); the launch must "
            "be cooperative (launch_cooperative_grid=True) so that all its programs are resident.",
        ),
        DeviceFn(
            "p",
            (("dest", "ptr"), ("value", "val"), ("pe", "pe")),
            None,
            "one",
            "p",
            both("{pre}{T}_p"),
            types="rma",
            doc="Store one element into PE `pe`'s `dest`.",
        ),
        DeviceFn(
            "g",
            (("source", "ptr"), ("pe", "pe")),
            "val",
            "all",
            "g",
            both("{pre}{T}_g"),
            types="rma",
            doc="Load one element from PE `pe`'s `source`.",
        ),
        DeviceFn(
            "signal_op",
            (("sig", "ptr"), ("value", "u64"), ("op", "sigop"), ("pe", "pe")),
            None,
            "one",
            "signal_op",
            {
                "nvshmem": Sym("nvshmemx_signal_op"),
                # rocSHMEM has no C-linkage signal_op: a uint64 atomic does the same
                "rocshmem": Sym("rocshmem_uint64_atomic_{sigop}", args=("sig", "value", "pe")),
            },
        ),
        DeviceFn(
            "signal_wait_until",
            (("sig", "ptr"), ("cmp", "cmp"), ("value", "u64")),
            "u64",
            "all",
            "signal_wait_until",
            {
                "nvshmem": Sym("nvshmem_signal_wait_until"),
                "rocshmem": Sym(
                    "rocshmem_uint64_wait_until", void=True, then=Sym("rocshmem_signal_fetch", args=("sig",))
                ),
            },
            doc="Wait until the local signal compares true with `value`; returns the signal's value.",
        ),
        DeviceFn("signal_fetch", (("sig", "ptr"),), "u64", "all", "signal_fetch", both("{pre}signal_fetch")),
        DeviceFn(
            "wait_until",
            (("ptr", "ptr"), ("cmp", "cmp"), ("value", "val")),
            "token",
            "all",
            "wait_until",
            both("{pre}{T}_wait_until"),
            types="wait",
            doc="Wait until the word at ptr compares true; returns 1, made once the wait is over: a token for "
            "consume_token.",
        ),
        DeviceFn(
            "test",
            (("ptr", "ptr"), ("cmp", "cmp"), ("value", "val")),
            "i32",
            "all",
            "test",
            both("{pre}{T}_test"),
            types="wait",
            doc="1 if the local value compares true, else 0.",
        ),
        DeviceFn(
            "fence",
            (),
            None,
            "one_synced",
            "fence",
            both("{pre}fence"),
            doc="Order this PE's puts to each peer before its later puts to that peer.",
        ),
        DeviceFn(
            "quiet", (), None, "one_synced", "quiet", both("{pre}quiet"), doc="Complete every put this PE issued."
        ),
        DeviceFn(
            "quiet_pe",
            (("pe", "pe"),),
            None,
            "one_synced",
            "quiet_pe",
            both("{pre}quiet", args=()),
            doc="Complete every put this PE issued to PE `pe`: a quiet() on both vendors (NVSHMEM has no per-PE "
            "quiet; rocSHMEM's rocshmem_pe_quiet takes an array of PEs in memory, which a program has no place "
            "for), so it also completes the puts to the other PEs.",
        ),
        DeviceFn("barrier_all", (), None, "one_synced", "barrier_all", both("{pre}barrier_all")),
        DeviceFn("sync_all", (), None, "one_synced", "sync_all", both("{pre}sync_all")),
        DeviceFn("barrier_all_block", (), None, "all", "barrier_all", both("{pre}barrier_all{suf}"), scope="_block"),
        DeviceFn("sync_all_block", (), None, "all", "sync_all", both("{pre}sync_all{suf}"), scope="_block"),
        DeviceFn(
            "barrier_all_warp", (), None, "warp_synced", "barrier_all", both("{pre}barrier_all{suf}"), scope="_warp"
        ),
        DeviceFn("sync_all_warp", (), None, "warp_synced", "sync_all", both("{pre}sync_all{suf}"), scope="_warp"),
        DeviceFn(
            "barrier",
            (("team", "team"),),
            None,
            "one_synced",
            "barrier",
            {"nvshmem": Sym("nvshmem_barrier"), "rocshmem": Triton("barrier_impl")},
        ),
        DeviceFn(
            "sync",
            (("team", "team"),),
            None,
            "one_synced",
            "sync",
            {"nvshmem": Sym("nvshmem_team_sync"), "rocshmem": Triton("sync_impl")},
        ),
        *_scoped_team_syncs(),
        # The collectives' rows are alike on purpose: one row per function is the table (NOTE [device table]).
        DeviceFn(
            "broadcast",
            (("team", "team"), ("dest", "ptr"), ("source", "ptr"), ("nelems", "size"), ("root", "pe")),
            None,
            "all",
            "broadcast",
            {"nvshmem": Sym("{pre}{T}_broadcast{suf}"), "rocshmem": Triton("broadcast_impl")},
            scope="_block",
            types="rma",
        ),
        DeviceFn(
            "fcollect",
            (("team", "team"), ("dest", "ptr"), ("source", "ptr"), ("nelems", "size")),
            None,
            "all",
            "fcollect",
            {"nvshmem": Sym("{pre}{T}_fcollect{suf}"), "rocshmem": Triton("fcollect_impl")},
            scope="_block",
            types="rma",
        ),
        *(
            DeviceFn(
                name + "_warp",
                params,
                None,
                "warp_synced",
                name,
                {"nvshmem": Sym("{pre}{T}_" + name + "{suf}"), "rocshmem": Triton(name + "_impl")},
                scope="_warp",
                types="rma",
                doc=f"{name} issued by the program's first warp (NOTE [execution rule]); rocSHMEM has no C-linkage "
                "collective: there the whole program runs unishmem's Triton implementation.",
            )
            for name, params in (
                (
                    "broadcast",
                    (("team", "team"), ("dest", "ptr"), ("source", "ptr"), ("nelems", "size"), ("root", "pe")),
                ),
                ("fcollect", (("team", "team"), ("dest", "ptr"), ("source", "ptr"), ("nelems", "size"))),
            )
        ),
        DeviceFn(
            "alltoall",
            (("team", "team"), ("dest", "ptr"), ("source", "ptr"), ("nelems", "size")),
            None,
            "all",
            "alltoall",
            {"nvshmem": Sym("{pre}{T}_alltoall{suf}"), "rocshmem": Triton("alltoall_impl")},
            scope="_block",
            types="rma",
        ),
        DeviceFn(
            "reduce",
            (("team", "team"), ("dest", "ptr"), ("source", "ptr"), ("nelems", "size"), ("op", "redop")),
            None,
            "all",
            "reduce",
            {"nvshmem": Sym("{pre}{T}_{op}_reduce{suf}"), "rocshmem": Triton("reduce_impl")},
            scope="_block",
            types="reduce",
        ),
    ]
    for scope in ("", "_block", "_warp"):
        for base, host in (("putmem", "put"), ("getmem", "get"), ("putmem_nbi", "put"), ("getmem_nbi", "get")):
            rows.append(
                DeviceFn(
                    base + scope,
                    MEM,
                    None,
                    issue_of(scope, host == "put", base == "getmem"),
                    host,
                    both("{pre}" + base + "{suf}"),
                    scope=scope,
                )
            )
        for base in ("putmem_signal", "putmem_signal_nbi"):
            rows.append(
                DeviceFn(
                    base + scope,
                    SIGNALED,
                    None,
                    issue_of(scope, reads_local=True),
                    "put_signal",
                    both("{pre}" + base + "{suf}"),
                    scope=scope,
                )
            )
    for scope in ("", "_block", "_warp"):
        for base in ("put_signal", "put_signal_nbi"):
            rows.append(
                DeviceFn(
                    base + scope,
                    TYPED_SIGNALED,
                    None,
                    issue_of(scope, reads_local=True),
                    "put_signal_elems",
                    both("{pre}{T}_" + base + "{suf}"),
                    scope=scope,
                    types="rma",
                    doc="putmem_signal" + base[len("put_signal") :] + scope + " counted in elements.",
                )
            )
    rows += _many_word_waits()
    for scope in ("", "_block"):
        rows.append(
            DeviceFn(
                "iput" + scope,
                STRIDED,
                None,
                issue_of(scope, reads_local=True),
                "iput",
                {"nvshmem": Sym("{pre}{T}_iput{suf}"), "rocshmem": Triton("iput")},
                scope=scope,
                types="rma",
                doc="Strided put: nelems elements, src_stride apart at source, to "
                "dst_stride apart at PE pe's dest (strides in elements).",
            )
        )
        rows.append(
            DeviceFn(
                "iget" + scope,
                STRIDED,
                None,
                issue_of(scope, blocking_get=True),
                "iget",
                {"nvshmem": Sym("{pre}{T}_iget{suf}"), "rocshmem": Triton("iget")},
                scope=scope,
                types="rma",
                doc="Strided get: the mirror of iput.",
            )
        )
    for scope in ("", "_block"):
        for base, host in (
            ("put", "put_elems"),
            ("get", "get_elems"),
            ("put_nbi", "put_elems"),
            ("get_nbi", "get_elems"),
        ):
            rows.append(
                DeviceFn(
                    base + scope,
                    TYPED,
                    None,
                    issue_of(scope, host == "put_elems", base == "get"),
                    host,
                    both("{pre}{T}_" + base + "{suf}"),
                    scope=scope,
                    types="rma",
                )
            )
    return rows


ONCE_PER_GRID = (
    "barrier_all",
    "sync_all",
    "barrier_all_block",
    "sync_all_block",
    "barrier_all_warp",
    "sync_all_warp",
    "barrier",
    "sync",
    "barrier_block",
    "sync_block",
    "barrier_warp",
    "sync_warp",
    "broadcast",
    "fcollect",
    "broadcast_warp",
    "fcollect_warp",
    "alltoall",
    "reduce",
)
ROWS = [replace(row, once_per_grid=row.name in ONCE_PER_GRID) for row in _rows()]

# Atomics on int32/int64/uint32/uint64 (NOTE [atomics] in _build.py): Triton's own atomics where
# the peer is reachable by load/store, else the vendor's {pre}<T>_atomic_<op>, issued once per
# program with its result given to every thread: name -> (params, fetches a value).
ATOMICS = {
    "atomic_fetch": (("dest", "pe"), True),
    "atomic_set": (("dest", "value", "pe"), False),
    "atomic_swap": (("dest", "value", "pe"), True),
    "atomic_compare_swap": (("dest", "cond", "value", "pe"), True),
    "atomic_fetch_add": (("dest", "value", "pe"), True),
    "atomic_add": (("dest", "value", "pe"), False),
    "atomic_fetch_inc": (("dest", "pe"), True),
    "atomic_inc": (("dest", "pe"), False),
}
