"""The race checker (UNISHMEM_RACE_CHECK): every access to symmetric memory that the concurrent
interpreter, the device library and the host API make, checked against every other by vector clocks
that the PEs of a job share (NOTE [race check], NOTE [happens-before]).

NOTE [race check]: each thread of a PE has a slot: 0 the host (its API calls and launches), 1 to
MAX_RESIDENT_PROGRAMS the programs of a launch while they run, and beside each the thread's puts in
flight (slot + SLOTS, its "companion"). A thread id is PE * TIDS + slot, and each thread keeps a
vector clock over every thread id of the job. Every byte of every PE's heap has a shadow in one
shared-memory segment: the epoch of its last write and of up to READS reads not ordered before one
another (an epoch packs the clock, the thread id, the site, and whether the access was atomic). An
access checks the shadow of its bytes against the thread's clock and then records itself; a race is
an earlier access of another thread, at least one of the two a write, not both atomic, whose clock
is past what this thread has seen of that thread. Synchronisation objects (a signal word, an atomic's
word, a team's barrier) keep a clock in a shared table: a release joins the thread's clock into it
before the operation, an acquire joins it into the thread's after. The segment is sparse (pages only
where the heap was touched), read and written under one lock (a thread lock and an fcntl lock on the
segment) and unlinked as soon as every PE has mapped it (or the start fails); it is named among the
init's segments, which `unishmem run` removes however the job ends, so it never outlives the job. Sites (what,
kernel, file:line) are kept in the segment too, so that a PE can name a peer's side of a race.
Over READS concurrent reads of one byte the oldest is forgotten: a race with it can be missed, never
invented. Only symmetric memory is checked: accesses to other memory (a torch tensor's own storage,
the host's reads through torch) are not seen.

NOTE [happens-before]: the orders the checker knows, and only those, follow what NVSHMEM's and
OpenSHMEM's documentation guarantee (the OpenSHMEM 1.5 memory-ordering section; NVSHMEM's API
pages on put, putmem_signal, fence, quiet, barrier and wait_until):
- program order within a program and within a PE's host thread;
- a launch's programs start after what the host did before the launch (launches on one stream are
  ordered) and the host's later calls come after every program has ended;
- a wait that returns (signal_wait_until, wait_until and its forms, test when true, signal_fetch)
  acquires what every signal operation or atomic on that word released: signal_op, atomics of the
  device library and Triton's atomics with release semantics release; a Triton atomic with acquire
  semantics acquires;
- a put's write lands at the target at some point between its issue and its completion, so it is
  made by the thread's companion, which a signal_op does not release: only fence or quiet (and the
  barriers that imply quiet) order a PE's puts before its later operations. putmem_signal delivers
  its data before its signal, so its signal releases the companion's clock. A program's store through
  remote_ptr to another PE (tl.store, store_remote) is delivered as a put is (docs/ordering.md, rule 1);
- barrier_all, barrier, sync_all and sync (device or host) order everything before them on every
  member before everything after them; barrier_all and barrier complete puts first (quiet), the host's
  barrier every put this PE issued; the host's collectives order like a barrier;
- atomics never race with atomics; a volatile tl.load counts as an atomic read of its word (a spin
  on a flag), with no acquire.
Fence is checked as quiet (it orders puts to one PE, which quiet orders too): an order only fence gives
to puts to different PEs is taken, so a race there can be missed. What only a GPU's memory model can
show (orderings weaker than these guarantees, caches, scopes narrower than the system's) is not
checked. The put forms' nbi and blocking variants are checked alike: a source reused before an nbi
put completes is not reported.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import sys
import threading
from types import FrameType

import numpy as np

from . import _config
from .errors import RaceError, UnishmemError

SLOTS = 1 + _config.MAX_RESIDENT_PROGRAMS  # the host and the programs of a launch, per PE
TIDS = 2 * SLOTS  # with each one's puts in flight
MAX_PES = (1 << 16) // TIDS  # thread ids are 16 bits of an epoch
READS = 4  # reads of a byte remembered while no one of them is ordered before another
SITES = 1 << 15  # site ids are 15 bits of an epoch
SITE_BYTES = 256
SYNC_WORDS = 4096  # synchronisation objects a job may use
_PAGE = 4096
_HEAP, _LOCAL, _BARRIER = 1, 2, 3  # kinds of synchronisation object


def _aligned(n: int) -> int:
    return -(-n // _PAGE) * _PAGE


class _Thread:
    """A thread of the checker: its id, its vector clock, and what a report calls it."""

    __slots__ = ("tid", "vc", "who", "kernel")

    def __init__(self, tid: int, n_tids: int, who: str, kernel: str | None = None):
        self.tid, self.who, self.kernel = tid, who, kernel
        self.vc = np.zeros(n_tids, dtype=np.int64)
        self.vc[tid] = 1


class Checker:
    """One PE's side of a job's race checker (NOTE [race check])."""

    def __init__(self, name: str, create: bool, pe: int, n_pes: int, heap, bases):
        self.pe, self.heap = pe, heap  # heap: the SymmetricHeap, to name allocations
        heap_size = self.heap_size = heap.size
        self.heap_base = heap.base
        self.bases = list(bases)  # each PE's heap as this process maps it
        n_tids = n_pes * TIDS
        self._layout(n_tids, n_pes * heap_size)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self._fd = os.open(name, flags, 0o600)
        if create:
            os.ftruncate(self._fd, self._size)
        self._map = mmap.mmap(self._fd, self._size)
        buf = memoryview(self._map)

        def view(offset, dtype, count):
            return np.frombuffer(buf, dtype=dtype, count=count, offset=offset)

        self._header = view(self._at["header"], np.int64, 8)
        self._sites = view(self._at["sites"], np.uint8, SITES * SITE_BYTES).reshape(SITES, SITE_BYTES)
        self._keys = view(self._at["keys"], np.int64, SYNC_WORDS)
        self._clocks = view(self._at["clocks"], np.int64, SYNC_WORDS * n_tids).reshape(SYNC_WORDS, n_tids)
        self._write = view(self._at["write"], np.uint64, n_pes * heap_size)
        self._reads = [view(self._at[f"read{k}"], np.uint64, n_pes * heap_size) for k in range(READS)]
        self._lock = threading.Lock()
        self._local = threading.local()
        self.host = _Thread(pe * TIDS, n_tids, "the host")
        self._companions: dict[int, _Thread] = {}
        self._slot_clock = np.zeros(SLOTS, dtype=np.int64)
        self._site_ids: dict[str, int] = {}
        self._sync_slots: dict[int, int] = {}
        self._barriers: dict[int, int] = {}  # team -> barriers entered
        self.reported: set = set()
        self.races: list[str] = []
        self.forgotten_reads = 0

    def _layout(self, n_tids: int, shadow_bytes: int) -> None:
        parts = [
            ("header", 64),
            ("sites", SITES * SITE_BYTES),
            ("keys", SYNC_WORDS * 8),
            ("clocks", SYNC_WORDS * n_tids * 8),
            ("write", shadow_bytes * 8),
            *((f"read{k}", shadow_bytes * 8) for k in range(READS)),
        ]
        self._at, offset = {}, 0
        for part, nbytes in parts:
            self._at[part] = offset
            offset += _aligned(nbytes)
        self._size = offset

    def close(self) -> None:
        os.close(self._fd)

    def shadow_bytes(self) -> int:
        """The shared segment's bytes in use (its pages are taken where the heap was touched)."""
        return os.fstat(self._fd).st_blocks * 512

    # ---- locking --------------------------------------------------------------------------------

    def __enter__(self):
        self._lock.acquire()
        fcntl.lockf(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.lockf(self._fd, fcntl.LOCK_UN)
        self._lock.release()

    # ---- threads --------------------------------------------------------------------------------

    def current(self) -> _Thread:
        return getattr(self._local, "thread", None) or self.host

    def companion(self, thread: _Thread) -> _Thread:
        """The thread's puts in flight."""
        found = self._companions.get(thread.tid)
        if found is None:
            found = self._companions[thread.tid] = _Thread(
                thread.tid + SLOTS, len(thread.vc), thread.who, thread.kernel
            )
        return found

    def launch_begin(self) -> np.ndarray:
        """The host's clock a launch's programs start from (launches are ordered after the host's calls)."""
        forked = self.host.vc.copy()
        self.host.vc[self.host.tid] += 1
        return forked

    def program_begin(self, forked: np.ndarray, ordinal: int, who: str, kernel: str) -> None:
        """The launch's program `ordinal` (its place in the launch order) starts from the host's clock.
        Its slot is its place (no two programs of a launch share one, however short-lived) and continues
        that slot's clock; past SLOTS - 1 programs, slots repeat, and races between programs that share
        one are missed."""
        slot = 1 + ordinal % (SLOTS - 1)
        thread = _Thread(self.pe * TIDS + slot, len(forked), who, kernel)
        thread.vc[:] = forked
        with self._lock:
            thread.vc[thread.tid] = max(self._slot_clock[slot], forked[thread.tid]) + 1
            self._slot_clock[slot] = thread.vc[thread.tid]
        self._local.thread = thread

    def program_end(self) -> np.ndarray:
        """The ending program's clock (the host joins it when the launch ends)."""
        thread = self._local.thread
        self._local.thread = None
        with self._lock:
            slot = thread.tid - self.pe * TIDS
            self._slot_clock[slot] = max(self._slot_clock[slot], thread.vc[thread.tid])
        return thread.vc

    def launch_end(self, clocks) -> None:
        for vc in clocks:
            np.maximum(self.host.vc, vc, out=self.host.vc)
        self.host.vc[self.host.tid] += 1

    # ---- where ----------------------------------------------------------------------------------

    def owner(self, addr: int) -> tuple[int, int] | None:
        """(PE, heap offset) of an address of some PE's heap as this process maps it."""
        for pe, base in enumerate(self.bases):
            if base <= addr < base + self.heap_size:
                return pe, addr - base
        return None

    def span(self, pe: int, offset: int, nbytes: int) -> slice:
        start = pe * self.heap_size + offset
        return slice(start, start + nbytes)

    def elsewhere(self, span) -> bool:
        """Whether some byte of a shadow span lies in another PE's heap."""
        if span is None:
            return False
        ends = (span.start, span.stop - 1) if isinstance(span, slice) else (int(span.min()), int(span.max()))
        mine = self.pe * self.heap_size
        return not (mine <= ends[0] and ends[1] < mine + self.heap_size)

    def local_span(self, addr: int, nbytes: int) -> slice | None:
        """The shadow of nbytes at addr in some PE's heap (None: not symmetric memory)."""
        found = self.owner(addr)
        return None if found is None or nbytes <= 0 else self.span(*found, nbytes)

    def element_bytes(self, addrs: np.ndarray, itemsize: int):
        """The shadow of the elements at addrs (any heap as this process maps it): a slice where they
        are consecutive, else an index array; None where none is symmetric memory."""
        if addrs.size == 0:
            return None
        addrs = addrs.astype(np.int64, copy=False)
        lo, hi = int(addrs.min()), int(addrs.max())
        first = self.owner(lo)
        if first is not None and self.owner(hi) == first:
            index = addrs - self.bases[first[0]] + first[0] * self.heap_size
        else:
            index = np.full(addrs.shape, -1, dtype=np.int64)
            for pe, base in enumerate(self.bases):
                inside = (addrs >= base) & (addrs < base + self.heap_size)
                index[inside] = addrs[inside] - base + pe * self.heap_size
            index = index[index >= 0]
            if index.size == 0:
                return None
        start = int(index[0])
        n = index.size
        if int(index[-1]) == start + (n - 1) * itemsize and (n < 3 or np.all(np.diff(index) == itemsize)):
            return slice(start, start + n * itemsize)
        return (index[:, None] + np.arange(itemsize, dtype=np.int64)).reshape(-1)

    # ---- sites ----------------------------------------------------------------------------------

    def site(self, what: str, thread: _Thread) -> int:
        text = f"{what}\x1f{self.pe}\x1f{thread.who}\x1f{_call_site(thread.kernel)}"
        found = self._site_ids.get(text)
        if found is None:
            raw = text.encode()[: SITE_BYTES - 1]
            with self:
                found = int(self._header[0])
                if found < SITES - 1:
                    self._header[0] = found + 1
                    self._sites[found, :] = 0
                    self._sites[found, : len(raw)] = np.frombuffer(raw, dtype=np.uint8)
            self._site_ids[text] = found
        return found

    def _site_text(self, site: int) -> tuple[str, ...]:
        raw = bytes(self._sites[site]).rstrip(b"\0").decode(errors="replace")
        parts = raw.split("\x1f")
        return tuple(parts) if len(parts) == 4 else ("an access", "?", "?", "at a site not recorded (too many)")

    # ---- accesses -------------------------------------------------------------------------------

    def access(self, span, thread: _Thread, what: str, write: bool, atomic: bool = False) -> None:
        """Check and record an access of `thread` to the shadow span (a slice or an index array)."""
        if span is None:
            return
        site = self.site(what, thread)
        vc = thread.vc
        epoch = np.uint64((int(vc[thread.tid]) << 32) | (thread.tid << 16) | (site << 1) | int(atomic))
        found = None
        with self:
            last = self._write[span]
            found = _first(last, _unordered(last, vc, atomic), True)
            if write:
                for k in range(READS):
                    reads = self._reads[k][span]
                    unordered = _unordered(reads, vc, atomic)
                    found = found or _first(reads, unordered, False)
                    kept = unordered & ((reads & np.uint64(1)) == 1) if atomic else None
                    self._reads[k][span] = 0 if kept is None else np.where(kept, reads, np.uint64(0))
                self._write[span] = epoch
            else:
                self._record_read(span, vc, epoch)
        if found is not None:
            self._report(found, span, site, vc)

    def _record_read(self, span, vc, epoch) -> None:
        placed = np.zeros(self._write[span].shape, dtype=bool)  # the bytes whose read is kept
        for k in range(READS):
            reads = self._reads[k][span]
            free = ~_unordered(reads, vc, False) & ~placed  # empty, or ordered before this read
            self._reads[k][span] = np.where(free, epoch, reads)
            placed |= free
        lost = ~placed
        if lost.any():  # every slot holds a read unordered with this one: forget the first
            self.forgotten_reads += int(lost.sum())
            self._reads[0][span] = np.where(lost, epoch, self._reads[0][span])

    def _report(self, found, span, site: int, vc: np.ndarray) -> None:
        other, at, count, they_wrote = found
        index = (span.start + at) if isinstance(span, slice) else int(span[at])
        pe, offset = divmod(index, self.heap_size)
        mine = self._site_text(site)
        theirs = self._site_text((other >> 1) & (SITES - 1))
        pair = frozenset((mine[0] + mine[3], theirs[0] + theirs[3]))
        if pair in self.reported:
            return
        self.reported.add(pair)
        other_tid = (other >> 16) & 0xFFFF
        in_flight = other_tid % TIDS >= SLOTS
        # a put's clock is its issuer's at the issue (issue()): seen here, the put was published uncompleted
        published = in_flight and vc[other_tid - SLOTS] >= other >> 32
        message = (
            f"race: {_side(mine)}\n  and {_side(theirs, in_flight)}\n"
            f"  on {count} byte(s) from heap offset {offset:#x} of PE {pe}{_allocation(self.heap, offset)};\n"
            f"  {_remedy(mine, theirs, published, they_wrote)}"
        )
        if _config.get("UNISHMEM_RACE_CHECK") == "report":
            self.races.append(message)
            return
        raise RaceError(message)

    # ---- synchronisation ------------------------------------------------------------------------

    def _sync_slot(self, key: int) -> int:
        slot = self._sync_slots.get(key)
        if slot is not None:
            return slot
        start = hash(key) % SYNC_WORDS
        for probe in range(SYNC_WORDS):
            slot = (start + probe) % SYNC_WORDS
            held = int(self._keys[slot])
            if held == key:
                break
            if held == 0:
                self._keys[slot] = key
                break
        else:
            raise UnishmemError(f"the race check follows at most {SYNC_WORDS} signal words, atomics and teams")
        self._sync_slots[key] = slot
        return slot

    def release(self, thread: _Thread, key: int) -> None:
        """Before a releasing operation: the object's clock takes this thread's (then the thread moves on)."""
        with self:
            slot = self._sync_slot(key)
            np.maximum(self._clocks[slot], thread.vc, out=self._clocks[slot])
        thread.vc[thread.tid] += 1

    def acquire(self, thread: _Thread, key: int) -> None:
        """After an acquiring operation: this thread's clock takes the object's."""
        with self:
            slot = self._sync_slot(key)
            np.maximum(thread.vc, self._clocks[slot], out=thread.vc)

    def word_key(self, addr: int) -> int:
        """The synchronisation object of the word at addr (any memory as this process maps it)."""
        found = self.owner(addr)
        if found is None:
            return (_LOCAL << 60) | (self.pe << 47) | addr
        return (_HEAP << 60) | (found[0] << 44) | found[1]

    def barrier_key(self, team: int) -> int:
        """A team's barrier: two objects used in turn, so that a PE already at the next barrier
        releases into the other while a slow one still acquires from this one."""
        entered = self._barriers[team] = self._barriers.get(team, 0) + 1
        return (_BARRIER << 60) | (team << 1) | (entered & 1)

    def issue(self, thread: _Thread) -> _Thread:
        """A put issued by thread: its companion takes what the thread has seen, one step on."""
        flight = self.companion(thread)
        np.maximum(flight.vc, thread.vc, out=flight.vc)
        flight.vc[flight.tid] = thread.vc[thread.tid]  # its issuer's clock: a report can tell it was published
        thread.vc[thread.tid] += 1
        return flight

    def complete(self, thread: _Thread, every: bool = False) -> None:
        """quiet (fence): the thread's puts (every: all of this PE's) are done."""
        for flight in list(self._companions.values()) if every else [self.companion(thread)]:
            np.maximum(thread.vc, flight.vc, out=thread.vc)

    # ---- the device library's and the host API's calls (NOTE [happens-before]) ----------------------
    # Addresses are this PE's: a symmetric one names the same bytes of PE `pe`.

    def _remote(self, addr: int, nbytes: int, pe: int) -> slice:
        return self.span(pe, addr - self.heap_base, nbytes)

    def put(self, dest: int, source: int, nbytes: int, pe: int) -> None:
        """A put: the source read now, the write by the thread's puts in flight."""
        thread = self.current()
        self.access(self.local_span(source, nbytes), thread, "put's read of its source", False)
        self.access(self._remote(dest, nbytes, pe), self.issue(thread), f"put to PE {pe}", True)

    def get(self, dest: int, source: int, nbytes: int, pe: int) -> None:
        thread = self.current()
        self.access(self._remote(source, nbytes, pe), thread, f"get from PE {pe}", False)
        self.access(self.local_span(dest, nbytes), thread, "get's write of its destination", True)

    def put_signal(self, dest: int, source: int, nbytes: int, signal: int, pe: int) -> None:
        """Before putmem_signal: its data lands before its signal, which releases the data."""
        thread = self.current()
        self.access(self.local_span(source, nbytes), thread, "putmem_signal's read of its source", False)
        flight = self.issue(thread)
        self.access(self._remote(dest, nbytes, pe), flight, f"putmem_signal to PE {pe}", True)
        self._signal(flight, signal, pe)

    def signal(self, signal: int, pe: int) -> None:
        """Before signal_op: it releases what this thread did (not its puts in flight)."""
        self._signal(self.current(), signal, pe)

    def _signal(self, thread: _Thread, signal: int, pe: int) -> None:
        self.access(self._remote(signal, 8, pe), thread, f"signal update on PE {pe}", True, True)
        self.release(thread, (_HEAP << 60) | (pe << 44) | (signal - self.heap_base))

    def waited(self, addr: int, size: int, count: int = 1) -> None:
        """After a wait returned (or a test that was true): each word read, and acquired."""
        thread = self.current()
        for i in range(count):
            word = addr + i * size
            self.access(self.local_span(word, size), thread, "wait", False, True)
            self.acquire(thread, self.word_key(word))

    def amo(self, addr: int, size: int, pe: int) -> int:
        """Before an atomic on PE pe's word: recorded and released; the caller acquires the key after."""
        thread = self.current()
        self.access(self._remote(addr, size, pe), thread, f"atomic on PE {pe}", True, True)
        key = (_HEAP << 60) | (pe << 44) | (addr - self.heap_base)
        self.release(thread, key)
        return key

    def barrier(self, team: int, run, quiet: bool, every: bool = False):
        """run(), a barrier or sync of `team`: quiet first where it implies one (every: all of this PE's puts)."""
        thread = self.current()
        if quiet:
            self.complete(thread, every)
        key = self.barrier_key(team)
        self.release(thread, key)
        out = run()
        self.acquire(thread, key)
        return out

    def collective(self, team: int, run, source: int, source_bytes: int, dest: int, dest_bytes: int):
        """run(), a collective of `team`: ordered as a barrier, then its read of source and write of dest here."""
        out = self.barrier(team, run, quiet=False)
        thread = self.current()
        self.access(self.local_span(source, source_bytes), thread, "collective's read of its source", False)
        self.access(self.local_span(dest, dest_bytes), thread, "collective's write of its destination", True)
        return out


def _first(epochs: np.ndarray, bad: np.ndarray, wrote: bool):
    """(the epoch, its index, how many, whether it was a write) of the first unordered access, or None."""
    if not bad.any():
        return None
    at = int(np.argmax(bad))
    return int(epochs[at]), at, int(bad.sum()), wrote


def _unordered(epochs: np.ndarray, vc: np.ndarray, atomic: bool) -> np.ndarray:
    """Which epochs are not ordered before a thread whose clock is vc (empty ones are)."""
    tids = ((epochs >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.intp)
    bad = (epochs >> np.uint64(32)).astype(np.int64) > vc[tids]
    if atomic:
        bad &= (epochs & np.uint64(1)) == 0
    return bad


def _side(site: tuple[str, ...], in_flight: bool = False) -> str:
    what, pe, who, where = site
    flight = " (still in flight: not completed by fence or quiet)" if in_flight else ""
    return f"{what} by PE {pe}, {who}, {where}{flight}"


def _remedy(mine, theirs, published: bool, they_wrote: bool) -> str:
    """What would have ordered the two sides, from who they are."""
    if published:
        return (
            "the put was published before it completed: a fence or quiet between the put and the signal that "
            "published it (or putmem_signal, which delivers its data first) would order them"
        )
    if "host" in mine[2] or "host" in theirs[2]:
        return (
            "a barrier between them (rt.barrier_all(), which also completes the puts of this PE's kernels) or "
            "a signal the second side waits for would order them"
        )
    if mine[1] == theirs[1]:
        return (
            "nothing orders two programs of one launch: a signal (or atomic release) that one sets after its "
            "access and the other waits for before its own, or barrier_all_grid, would"
        )
    if they_wrote and mine[0].startswith(("put", "write", "atomic", "signal")):
        return (
            "nothing orders the two writes: write disjoint bytes, or have one writer wait for a signal the other sets"
        )
    return (
        "a signal would order them: set by the writer after its write and waited for by the reader before it "
        "reads, or, where the write reuses a buffer, set by the reader once it has read and waited for by the "
        "writer before it writes again (or a barrier between them)"
    )


def _allocation(heap, offset: int) -> str:
    for alloc in heap.live():
        if alloc.offset <= offset < alloc.offset + alloc.nbytes:
            return f" (byte {offset - alloc.offset} of the {alloc.nbytes}-byte allocation at heap offset {alloc.offset:#x})"
    return ""


_ROOT = os.path.dirname(__file__) + os.sep
_KERNELS = os.path.join(_ROOT, "kernels") + os.sep


def _call_site(kernel: str | None) -> str:
    """The innermost frame outside Triton, threading and unishmem's own machinery (its kernels are
    code a race can be in): 'kernel NAME at file.py:LINE in fn' on a program, 'file.py:LINE in fn' else."""
    triton = sys.modules.get("triton")
    skip = os.path.dirname(triton.__file__) + os.sep if triton is not None and triton.__file__ else None
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        own = name.startswith(_ROOT) and not name.startswith(_KERNELS)
        if not (own or name.startswith("<") or name == threading.__file__ or (skip and name.startswith(skip))):
            where = f"{os.path.basename(name)}:{frame.f_lineno} in {frame.f_code.co_name}"
            return f"kernel {kernel} at {where}" if kernel is not None else where
        frame = frame.f_back
    return "at an unknown site"


# ---- the active runtime's checker ---------------------------------------------------------------

_checker: Checker | None = None


def checker() -> Checker | None:
    """The checker of the active runtime, where UNISHMEM_RACE_CHECK is set."""
    return _checker


def waited(addr: int, size: int, count: int = 1) -> None:
    """After a wait (device or host) returned: each word's updates released what comes before what follows
    (NOTE [happens-before]); nothing where no check runs."""
    if _checker is not None:
        _checker.waited(addr, size, count)


def start(core, segments: str | None) -> None:
    """Collective, at init: every PE maps one segment that PE 0 makes, and PE 0 unlinks it once all have (or
    at once, when the start fails). It is named among the init's segments (`segments`, their token), which
    the launcher removes however the job ends, a PE killed in between included."""
    global _checker
    if _config.get("UNISHMEM_RACE_CHECK") is None:
        return
    if core.backend != "host":
        raise UnishmemError(
            "UNISHMEM_RACE_CHECK checks kernels under the interpreter, "
            f"on the host backend; this runtime's backend is {core.backend!r}"
        )
    if core.n_pes > MAX_PES:
        raise UnishmemError(f"UNISHMEM_RACE_CHECK follows at most {MAX_PES} PEs; this job has {core.n_pes}")
    bases = [core.native.peer_ptr(core.heap_base, pe) for pe in range(core.n_pes)]

    def mapped(name: str, create: bool) -> Checker:
        return Checker(name, create, core.my_pe, core.n_pes, core.heap, bases)

    name = f"/dev/shm/unishmem-{segments}-races"
    try:
        made = mapped(name, True) if core.my_pe == 0 else None
        core.bootstrap.allgather(True)  # PE 0 has made it
        made = made or mapped(name, False)
        core.bootstrap.allgather(True)  # every PE has mapped it
    finally:
        if core.my_pe == 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
    _checker = made
    _install()


def stop() -> list[str]:
    """At finalize: the races recorded (UNISHMEM_RACE_CHECK=report), reported on stderr."""
    global _checker
    found, _checker = _checker, None
    if found is None:
        return []
    found.close()
    for message in found.races:
        print(message, file=sys.stderr)
    if found.races:
        print(
            f"unishmem: PE {found.pe}: {len(found.races)} race(s) found (UNISHMEM_RACE_CHECK=report)", file=sys.stderr
        )
    if found.forgotten_reads:
        print(
            f"unishmem: PE {found.pe}: the race check forgot {found.forgotten_reads} reads (more than {READS} "
            "unordered reads of one byte): a race with one of them may have been missed",
            file=sys.stderr,
        )
    return found.races


# ---- Triton's interpreter: loads, stores and atomics ---------------------------------------------

_atomic_access = threading.local()  # set while an atomic load or store runs through a plain one


def _program_thread():
    """The checker and the current program's thread, on a program's thread of a checked launch."""
    found = _checker
    if found is None:
        return None, None
    thread = getattr(found._local, "thread", None)
    return (found, thread) if thread is not None else (None, None)


def _elements(ptrs, mask):
    addrs = np.asarray(ptrs.data).reshape(-1)
    if mask is not None:
        addrs = addrs[np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(ptrs.data)).reshape(-1)]
    return addrs, ptrs.get_element_ty().primitive_bitwidth // 8


def _acquires(sem) -> bool:
    return sem.name in ("ACQUIRE", "ACQUIRE_RELEASE")


def _releases(sem) -> bool:
    return sem.name in ("RELEASE", "ACQUIRE_RELEASE")


def _install() -> None:
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_masked_load, "_unishmem_races", False):
        return
    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas
    atomic_load, atomic_store = builder.create_atomic_load, builder.create_atomic_store

    def masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        found, thread = _program_thread()
        if found is not None:
            addrs, size = _elements(ptrs, mask)
            atomic = getattr(_atomic_access, "on", False)
            what = "atomic read" if atomic else "volatile read" if is_volatile else "read"
            found.access(found.element_bytes(addrs, size), thread, what, False, atomic or bool(is_volatile))
        return load(self, ptrs, mask, other, cache_policy, is_volatile)

    def masked_store(self, ptrs, value, mask, cache_policy):
        found, thread = _program_thread()
        if found is not None:
            addrs, size = _elements(ptrs, mask)
            span = found.element_bytes(addrs, size)
            if found.elsewhere(span):  # a store through remote_ptr: delivered by fence or quiet, as a put
                found.access(span, found.issue(thread), "store to another PE", True)
            else:
                found.access(span, thread, "write", True)
        return store(self, ptrs, value, mask, cache_policy)

    def synchronised(ptr, mask, sem, run, what):
        found, thread = _program_thread()
        if found is None:
            return run()
        addrs, size = _elements(ptr, mask)
        sem = builder.ir_sem_to_interpreter_sem[sem]
        keys = {found.word_key(int(a)) for a in addrs}
        found.access(found.element_bytes(addrs, size), thread, what, True, True)
        if _releases(sem):
            for key in keys:
                found.release(thread, key)
        out = run()
        if _acquires(sem):
            for key in keys:
                found.acquire(thread, key)
        return out

    def atomic_rmw(self, op, ptr, val, mask, sem, scope):
        return synchronised(ptr, mask, sem, lambda: rmw(self, op, ptr, val, mask, sem, scope), "atomic")

    def atomic_cas(self, ptr, cmp, val, sem, scope):
        return synchronised(ptr, None, sem, lambda: cas(self, ptr, cmp, val, sem, scope), "atomic compare-swap")

    def atomic_read(self, ptr, mask, sem, scope):
        _atomic_access.on = True
        try:
            found, thread = _program_thread()
            out = atomic_load(self, ptr, mask, sem, scope)
            if found is not None and _acquires(builder.ir_sem_to_interpreter_sem[sem]):
                for key in {found.word_key(int(a)) for a in _elements(ptr, mask)[0]}:
                    found.acquire(thread, key)
            return out
        finally:
            _atomic_access.on = False

    def atomic_write(self, ptr, val, mask, sem, scope):
        found, thread = _program_thread()
        if found is None:
            return atomic_store(self, ptr, val, mask, sem, scope)
        addrs, size = _elements(ptr, mask)
        found.access(found.element_bytes(addrs, size), thread, "atomic write", True, True)
        if _releases(builder.ir_sem_to_interpreter_sem[sem]):
            for key in {found.word_key(int(a)) for a in addrs}:
                found.release(thread, key)
        return store(self, ptr, val, mask, None)  # Triton's atomic store, unrecorded: recorded above

    for fn in (masked_load, masked_store, atomic_rmw, atomic_cas, atomic_read, atomic_write):
        fn._unishmem_races = True  # type: ignore[union-attr]  # a marker on the function: installed once
    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas = atomic_rmw, atomic_cas
    builder.create_atomic_load, builder.create_atomic_store = atomic_read, atomic_write
