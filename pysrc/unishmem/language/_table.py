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

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sym:
    template: str
    args: tuple[str, ...] | None = None    # parameters passed, in order (default: all but name-only ones)
    arg_kinds: dict = field(default_factory=dict)  # per-vendor kind overrides of parameters
    void: bool = False                      # the vendor function returns nothing (result comes from `then`)
    then: "Sym | None" = None               # a second call whose result is the function's result


@dataclass(frozen=True)
class Missing:
    reason: str


@dataclass(frozen=True)
class Triton:
    """Implemented in Triton by unishmem.language itself for this vendor (NOTE [triton rows])."""
    reason: str


@dataclass(frozen=True)
class DeviceFn:
    name: str
    params: tuple[tuple[str, str], ...]  # (name, kind); kinds: ptr size pe u64 val team sigop cmp redop
    result: str | None                   # None, "i32", "u64", "val" (element type), "ptr" (first pointer's type)
    issue: str                           # "all": every thread (block scope, queries); "one": thread 0;
                                         # "warp": the first warp; "*_synced": between two block barriers,
                                         # so the other threads see its effect (blocking gets, quiet, barriers)
    host: str                            # name of the host implementation in _host.py
    symbols: dict                        # vendor -> Sym | Missing | Triton
    scope: str = ""                      # "", "_block" or "_warp": picks {pre}/{suf}
    types: str | None = None             # type table for {T}: "rma", "wait" or "reduce"
    doc: str = ""


MEM = (("dest", "ptr"), ("source", "ptr"), ("nbytes", "size"), ("pe", "pe"))
TYPED = (("dest", "ptr"), ("source", "ptr"), ("nelems", "size"), ("pe", "pe"))
SIGNALED = (("dest", "ptr"), ("source", "ptr"), ("nbytes", "size"), ("sig", "ptr"), ("value", "u64"),
            ("op", "sigop"), ("pe", "pe"))
ISSUE_OF_SCOPE = {"": "one", "_block": "all", "_warp": "warp"}


def issue_of(scope: str, blocking_get: bool) -> str:
    issue = ISSUE_OF_SCOPE[scope]
    return issue + "_synced" if blocking_get and issue != "all" else issue
# rocSHMEM's src/device/rocshmem_wrapper.cc exports no C-linkage team query, team barrier/sync,
# broadcast, fcollect, alltoall or reduction: those are C++ only and take a rocshmem_team_t pointer
# (there is no rocshmem_<T>_<op>_reduce_wg). unishmem.language computes them in Triton from the
# team descriptor (NOTE [team descriptor]) over my_pe, putmem_wg, uint64 atomics and waits.
TEAM_QUERY = Triton("rocSHMEM's bitcode has no C-linkage team query: computed from the team descriptor")
TEAM_COLL = Triton("rocSHMEM's bitcode has no C-linkage team collective: put/signal/wait over the descriptor")


def both(template: str, **kw) -> dict:
    return {"nvshmem": Sym(template, **kw), "rocshmem": Sym(template, **kw)}


def _rows() -> list[DeviceFn]:
    rows = [
        DeviceFn("my_pe", (), "i32", "all", "my_pe", both("{pre}my_pe"), doc="This PE's number in the world team."),
        DeviceFn("n_pes", (), "i32", "all", "n_pes", both("{pre}n_pes"), doc="The number of PEs in the world team."),
        DeviceFn("team_my_pe", (("team", "team"),), "i32", "all", "team_my_pe",
                 {"nvshmem": Sym("nvshmem_team_my_pe"), "rocshmem": TEAM_QUERY}),
        DeviceFn("team_n_pes", (("team", "team"),), "i32", "all", "team_n_pes",
                 {"nvshmem": Sym("nvshmem_team_n_pes"), "rocshmem": TEAM_QUERY}),
        DeviceFn("team_translate_pe", (("src_team", "team"), ("pe", "pe"), ("dst_team", "team")), "i32", "all",
                 "team_translate_pe", {"nvshmem": Sym("nvshmem_team_translate_pe"), "rocshmem": TEAM_QUERY}),
        DeviceFn("remote_ptr", (("ptr", "ptr"), ("pe", "pe")), "ptr", "all", "remote_ptr", both("{pre}ptr"),
                 doc="`ptr` on PE `pe`, for direct loads and stores; null where not reachable."),
        DeviceFn("p", (("dest", "ptr"), ("value", "val"), ("pe", "pe")), None, "one", "p", both("{pre}{T}_p"),
                 types="rma", doc="Store one element into PE `pe`'s `dest`."),
        DeviceFn("g", (("source", "ptr"), ("pe", "pe")), "val", "all", "g", both("{pre}{T}_g"), types="rma",
                 doc="Load one element from PE `pe`'s `source`."),
        DeviceFn("signal_op", (("sig", "ptr"), ("value", "u64"), ("op", "sigop"), ("pe", "pe")), None, "one",
                 "signal_op", {"nvshmem": Sym("nvshmemx_signal_op"),
                               # rocSHMEM has no C-linkage signal_op: a uint64 atomic does the same
                               "rocshmem": Sym("rocshmem_uint64_atomic_{sigop}", args=("sig", "value", "pe"))}),
        DeviceFn("signal_wait_until", (("sig", "ptr"), ("cmp", "cmp"), ("value", "u64")), "u64", "all",
                 "signal_wait_until",
                 {"nvshmem": Sym("nvshmem_signal_wait_until"),
                  "rocshmem": Sym("rocshmem_uint64_wait_until", void=True,
                                  then=Sym("rocshmem_signal_fetch", args=("sig",)))},
                 doc="Wait until the local signal compares true with `value`; returns the signal's value."),
        DeviceFn("signal_fetch", (("sig", "ptr"),), "u64", "all", "signal_fetch", both("{pre}signal_fetch")),
        DeviceFn("wait_until", (("ptr", "ptr"), ("cmp", "cmp"), ("value", "val")), None, "all", "wait_until",
                 both("{pre}{T}_wait_until"), types="wait"),
        DeviceFn("test", (("ptr", "ptr"), ("cmp", "cmp"), ("value", "val")), "i32", "all", "test",
                 both("{pre}{T}_test"), types="wait", doc="1 if the local value compares true, else 0."),
        DeviceFn("fence", (), None, "one_synced", "fence", both("{pre}fence"),
                 doc="Order this PE's puts to each peer before its later puts to that peer."),
        DeviceFn("quiet", (), None, "one_synced", "quiet", both("{pre}quiet"),
                 doc="Complete every put this PE issued."),
        DeviceFn("barrier_all", (), None, "one_synced", "barrier_all", both("{pre}barrier_all")),
        DeviceFn("sync_all", (), None, "one_synced", "sync_all", both("{pre}sync_all")),
        DeviceFn("barrier_all_block", (), None, "all", "barrier_all", both("{pre}barrier_all{suf}"), scope="_block"),
        DeviceFn("sync_all_block", (), None, "all", "sync_all", both("{pre}sync_all{suf}"), scope="_block"),
        DeviceFn("barrier", (("team", "team"),), None, "one_synced", "barrier",
                 {"nvshmem": Sym("nvshmem_barrier"), "rocshmem": TEAM_COLL}),
        DeviceFn("sync", (("team", "team"),), None, "one_synced", "sync",
                 {"nvshmem": Sym("nvshmem_team_sync"), "rocshmem": TEAM_COLL}),
        DeviceFn("broadcast", (("team", "team"), ("dest", "ptr"), ("source", "ptr"), ("nelems", "size"),
                               ("root", "pe")), None, "all", "broadcast",
                 {"nvshmem": Sym("{pre}{T}_broadcast{suf}"), "rocshmem": TEAM_COLL}, scope="_block", types="rma"),
        DeviceFn("fcollect", (("team", "team"), ("dest", "ptr"), ("source", "ptr"), ("nelems", "size")), None,
                 "all", "fcollect", {"nvshmem": Sym("{pre}{T}_fcollect{suf}"), "rocshmem": TEAM_COLL},
                 scope="_block", types="rma"),
        DeviceFn("alltoall", (("team", "team"), ("dest", "ptr"), ("source", "ptr"), ("nelems", "size")), None,
                 "all", "alltoall", {"nvshmem": Sym("{pre}{T}_alltoall{suf}"), "rocshmem": TEAM_COLL},
                 scope="_block", types="rma"),
        DeviceFn("reduce", (("team", "team"), ("dest", "ptr"), ("source", "ptr"), ("nelems", "size"),
                            ("op", "redop")), None, "all", "reduce",
                 {"nvshmem": Sym("{pre}{T}_{op}_reduce{suf}"), "rocshmem": TEAM_COLL},
                 scope="_block", types="reduce"),
    ]
    for scope in ("", "_block", "_warp"):
        for base, host in (("putmem", "put"), ("getmem", "get"), ("putmem_nbi", "put"), ("getmem_nbi", "get")):
            rows.append(DeviceFn(base + scope, MEM, None, issue_of(scope, base == "getmem"), host,
                                 both("{pre}" + base + "{suf}"), scope=scope))
        for base in ("putmem_signal", "putmem_signal_nbi"):
            rows.append(DeviceFn(base + scope, SIGNALED, None, issue_of(scope, False), "put_signal",
                                 both("{pre}" + base + "{suf}"), scope=scope))
    for scope in ("", "_block"):
        for base, host in (("put", "put_elems"), ("get", "get_elems"), ("put_nbi", "put_elems"),
                           ("get_nbi", "get_elems")):
            rows.append(DeviceFn(base + scope, TYPED, None, issue_of(scope, base == "get"), host,
                                 both("{pre}{T}_" + base + "{suf}"), scope=scope, types="rma"))
    return rows


ROWS = _rows()
for _row in ROWS:  # a value computed inside the single-issue branch would not reach the other threads
    if _row.result is not None and _row.issue != "all":
        raise RuntimeError(f"device table: {_row.name} returns a value, so every thread must issue it")

# Atomics act through remote_ptr with Triton's own atomics (issued once per program, result
# broadcast to every thread), so they need no extern call: name -> (params, fetches a value).
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
