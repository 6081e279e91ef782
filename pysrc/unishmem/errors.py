"""Exception and warning classes. Every error this package raises on purpose subclasses UnishmemError,
except bad argument values and types, which raise ValueError / TypeError naming the value."""


class UnishmemError(RuntimeError):
    """Base class of unishmem's errors. `code` is the status a vendor or device-runtime call returned
    where one failed (the message names the call), else None."""

    code: int | None = None


class NotInitializedError(UnishmemError):
    """No runtime is active: call unishmem.init() first (or it was finalized)."""


class SymmetryError(UnishmemError):
    """PEs disagreed on a collective call (size, dtype, order); raised on every PE."""


class NotSymmetricError(UnishmemError, ValueError):
    """A tensor outside the symmetric heap was given where a symmetric one is required."""


class PeerFailure(UnishmemError):
    """A peer PE died or finalized while this PE waited for it."""


class BackendUnavailable(UnishmemError):
    """The requested backend cannot run here; the message says why."""


class HeapExhaustedError(UnishmemError, MemoryError):
    """The symmetric heap has no block large enough; the message gives requested and free bytes."""


class WaitTimeout(UnishmemError, TimeoutError):
    """A wait went on longer than UNISHMEM_WAIT_TIMEOUT seconds; the message says what it waited for."""


class DeadlockError(UnishmemError):
    """Every PE is waiting and none can make progress; the message says what each waits for, and
    `report` holds the per-PE reports it was written from (unishmem.hang)."""

    report: list | None  # set by whoever raises it


class RaceError(UnishmemError):
    """Under UNISHMEM_RACE_CHECK, two accesses to symmetric memory that nothing orders; the message, which
    starts with "race:", names both sides, the bytes, and what would have ordered them."""


class NotAvailableError(UnishmemError, ValueError):
    """A device function, or a form of one (an element type), that the compile target's vendor library lacks.
    Raised while a kernel compiles; `function` and `vendor` name what is missing where, the message says why."""

    def __init__(self, function: str, vendor: str, message: str):
        super().__init__(message)
        self.function, self.vendor = function, vendor


class CaptureError(UnishmemError):
    """A call did something inside `unishmem.testing.capture()` that a CUDA graph cannot capture."""


class UnishmemWarning(UserWarning):
    """Something worth telling that is not an error (leaks found at finalize, a stalled wait)."""
