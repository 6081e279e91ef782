"""NOTE [settings]: every UNISHMEM_* variable is read here, checked when read and named when wrong.

SETTINGS is the one table of what a user may set: name, kind of value, default and meaning.
PROTOCOL lists what `unishmem run` sets for the processes it starts, which nobody else should.
FOREIGN lists the variables of other tools (vendor libraries, launchers, Triton) that the package
reads or sets elsewhere, with what it does with them. docs/settings.md is the three tables as
`unishmem settings` prints them (tests/test_config.py checks that it matches, and finds in the code
every variable the package reads or sets, which the tables must name). Each is read when it is
needed, not at import: a program or a test may change one before the next init, split or launch. The C++ backends read no variable: they get values.

A leaf: it imports nothing of the package, so `unishmem settings` and the launcher read it without
the compiled extension or torch. The two facts it needs from elsewhere are constants here, and
tests/test_config.py pins them to their owners (the backend registry, the host extension).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """What a setting's value is: `doc` says it in the docs, `parse(name, text)` returns the value
    or raises a ValueError naming the variable and its text."""

    doc: Callable[[], str]
    parse: Callable[[str, str], object]


def _seconds(zero_ok: bool) -> Kind:
    need = "a number of seconds >= 0" if zero_ok else "a positive number of seconds"

    def parse(name: str, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan  # fails the test below like any other bad number
        if not (value >= 0 if zero_ok else value > 0) or value == math.inf:
            raise ValueError(f"{name}={text!r} is not {need}")
        return value

    return Kind(lambda: "seconds >= 0; 0: off" if zero_ok else "seconds > 0", parse)


# The backends `UNISHMEM_BACKEND` may name, in backends.py's order (its registry's keys).
BACKEND_NAMES = ("host", "nvshmem", "rocshmem")
# The most threads of one PE whose waits the host backend can judge (host_backend.hpp's kMaxWaiters,
# exported by the extension as max_resident_programs): the cap on programs resident at once.
MAX_RESIDENT_PROGRAMS = 256


def parse_size(value: int | str) -> int:
    """Bytes from an int or a string such as '512M', '2G', '1.5GiB', '4096'."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(value), re.IGNORECASE)
        if not m:
            raise ValueError(f"heap size {value!r} is not a byte count such as 1073741824, '512M' or '2G'")
        n = int(float(m.group(1)) * 1024 ** "_KMGT".index(m.group(2).upper() or "_"))
    if n <= 0:
        raise ValueError(f"heap size {value!r} must be positive")
    return n


def _bytes(name: str, text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None


def _bytes_or_0(name: str, text: str) -> int:
    if text.strip() == "0":
        return 0
    try:
        return parse_size(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a byte count such as 0, 16777216 or '64M'") from None


def resident(value, what: str) -> int:
    """value (a setting's text or an argument) as a residency cap, or a ValueError naming `what`."""
    if isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    else:
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
    if number is None or not 1 <= number <= MAX_RESIDENT_PROGRAMS:
        raise ValueError(f"{what}={value!r} is not a whole number of programs from 1 to {MAX_RESIDENT_PROGRAMS}")
    return number


def _at_least_one(of: str) -> Callable[[str, str], int]:
    """The parser of a whole number >= 1 (`of`: what it counts, for the error)."""

    def parse(name: str, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"{name}={text!r} is not a whole number{of} >= 1")
        return value

    return parse


def _seed(name: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{name}={text!r} is not a whole number >= 0")
    return value


def _warps(name: str, text: str) -> int:
    value = text.strip()
    if value not in ("1", "2", "4", "8", "16", "32"):
        raise ValueError(f"{name}={text!r} is not a power of two from 1 to 32")
    return int(value)


def _flag(name: str, text: str) -> bool:
    if text.strip() not in ("", "0", "1"):
        raise ValueError(f"{name}={text!r} is not 0 or 1")
    return text.strip() == "1"


def _gemm_tile(name: str, text: str) -> tuple[int, int, int]:
    parts = text.strip().lower().split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) != 3 or any(d < 16 or d & (d - 1) for d in dims):
        raise ValueError(f"{name}={text!r} is not BLOCK_MxBLOCK_NxBLOCK_K of powers of two >= 16, e.g. 128x128x64")
    return dims


def _race_check(name: str, text: str) -> str | None:
    value = text.strip()
    if value not in ("", "0", "1", "report"):
        raise ValueError(f"{name}={text!r} is not 0, 1 or report")
    return {"1": "raise", "report": "report"}.get(value)


def _backend(name: str, text: str) -> str:
    if text not in ("auto", *BACKEND_NAMES):
        raise ValueError(f"{name}={text!r} is not one of {', '.join(('auto', *BACKEND_NAMES))}")
    return text


SECONDS, SECONDS_OR_OFF = _seconds(zero_ok=False), _seconds(zero_ok=True)
BYTES = Kind(lambda: "bytes: 4096, 512M, 2G, 1.5GiB", _bytes)
BYTES_OR_0 = Kind(lambda: "bytes, or 0", _bytes_or_0)
PROGRAMS = Kind(lambda: f"programs, 1 to {MAX_RESIDENT_PROGRAMS}", lambda name, text: resident(text, name))
PES = Kind(lambda: "PEs, >= 1", _at_least_one(" of PEs"))
COUNT = Kind(lambda: "a whole number >= 1", _at_least_one(""))
FLAG = Kind(lambda: "0 or 1", _flag)
WARPS = Kind(lambda: "1, 2, 4, 8, 16 or 32", _warps)
SEED = Kind(lambda: "a whole number >= 0", _seed)
BACKEND = Kind(lambda: ", ".join(("auto", *BACKEND_NAMES)), _backend)
GEMM_TILE = Kind(lambda: "BLOCK_MxBLOCK_NxBLOCK_K, powers of two >= 16 (128x128x64)", _gemm_tile)
RACE_CHECK = Kind(lambda: "0, 1 or report", _race_check)
TEXT = Kind(lambda: "text", lambda name, text: text or None)  # empty: as if unset


@dataclass(frozen=True)
class Setting:
    name: str
    kind: Kind
    default: object  # the value when unset; None: `unset` says what happens then
    meaning: str
    unset: str = ""
    see: str = ""  # a page of docs/ (a markdown link) that says more


# A team arena's default where UNISHMEM_TEAM_ARENA is unset: this fraction of the heap, at most this.
TEAM_ARENA_FRACTION, TEAM_ARENA_MAX = 16, 64 << 20
# UNISHMEM_WORKSPACE_BYTES's default: this fraction of the heap.
WORKSPACE_FRACTION = 2

SETTINGS = {
    s.name: s
    for s in (
        Setting(
            "UNISHMEM_BACKEND", BACKEND, "auto", "the backend `init()` opens when its `backend` argument is `'auto'`"
        ),
        Setting(
            "UNISHMEM_SYMMETRIC_SIZE",
            BYTES,
            1 << 30,
            "symmetric heap bytes per PE when `init()` is given no `heap_size`",
        ),
        Setting("UNISHMEM_WAIT_TIMEOUT", SECONDS, 300.0, "a wait gives up (`WaitTimeout`) after this long"),
        Setting("UNISHMEM_STALL_WARN", SECONDS_OR_OFF, 30.0, "a wait says once what it waits for after this long"),
        Setting(
            "UNISHMEM_DEADLOCK_TIMEOUT",
            SECONDS_OR_OFF,
            5.0,
            "host backend: every PE waiting this long with no wait able to finish raises `DeadlockError`",
            see="[Debugging a hung kernel](debugging-hung-kernels.md)",
        ),
        Setting(
            "UNISHMEM_BOOTSTRAP_TIMEOUT",
            SECONDS,
            120.0,
            "one step of init's rendezvous waits this long for a rank before naming the ranks missing",
        ),
        Setting(
            "UNISHMEM_HANG_TIMEOUT",
            SECONDS_OR_OFF,
            0.0,
            "a launch of a `@unishmem.jit` kernel running this long makes the watchdog report what every PE "
            "waits for and end the job with status 124 (`unishmem run --hang-timeout S`)",
            see="[Debugging a hung kernel](debugging-hung-kernels.md)",
        ),
        Setting(
            "UNISHMEM_DEBUG_WAITS",
            FLAG,
            False,
            "1: `@unishmem.jit` kernels without `debug_waits=` record their waits for the hang report",
            see="[Debugging a hung kernel](debugging-hung-kernels.md)",
        ),
        Setting(
            "UNISHMEM_INTERPRET_RESIDENT",
            PROGRAMS,
            64,
            "under `TRITON_INTERPRET=1`, programs of a launch alive at once on each PE, for kernels without "
            "`@unishmem.jit(resident=...)`; 1 runs them one after another",
            see="[Triton device library](device-library.md)",
        ),
        Setting(
            "UNISHMEM_TEAM_ARENA",
            BYTES_OR_0,
            None,
            "symmetric bytes reserved for the `unishmem.kernels` workspaces of each team smaller than the world "
            "when a world-sized team is split; 0 reserves none",
            unset=f"a {TEAM_ARENA_FRACTION}th of the heap, at most {TEAM_ARENA_MAX >> 20}M",
            see="[Kernels](kernels.md)",
        ),
        Setting(
            "UNISHMEM_COMM_BLOCK_BYTES",
            BYTES,
            64 << 10,
            "`unishmem.kernels` collectives, pushing, spread the data for one peer over one program per this "
            "many bytes (at most 16 programs per peer); unset, the measured default of the call's size where "
            "there is one (NOTE [measured defaults]); the same on every PE",
            see="[Kernels](kernels.md)",
        ),
        Setting(
            "UNISHMEM_MAX_PROGRAMS",
            COUNT,
            None,
            "the most programs a `unishmem.kernels` collective launches: each takes every G-th piece of its "
            "work (G: the grid), so waiting programs never hold more than this; under `TRITON_INTERPRET=1` "
            "never more than are resident (`UNISHMEM_INTERPRET_RESIDENT`)",
            unset="the GPU's multiprocessor count, or fewer where the measured default of the call's size says "
            "so (NOTE [measured defaults]); under `TRITON_INTERPRET=1` the programs resident at once",
            see="[Kernels](kernels.md)",
        ),
        Setting(
            "UNISHMEM_COMM_WARPS",
            WARPS,
            4,
            "the warps of each program of a `unishmem.kernels` collective (Triton's `num_warps`): each moves "
            "16 bytes a thread an access, so the bytes in flight per program grow with them; unset, the "
            "measured default of the call's size where there is one (NOTE [measured defaults])",
            see="[Kernels](kernels.md)",
        ),
        Setting(
            "UNISHMEM_COPY_ENGINE",
            FLAG,
            False,
            "`unishmem.kernels` all_gather and all_to_all, where they pull, copy each member's data with a "
            "device copy of its load/store view (the GPU's copy engines; no SM moves it) between two small "
            "handshake kernels; the fused ag_gemm has its A gathered that way on a second stream while "
            "its launch multiplies, and ag_gemm and gemm_rs given overlap=None from 1 MiB of input run "
            "torch.matmul block by block as the copy engine moves the blocks (chunked); the measured "
            "defaults choose it where the sweep found it faster; the same on every PE",
            see="[Kernels](kernels.md)",
        ),
        Setting(
            "UNISHMEM_PULL",
            FLAG,
            True,
            "`unishmem.kernels` all_gather, all_to_all, reduce_scatter and all_reduce (given `pull=None`) read "
            "every member's data where it lies when every member is reachable by load/store; 0: they push it "
            "into receive slots instead; the same on every PE",
            see="[Kernels](kernels.md)",
        ),
        Setting(
            "UNISHMEM_GEMM_TILE",
            GEMM_TILE,
            None,
            "the largest tile of the fused `ag_gemm` and `gemm_rs` (each dimension smaller for a smaller matrix); "
            "wins over the measured default, and their `block_*` arguments win over it; the same on every PE",
            unset="the measured default of the call's size where a GPU sweep wrote one, else the architecture's "
            "tile (NOTE [GEMM tiles])",
            see="[Kernels](kernels.md)",
        ),
        Setting(
            "UNISHMEM_RACE_CHECK",
            RACE_CHECK,
            None,
            "on the host backend, every access to symmetric memory of the interpreted kernels, the device "
            "library and the host API is checked for races across programs and PEs: 1 raises `RaceError` at "
            "the first; report records each (once per pair of sites) and prints them at finalize; the same on "
            "every PE",
            unset="no check",
            see="[Finding races](finding-races.md)",
        ),
        Setting(
            "UNISHMEM_RACE_SEED",
            SEED,
            None,
            "under `TRITON_INTERPRET=1`, each program of a launch waits a random while (0 to 2 ms, drawn from "
            "this seed, its PE and its program id) before each device call, so that programs and PEs "
            "interleave differently from seed to seed and an order-dependent bug shows under some "
            "(`unishmem.testing.under_seeds`)",
            unset="no waits",
            see="[Launching](launching.md)",
        ),
        Setting(
            "UNISHMEM_WORKSPACE_BYTES",
            BYTES,
            None,
            "the most symmetric bytes the `unishmem.kernels` workspaces of a runtime may hold outside team "
            "arenas (which `UNISHMEM_TEAM_ARENA` bounds); a call that needs a new workspace beyond it raises "
            "a `ValueError` on every PE; the same on every PE",
            unset=f"1/{WORKSPACE_FRACTION} of the heap",
            see="[Kernels](kernels.md)",
        ),
        Setting(
            "UNISHMEM_HOST_NODE_SIZE",
            PES,
            None,
            "host backend: splits the job into simulated nodes of this many consecutive PEs; `team_node` is "
            "this PE's node, and load/store (`rt.peer`, `remote_ptr`) reach only its PEs, as on several hosts",
            unset="one node of every PE",
            see="[Backends](backends.md#simulated-nodes)",
        ),
        Setting(
            "UNISHMEM_SECRET",
            TEXT,
            None,
            "the rendezvous secret, the same on every rank; a multi-host job without one is not authenticated",
            unset="one host: a random one per job; several: none (a warning)",
            see="[Launching a job](launching.md#who-can-join-a-job)",
        ),
    )
}

# Set by `unishmem run` for each process it starts (launcher.py); a process started otherwise has none.
PROTOCOL = {
    "UNISHMEM_RENDEZVOUS": "the address of the job's rendezvous server; its presence means `unishmem run` started us",
    "UNISHMEM_RANK": "this process's rank",
    "UNISHMEM_WORLD_SIZE": "the number of ranks",
    "UNISHMEM_LOCAL_RANK": "this process's rank on its host",
    "UNISHMEM_LOCAL_WORLD_SIZE": "the number of ranks on its host",
    "UNISHMEM_JOB_TOKEN": "names the job's shared-memory segments, which the launcher removes at the end",
    "UNISHMEM_HANG_DIR": "the launcher's private directory where the PEs leave their hang reports",
    "UNISHMEM_SECRET": "(also a setting) the secret the launcher made for the job",
}

# What the GPU backends add to unishmem's heap when they size the vendor library's own (backends.py, and the
# table below says it): the library's own symmetric allocations and unishmem's control buffer.
LIBRARY_HEAP_MARGIN = 64 << 20
# The interface the nvshmem backend gives NVSHMEM's bootstrap on one host (its registry's single_host_env).
LOOPBACK = "lo"


@dataclass(frozen=True)
class Foreign:
    """Variables of another tool that unishmem reads or sets: `whose` says whose they are and what they
    hold, `use` what unishmem does with them."""

    names: tuple[str, ...]
    whose: str
    use: str


# Other tools' variables, by what they belong to. unishmem reads them when it needs them, as it does its
# own, and never checks them for another tool. tests/test_config.py finds the variables the package reads
# or sets in its code and fails on any this table leaves out.
FOREIGN = {
    "Vendor libraries": (
        "Where the GPU backends find their library.",
        (
            Foreign(
                ("NVSHMEM_HOME",),
                "NVSHMEM's install prefix (the build reads it too)",
                "the `nvshmem` backend loads `libnvshmem_host.so.3` from its `lib` or `lib64`, and the device "
                "bitcode beside it; it wins over any search. Unset: where cuda-pathfinder finds NVSHMEM "
                "(the `nvidia-nvshmem-cu13` wheel)",
            ),
            Foreign(
                ("ROCM_PATH",),
                "ROCm's install prefix",
                "the `rocshmem` backend's headers in `$ROCM_PATH/include/rocshmem` and device bitcode in "
                "`$ROCM_PATH/lib`. Unset or empty: `/opt/rocm`",
            ),
            Foreign(
                ("ROCSHMEM_LIB_DIR",),
                "a directory of rocSHMEM's device bitcode",
                "searched before `$ROCM_PATH/lib` for `librocshmem_device_<gfx>.bc`; the first file found for "
                "an arch is the one linked",
            ),
        ),
    ),
    "Vendor settings unishmem sets": (
        "`init()` of the `nvshmem` or `rocshmem` backend sets these before it starts the library.",
        (
            Foreign(
                ("NVSHMEM_SYMMETRIC_SIZE", "ROCSHMEM_HEAP_SIZE"),
                "NVSHMEM's and rocSHMEM's own symmetric heap size",
                f"unset: set to the heap size plus {LIBRARY_HEAP_MARGIN >> 20}M (the library's own allocations); "
                "set to less than that (a byte count as for `UNISHMEM_SYMMETRIC_SIZE`): `BackendUnavailable`",
            ),
            Foreign(
                ("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME",),
                "NVSHMEM: the network interface of its bootstrap",
                f"unset and every PE on one host: set to `{LOOPBACK}`",
            ),
        ),
    ),
    "Launchers": (
        "`init()` asks, in this order, who started the process: `unishmem run` (`UNISHMEM_RENDEZVOUS`), "
        "torchrun, Open MPI, MPICH, Slurm; none of them: a job of one PE ([Launching a job](launching.md)).",
        (
            Foreign(
                ("TORCHELASTIC_RUN_ID",),
                "torchrun: the job's id",
                "set: torchrun started the process; names the job's rendezvous (on several hosts, the key "
                "under which rank 0 publishes its address in torchrun's store)",
            ),
            Foreign(
                ("TORCHELASTIC_RESTART_COUNT",),
                "torchrun: how often the job restarted",
                "tells the rendezvous of each restart apart. Unset: 0",
            ),
            Foreign(
                ("RANK", "WORLD_SIZE"),
                "torchrun, or set by hand: the rank and the number of ranks",
                "both set with `MASTER_ADDR` and `MASTER_PORT`: a job like torchrun's, without `TORCHELASTIC_RUN_ID`",
            ),
            Foreign(
                ("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
                "torchrun: the rank on this host and the ranks on this host",
                "unset: `RANK` modulo the ranks on this host, and `WORLD_SIZE` (one host); with "
                "`init(group=...)`, unset: the group's rank and size",
            ),
            Foreign(
                ("MASTER_ADDR", "MASTER_PORT"),
                "torchrun, or set by hand: an address and port every host reaches",
                "where a job on several hosts meets: rank 0 serves there, or under torchrun (whose agent holds "
                "the port) on a free port it publishes in the agent's store. An Open MPI, MPICH or Slurm job "
                "meets there whenever both are set; a torchrun job on one host only names its rendezvous by them",
            ),
            Foreign(
                (
                    "OMPI_COMM_WORLD_RANK",
                    "OMPI_COMM_WORLD_SIZE",
                    "OMPI_COMM_WORLD_LOCAL_RANK",
                    "OMPI_COMM_WORLD_LOCAL_SIZE",
                ),
                "Open MPI's `mpirun`: the rank, the ranks, the rank on this host, the ranks on this host",
                "the placement when the first two are set. Here and in the next two rows, the ranks on this "
                "host unset: every rank on one host; the rank on this host unset: the rank modulo them",
            ),
            Foreign(
                ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
                "MPICH's `mpirun` (Hydra): the same four",
                "the placement when the first two are set",
            ),
            Foreign(
                ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
                "Slurm's `srun`: the same four",
                "the placement when the first two are set; a `SLURM_NTASKS_PER_NODE` that is not one number "
                "counts as unset",
            ),
            Foreign(
                ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID", "SLURM_STEP_ID", "PMI_PORT"),
                "Open MPI, Slurm, MPICH: the job's ids",
                "with the parent process's id, they name the rendezvous of an Open MPI, MPICH or Slurm job on "
                "one host, so that concurrent jobs never meet",
            ),
        ),
    ),
    "Triton": (
        "",
        (
            Foreign(
                ("TRITON_INTERPRET",),
                "Triton: 1 (or true, on, yes) runs kernels in its interpreter",
                "as Triton reads it: `@unishmem.jit` kernels launch under the interpreter (on the host "
                "backend they always do). `unishmem compile` sets 0 in its workers; `unishmem bench --kernels` "
                "sets 1 where there is no GPU, unless it is set",
            ),
            Foreign(
                ("TRITON_CACHE_DIR",),
                "Triton's cache of compiled kernels",
                "unset or empty: `unishmem compile` compiles into a new temporary directory",
            ),
            Foreign(
                ("DISABLE_PTXAS_OPT",),
                "Triton: 1 runs ptxas without optimisation",
                "`unishmem compile --fast` sets 1 in its workers",
            ),
        ),
    ),
    "Processes": (
        "",
        (
            Foreign(
                ("OMP_NUM_THREADS",),
                "OpenMP and BLAS: threads per process",
                "unset: `unishmem run` gives each PE its share of the cores it may use (at least 1); "
                "`unishmem bench` gives its jobs 1, set or not",
            ),
            Foreign(
                ("PYTHONUNBUFFERED",),
                "Python: unbuffered output",
                "unset: `unishmem run` sets 1 for its PEs, so their output arrives as it is written",
            ),
            Foreign(
                ("XDG_RUNTIME_DIR",),
                "the login session's private directory",
                "holds `unishmem-<uid>`, this user's directory of rendezvous files and hang reports. Unset or "
                "empty: the temporary directory",
            ),
        ),
    ),
}


def get(name: str):
    """The value of setting `name`: its default when unset, else its text checked."""
    setting = SETTINGS[name]
    text = os.environ.get(name)
    return setting.default if text is None else setting.kind.parse(name, text)


@contextlib.contextmanager
def setting(name: str, text: str | None):
    """Setting `name` set to `text` (None: unset) in this process for the block, then as it was."""
    if name not in SETTINGS:
        raise KeyError(f"{name} is not a setting")
    before = os.environ.get(name)
    try:
        if text is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = text
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def given(name: str) -> bool:
    """Whether setting `name` is set in the environment: a choice made, which defaults measured by
    unishmem (NOTE [measured defaults]) do not override."""
    if name not in SETTINGS:
        raise KeyError(f"{name} is not a setting")
    return os.environ.get(name) is not None


def seconds(name: str) -> float:
    kind = SETTINGS[name].kind
    if kind is not SECONDS and kind is not SECONDS_OR_OFF:
        raise TypeError(f"{name} is not a setting in seconds")
    return get(name)


def team_arena(heap_size: int) -> int:
    """UNISHMEM_TEAM_ARENA's bytes for a job whose heap has heap_size bytes."""
    value = get("UNISHMEM_TEAM_ARENA")
    return min(TEAM_ARENA_MAX, heap_size // TEAM_ARENA_FRACTION) if value is None else value


def workspace_bytes(heap_size: int) -> int:
    """UNISHMEM_WORKSPACE_BYTES's bytes for a job whose heap has heap_size bytes."""
    value = get("UNISHMEM_WORKSPACE_BYTES")
    return heap_size // WORKSPACE_FRACTION if value is None else value


def protocol(name: str) -> str | None:
    """The value `unishmem run` gave PROTOCOL variable `name`, None if it gave none."""
    if name not in PROTOCOL:
        raise KeyError(f"{name} is not a variable unishmem run sets")
    return os.environ.get(name)


def _default_text(setting: Setting) -> str:
    value = setting.default
    if value is None:
        return setting.unset
    if setting.kind is FLAG and isinstance(value, int):  # a bool
        return str(int(value))
    if setting.kind is BYTES and isinstance(value, int):
        for shift, unit in ((30, "G"), (20, "M"), (10, "K")):
            if value % (1 << shift) == 0:
                return f"{value >> shift}{unit}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def markdown() -> str:
    """docs/settings.md: the three tables."""
    lines = [
        "# Settings",
        "",
        "<!-- generated by `unishmem settings > docs/settings.md`: edit the tables in pysrc/unishmem/_config.py -->",
        "",
        "unishmem reads these environment variables when it needs them (at `init()`, a team split or a kernel",
        "launch). A value that is not of its kind raises a `ValueError` naming the variable and the value.",
        "",
        "| Variable | Value | Default | Meaning |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| `{s.name}` | {s.kind.doc()} | {_default_text(s)} | {s.meaning}{f' ({s.see})' if s.see else ''} |"
        for s in SETTINGS.values()
    ]
    lines += [
        "",
        "## Set by `unishmem run`",
        "",
        "The launcher's protocol with the processes it starts; not meant to be set by hand.",
        "",
        "| Variable | Meaning |",
        "|---|---|",
    ]
    lines += [f"| `{name}` | {meaning} |" for name, meaning in PROTOCOL.items()]
    lines += [
        "",
        "## Other tools' variables",
        "",
        "unishmem also reads these, and sets some where it says so. They belong to the tools named; unishmem",
        "does not check them on their behalf.",
    ]
    for group, (intro, rows) in FOREIGN.items():
        lines += ["", f"### {group}", ""] + ([intro, ""] if intro else [])
        lines += ["| Variable | Whose | What unishmem does with it |", "|---|---|---|"]
        lines += [f"| {', '.join(f'`{n}`' for n in row.names)} | {row.whose} | {row.use} |" for row in rows]
    return "\n".join(lines) + "\n"
