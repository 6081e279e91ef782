"""Hang reports: one format for every way a job can stop making progress.

NOTE [hang report]: three sources describe the waits of a stuck job, and all of them end up as
`PeReport`s written by `format_report`:
- the host backend's deadlock check (host API and TRITON_INTERPRET=1), which reads every PE's
  published waits from shared memory (`from_native`, raised as DeadlockError);
- the watchdog (`Watchdog`) when a launch has not finished after UNISHMEM_HANG_TIMEOUT seconds:
  each PE writes its own part (`PeReport.to_json`) and rank 0 gathers them (`gather`);
- on a GPU the parts come from the debug wait table that kernels compiled with debug waits fill
  (NOTE [debug waits] in language/table_layout.py).
Each wait names the PE, where it waits (host code, or a program of a kernel and its source line),
the word (PE, heap offset), the comparison, the value expected and the value it holds; a verdict
says when it can never be satisfied, from what the other PEs are doing and the signals each PE
last wrote to each peer.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

from .enums import CMP, DTYPES, WAIT, WAIT_DTYPES
from .enums import SIGNAL as SIGNAL_OP

if TYPE_CHECKING:
    import torch

CMP_TEXT: dict[int, str] = {CMP.EQ: "==", CMP.NE: "!=", CMP.GT: ">", CMP.GE: ">=", CMP.LT: "<", CMP.LE: "<="}
SIGNAL_OPS = {int(op): op.name.lower() for op in SIGNAL_OP}  # a recorded signal's op, by its value
WAIT_DTYPE_NAMES = {DTYPES[name]: name for name in WAIT_DTYPES}  # the dtype code of a waitable word -> name
# what a wait is for (the host backend's WaitKind; the debug table's slot states)
TURN, SIGNAL, VALUE, ANY, BARRIER = WAIT.TURN, WAIT.SIGNAL, WAIT.VALUE, WAIT.ANY, WAIT.BARRIER
_32_BIT = (DTYPES["int32"], DTYPES["uint32"])
_SIGNED = (DTYPES["int32"], DTYPES["int64"])
_STATES = {1: "is starting", 2: "is running", 3: "has finalized", 4: "has left the job after an error"}


@dataclass
class Word:
    """The word a wait compares: on PE `pe` at heap offset `offset` (None: not in the heap)."""

    pe: int
    offset: int | None
    cmp: int
    value: int | None  # None: not recorded (a debug wait table without expected values)
    actual: int | None = None
    dtype: int = 11

    def holds(self) -> bool:
        if self.actual is None or self.value is None:
            return False
        a, b = self.actual, self.value
        return (a == b, a != b, a > b, a >= b, a < b, a <= b)[self.cmp]


@dataclass
class Wait:
    kind: int
    words: list[Word]
    label: str = ""  # "program (0, 0, 0)" under the interpreter, "block (3, 0, 0)" on a GPU
    site: str = ""  # "kernel ring at ring.py:12", or the host call site "prog.py:30"
    what: str = ""  # for waits without a word (a GPU barrier): what it is

    def pending(self) -> list[Word]:
        return [w for w in self.words if not w.holds()]


@dataclass
class Signal:
    """The last signal PE `writer` wrote to PE `peer`: `op` `value` into the word at heap `offset`."""

    writer: int
    peer: int
    offset: int
    value: int
    op: int
    count: int = 1


@dataclass
class PeReport:
    pe: int
    status: str  # "waiting", "running", "finished", or a phrase ("has finalized")
    waits: list[Wait] = field(default_factory=list)
    signals: list[Signal] = field(default_factory=list)
    detail: str = ""  # e.g. "kernel ring has run for 3.0 s"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> PeReport:
        d = json.loads(text)
        waits = [
            Wait(w["kind"], [Word(**x) for x in w["words"]], w["label"], w["site"], w["what"]) for w in d.pop("waits")
        ]
        return PeReport(waits=waits, signals=[Signal(**s) for s in d.pop("signals")], **d)


# ---- where a wait was called ----------------------------------------------------------------

_OWN = tuple(os.path.dirname(p) + os.sep for p in (__file__,))


def _skipped(filename: str) -> bool:
    import threading

    triton = sys.modules.get("triton")
    return (
        filename.startswith(_OWN)
        or filename == threading.__file__
        or filename.startswith("<")
        or (triton is not None and filename.startswith(os.path.dirname(triton.__file__ or "") + os.sep))
    )


def wait_site() -> str:
    """NOTE [wait sites]: the innermost caller outside unishmem, Triton and threading, as
    'file.py:LINE in function'; under TRITON_INTERPRET=1 'kernel NAME at file.py:LINE' (the
    kernel's own line, or a helper's). The host backend asks when a wait turns slow, holding the
    GIL: nothing is imported here (an import would take long, and a Ctrl-C meanwhile is the
    caller's to see)."""
    try:
        interpreter = sys.modules.get("unishmem._interpreter")  # loaded if a kernel is interpreted
        launch = interpreter.current_program()[0] if interpreter is not None else None
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if not _skipped(code.co_filename):
                where = f"{os.path.basename(code.co_filename)}:{frame.f_lineno}"
                if launch is not None:
                    name = launch.kernel_name
                    return f"kernel {name} at {where}" + ("" if code.co_name == name else f" in {code.co_name}")
                return f"{where} in {code.co_name}"
            frame = frame.f_back
    except Exception:  # noqa: BLE001 - a site is a courtesy of the report, never a reason for a wait to fail
        pass
    return ""


# ---- from the host backend ------------------------------------------------------------------


def from_native(views: list[dict]) -> list[PeReport]:
    """The host backend's snapshot (HostBackend.wait_snapshot()) as reports."""
    reports = []
    for v in views:
        control = v["control_bytes"]
        waits = [
            Wait(
                w["conds"][0]["kind"] if w["conds"] else TURN,
                [
                    Word(
                        c["pe"],
                        c["offset"] - control if c["heap"] else None,
                        c["cmp"],
                        c["value"],
                        _signed(c["actual"], c["dtype"]),
                        c["dtype"],
                    )
                    for c in w["conds"]
                    if c["pe"] >= 0
                ],
                w["label"],
                w["site"],
            )
            for w in v["waits"]
        ]
        for w in waits:
            for word in w.words:
                word.value = _signed(word.value, word.dtype)
        status = "waiting" if v["waiting"] else _STATES.get(v["state"], "is running")
        reports.append(
            PeReport(
                v["pe"],
                "running" if status == "is running" else status,
                waits,
                [Signal(v["pe"], s["peer"], s["offset"], s["value"], s["op"], s["count"]) for s in v["signals"]],
            )
        )
    return reports


def _signed(bits: int | None, dtype: int) -> int | None:
    """A word's bits as its dtype's value (int32/int64 are signed)."""
    if bits is None:
        return None
    width = 32 if dtype in _32_BIT else 64
    bits &= (1 << width) - 1
    return bits - (1 << width) if dtype in _SIGNED and bits >> (width - 1) else bits


def deadlock_error(views: list[dict], seconds: float):
    """The DeadlockError the host backend raises (csrc/bindings.cpp calls this)."""
    from .errors import DeadlockError

    reports = from_native(views)
    error = DeadlockError(
        format_report(reports, f"deadlock: every PE has been waiting for {seconds:g} s and none can make progress")
    )
    error.report = reports
    return error


# ---- the report -----------------------------------------------------------------------------


def _describe_word(kind: int, w: Word, n_words: int = 1, me: int | None = None) -> str:
    """One word a wait is for; `me`: the waiting PE, so that a wait on a peer's word names the peer."""
    cmp = CMP_TEXT[w.cmp]
    if kind == BARRIER:
        if w.offset is None and w.actual is not None:  # the host backend's arrival counter of PE w.pe
            return (
                f"PE {w.pe} to reach the barrier (PE {w.pe} has arrived {w.actual} times; this barrier needs {w.value})"
            )
        return f"PE {w.pe} to reach the barrier"
    what = "signal" if kind == SIGNAL else f"{WAIT_DTYPE_NAMES.get(w.dtype, 'word')}"
    theirs = kind not in (SIGNAL, VALUE, ANY) or (me is not None and w.pe != me)
    where = f"at heap offset {w.offset}" + (f" of PE {w.pe}" if theirs else "")
    seen = "unknown" if w.actual is None else str(w.actual)
    if n_words > 1:
        start = f"heap offset {w.offset}" + (f" of PE {w.pe}" if theirs else "")
        return f"any of {n_words} {what}s from {start} to become {cmp} {w.value} (the first is {seen})"
    return f"{what} {where} to become {cmp} {w.value} (it is {seen})"


def describe(wait: Wait, me: int | None = None) -> str:
    if wait.kind == TURN and not wait.words:
        return wait.what or "another program of this PE to finish its collective call"
    if not wait.words:
        return wait.what
    pending = wait.pending() or wait.words
    if wait.kind == ANY:
        return _describe_word(ANY, wait.words[0], len(wait.words), me)
    return "; ".join(_describe_word(wait.kind, w, me=me) for w in pending)


def _phrase(report: PeReport | None) -> str:
    if report is None:
        return "sent no report (it has finished, or died)"
    if report.status == "finished":
        return "has finished" + (f" ({report.detail})" if report.detail else "")
    if report.status == "waiting":
        return "waits"
    return report.status if report.status != "running" else "is running"


def verdict(wait: Wait, pe: int, reports: dict[int, PeReport], stuck: bool) -> str:
    """Why `wait` of PE `pe` can never be satisfied, where that can be decided; else ''."""
    pending = wait.pending()
    if not pending and wait.words:
        return "satisfied now: this PE has not run since (stopped, or descheduled)"
    never = "can never be satisfied" if stuck else "not satisfied yet"
    if wait.kind == BARRIER and wait.words:
        m = pending[0].pe
        other = reports.get(m)
        if other is None or other.status != "waiting":
            return f"{never}: PE {m} {_phrase(other)} without reaching this barrier"
        if not any(w.kind == BARRIER for w in other.waits):
            waits = "; ".join(describe(w, m) + _where(w) for w in other.waits)
            return f"{never}: PE {m} is not in a barrier; it waits for {waits or 'something this report cannot see'}"
        return f"{never}: PE {m} waits in a barrier too, a different one" if stuck else ""
    if wait.kind not in (SIGNAL, VALUE, ANY) or not pending:
        return ""
    word = pending[0]
    signals = [s for r in reports.values() for s in r.signals]
    here = [s for s in signals if s.peer == word.pe and s.offset == word.offset]
    if here:
        return "; ".join(
            f"{never}: PE {s.writer} last {'set it to' if s.op == 0 else 'added'} {s.value}, "
            f"and the wait expects {CMP_TEXT[word.cmp]} {word.value} (a wrong expected value, or a "
            f"signal missing after it?)"
            for s in here
        )
    elsewhere = [s for s in signals if s.offset == word.offset and s.peer != word.pe]
    if elsewhere:
        return "; ".join(
            f"{never}: no PE signalled this word, but PE {s.writer} signalled heap offset {s.offset} "
            f"on PE {s.peer} (a wait on the wrong PE's buffer, or a signal to the wrong PE?)"
            for s in elsewhere
        )
    nearby = "".join(
        f"; PE {s.writer}'s last signal to PE {s.peer} went to heap offset {s.offset}"
        for s in signals
        if s.peer == word.pe
    )
    if wait.kind == SIGNAL:
        return f"{never}: no PE has signalled this word (a missing signal?){nearby}"
    return f"{never}: nothing recorded wrote this word{nearby}" if stuck else ""


def _where(wait: Wait) -> str:
    where = ", ".join(x for x in (wait.label, wait.site) if x)
    return f" [{where}]" if where else ""


def format_report(reports: list[PeReport], headline: str, n_pes: int | None = None) -> str:
    """The report: a headline, then each PE's waits, each with its verdict, then the signals
    each PE last wrote to each peer."""
    by_pe = {r.pe: r for r in reports}
    n = n_pes if n_pes is not None else max(by_pe, default=-1) + 1
    stuck = all(r.status != "running" for r in reports) and len(reports) == n
    lines = [headline]
    for pe in range(n):
        r = by_pe.get(pe)
        if r is None or r.status != "waiting" or not r.waits:
            lines.append(f"PE {pe} {_phrase(r) if r is None or r.status != 'waiting' else 'waits (nothing recorded)'}")
            continue
        for w in r.waits:
            lines.append(f"PE {pe} waits for {describe(w, pe)}{_where(w)}")
            v = verdict(w, pe, by_pe, stuck)
            if v:
                lines.append(f"  {v}")
    signals = [s for r in reports for s in r.signals]
    if signals:
        lines.append(
            "signals last written: "
            + "; ".join(
                f"PE {s.writer} -> PE {s.peer}: {SIGNAL_OPS.get(s.op, s.op)} {s.value} at heap offset {s.offset}"
                for s in signals
            )
        )
    return "\n".join(lines)


# ---- the watchdog ---------------------------------------------------------------------------

HANG_EXIT = 124  # the exit status of a PE that the watchdog ends (as timeout(1)'s)
GATHER_S = 5.0  # how long rank 0 waits for the other PEs' parts
READ_S = 2.0  # how long a PE's part waits for the words its kernel waits on (read from device memory)


def _jit_functions():
    """Every @triton.jit function of the imported modules, by NOTE [debug waits]'s site key."""
    from triton.runtime.jit import JITFunction

    from ._wait_table import site_key

    found = {}
    for module in list(sys.modules.values()):
        for value in list(getattr(module, "__dict__", {}).values()):
            # by type alone: some globals raise for any attribute (torch.classes, seen on a GPU) or warn
            fn = value.jit_function if getattr(type(value), "wraps_jit_function", False) else value
            if issubclass(type(fn), JITFunction):
                found[site_key(fn.fn.__module__, fn.fn.__qualname__)] = fn.fn.__name__
    return found


def table_waits(core, table, kernel: str) -> tuple[list[Wait], list[Signal]]:
    """The waits and signals a debug-waits kernel recorded in `table` (NOTE [debug waits])."""
    from . import _wait_table as table_layout
    from .language._table import ROWS

    words = table.tolist()
    names = None
    waits = []
    stuck = False  # a device read did not finish: the report goes out without the words' values
    for s in range(table_layout.SLOTS):
        slot = words[s * table_layout.SLOT_WORDS : (s + 1) * table_layout.SLOT_WORDS]
        if not slot[table_layout.STATE]:
            continue
        if names is None:
            names = _jit_functions()
        kind, info, site, pid = (
            slot[table_layout.STATE],
            slot[table_layout.INFO],
            slot[table_layout.SITE],
            slot[table_layout.PID],
        )
        fn, line = names.get((site >> 32) & 0xFFFFFFFF, "?"), site & 0xFFFFFFFF
        where = f"kernel {kernel} at line {line}" + ("" if fn == kernel else f" of {fn}")
        label = f"block ({pid & 0xFFFFF}, {(pid >> 20) & 0xFFFFF}, {pid >> 40})"
        row = ROWS[slot[table_layout.ROW]].name if 0 <= slot[table_layout.ROW] < len(ROWS) else "?"
        if kind == BARRIER:
            waits.append(Wait(kind, [], label, where, f"every PE to reach {row}"))
            continue
        if row.endswith("_vector"):  # the expected values stay in device memory: not in the table
            waits.append(
                Wait(
                    TURN,
                    [],
                    label,
                    where,
                    f"{row} on {slot[table_layout.NELEMS]} words from heap offset "
                    f"{slot[table_layout.ADDR] - core.heap_base} (expected values not recorded)",
                )
            )
            continue
        offset = slot[table_layout.ADDR] - core.heap_base
        dtype = info >> 8 & 0xFF
        count = max(1, min(slot[table_layout.NELEMS], 8))
        words_read = [None] * count
        if not stuck:
            read = _within(
                READ_S,
                lambda: [
                    _signed(_read_word(core, offset + i * (4 if dtype in _32_BIT else 8), dtype), dtype)
                    for i in range(count)
                ],
            )
            stuck = read is None
            words_read = read or words_read
        cmp, value = info & 0xFF, _signed(slot[table_layout.VALUE], dtype)
        waits.append(
            Wait(
                kind,
                [
                    Word(core.my_pe, offset + i * (4 if dtype in _32_BIT else 8), cmp, value, a, dtype)
                    for i, a in enumerate(words_read)
                ],
                label,
                where,
                row,
            )
        )
    signals = []
    for peer in range(min(core.n_pes, table_layout.PEERS)):
        base = table_layout.SIGNAL_RECORDS + peer * table_layout.PEER_WORDS
        if words[base + table_layout.COUNT]:
            signals.append(
                Signal(
                    core.my_pe,
                    peer,
                    words[base + table_layout.S_ADDR] - core.heap_base,
                    words[base + table_layout.S_VALUE],
                    words[base + table_layout.S_OP],
                    words[base + table_layout.COUNT],
                )
            )
    return waits, signals


def _within(seconds: float, fn):
    """fn()'s result, or None if it has not returned after `seconds` (it is left running on a daemon
    thread): a report must go out even where a device read blocks (where it releases the GIL: see
    Diagnostics.wait_table)."""
    import threading

    result = []
    reader = threading.Thread(target=lambda: result.append(fn()), name="unishmem hang read", daemon=True)
    reader.start()
    reader.join(seconds)
    return result[0] if result else None


def _read_word(core, offset: int, dtype: int) -> int | None:
    """The word's bits, read while the kernel may still spin on it: on a GPU through a copy on the
    stream made for it with the table (the kernel's stream is stuck)."""
    import torch

    size = 4 if dtype in _32_BIT else 8
    if not 0 <= offset <= core.native.heap_size - size:
        return None
    heap = core.heap_of(core.my_pe)
    if heap.device.type == "cpu":
        return int.from_bytes(heap[offset : offset + size].numpy().tobytes(), "little")
    with torch.cuda.stream(core.diagnostics.read_stream):
        return int.from_bytes(heap[offset : offset + size].cpu().numpy().tobytes(), "little")


class Watchdog:
    """NOTE [hang report]: when a launch of this PE has not finished after `timeout` seconds, or
    another PE has found one, write this PE's part into the job's hang directory; rank 0 gathers
    the parts into one report on stderr; then the PE exits with HANG_EXIT."""

    def __init__(self, core, timeout: float, directory: str, diagnostics: Diagnostics):
        import threading

        self.core, self.timeout, self.dir = core, timeout, directory
        self.launches: dict[int, tuple[str, float, Callable[[], bool] | None]] = {}  # id -> (kernel, start, done())
        self.diagnostics = diagnostics  # its debug wait table, once a debug-waits kernel runs
        self._lock = threading.Lock()
        self._next = 0
        threading.Thread(target=self._watch, name="unishmem hang watchdog", daemon=True).start()

    def launched(self, kernel: str, done: Callable[[], bool] | None) -> int:
        import time

        with self._lock:
            self._next += 1
            self.launches[self._next] = (kernel, time.monotonic(), done)
            return self._next

    def finished(self, token: int) -> None:
        with self._lock:
            self.launches.pop(token, None)

    def _watch(self) -> None:
        import time

        marker = os.path.join(self.dir, "hang")
        while not self.core.finalized and os.path.isdir(self.dir):  # (gone: rank 0 has left the job)
            time.sleep(0.05)
            with self._lock:
                for token, (_, _, done) in list(self.launches.items()):
                    if done is not None and done():
                        del self.launches[token]
                oldest = min(self.launches.values(), key=lambda launch: launch[1], default=None)
            if oldest is not None and time.monotonic() - oldest[1] > self.timeout:
                try:
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                except FileExistsError:
                    pass
            if os.path.exists(marker):
                self._report(oldest)

    def _part(self, oldest) -> PeReport:
        import time

        core = self.core
        detail = (
            "no launch of it was running"
            if oldest is None
            else f"kernel {oldest[0]} has run for {time.monotonic() - oldest[1]:.1f} s"
        )
        if core.backend == "host":  # the interpreter and host code: the host backend knows this PE's waits
            mine = next(r for r in from_native(core.native.wait_snapshot()) if r.pe == core.my_pe)
            mine.detail = detail
            return mine
        if oldest is None:
            return PeReport(core.my_pe, "finished", detail=detail)
        kernel = oldest[0]
        if self.diagnostics.table is None:
            return PeReport(
                core.my_pe,
                "running",
                detail=detail + "; no waits recorded (run with UNISHMEM_DEBUG_WAITS=1 to record them)",
            )
        waits, signals = table_waits(core, self.diagnostics.table, kernel)
        return PeReport(core.my_pe, "waiting" if waits else "running", waits, signals, detail)

    def _report(self, oldest) -> None:
        import time

        part = os.path.join(self.dir, f"pe{self.core.my_pe}.json")
        with open(part + ".tmp", "w") as f:
            f.write(self._part(oldest).to_json())
        os.replace(part + ".tmp", part)  # whole parts only
        if self.core.my_pe == 0:
            n = self.core.n_pes
            end = time.monotonic() + GATHER_S
            while time.monotonic() < end and not all(
                os.path.exists(os.path.join(self.dir, f"pe{p}.json")) for p in range(n)
            ):
                time.sleep(0.05)
            parts = [
                PeReport.from_json(open(os.path.join(self.dir, f"pe{p}.json")).read())
                for p in range(n)
                if os.path.exists(os.path.join(self.dir, f"pe{p}.json"))
            ]
            text = format_report(
                parts,
                f"hang: a launch has not finished after {self.timeout:g} s "
                "(UNISHMEM_HANG_TIMEOUT); what each PE waits for:",
                n,
            )
            with open(os.path.join(self.dir, "report.txt"), "w") as f:
                f.write(text + "\n")
            sys.stderr.write(f"[unishmem] {text}\n")
            sys.stderr.flush()
            # the others leave once they have seen the report, taking their parts with them
            end = time.monotonic() + GATHER_S
            while time.monotonic() < end and any(
                os.path.exists(os.path.join(self.dir, f"pe{p}.json")) for p in range(1, n)
            ):
                time.sleep(0.005)
            self.diagnostics.remove_hang_dir()
        else:  # leave only once rank 0 has read every part
            end = time.monotonic() + GATHER_S + 1
            while time.monotonic() < end and not os.path.exists(os.path.join(self.dir, "report.txt")):
                time.sleep(0.005)
            try:
                os.remove(part)
            except FileNotFoundError:
                pass
            self.diagnostics.remove_empty_hang_dir()
        # The report is out: what the program's threads print as the peers leave (PeerFailure) is not news.
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        os._exit(HANG_EXIT)


class Diagnostics:
    """A runtime's hang diagnostics (NOTE [hang report]): its watchdog, started on first use where
    UNISHMEM_HANG_TIMEOUT is set (`hang_dir`: where the job's PEs leave their parts), and its debug
    wait table (NOTE [debug waits]), made on first use."""

    def __init__(self, core, hang_dir: str | None):
        from ._config import protocol

        self._core, self._hang_dir = core, hang_dir
        # made by init (no launcher gave one: `unishmem run` removes its own), so gone with the job
        self._own_hang_dir = hang_dir if protocol("UNISHMEM_HANG_DIR") is None else None
        self._watchdog: Watchdog | None = None
        self.table: torch.Tensor | None = None  # the debug wait table, once a debug-waits kernel is launched
        self.read_stream: Any = None  # a torch.cuda.Stream on a CUDA device

    def watchdog(self) -> Watchdog | None:
        if self._hang_dir is not None and self._watchdog is None:
            from ._config import seconds

            self._watchdog = Watchdog(self._core, seconds("UNISHMEM_HANG_TIMEOUT"), self._hang_dir, self)
        return self._watchdog

    def wait_table(self):
        """Pinned host memory that the GPU writes through (NOTE [debug waits])."""
        if self.table is None:
            import torch

            from . import _wait_table

            self.table = torch.zeros(_wait_table.TABLE_WORDS, dtype=torch.int64, pin_memory=True)
            # The hang report reads waited-on words through this stream (torch's pool: not blocking on the
            # default stream). Made now, not at the report: on an H200 (2 PEs, limited mode) making a stream
            # while the kernel spun blocked holding the GIL, and the report never went out.
            self.read_stream = torch.cuda.Stream(self._core.device) if self._core.device.type == "cuda" else None
        return self.table

    def remove_hang_dir(self) -> None:
        """Rank 0, as it leaves the job (every PE has finalized, or the report is out): the job's hang
        directory, where init made it."""
        if self._own_hang_dir is not None and self._core.my_pe == 0:
            import shutil

            shutil.rmtree(self._own_hang_dir, ignore_errors=True)

    def remove_empty_hang_dir(self) -> None:
        """Another PE, as it leaves after a report: the job's hang directory where init made it and it
        is empty. A part written late (a loaded machine) can land while rank 0 removes the directory,
        which then stays, empty once that PE has taken its part back; while rank 0 is still there the
        directory holds its part, and this does nothing."""
        if self._own_hang_dir is not None:
            try:
                os.rmdir(self._own_hang_dir)
            except OSError:
                pass
