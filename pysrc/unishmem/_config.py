"""UNISHMEM_* settings: read when needed, checked, and named when wrong."""

from __future__ import annotations

import os

# name -> (default, whether 0 is allowed: it turns the check off)
SECONDS = {
    "UNISHMEM_WAIT_TIMEOUT": (300.0, False),  # before a wait gives up
    "UNISHMEM_STALL_WARN": (30.0, True),  # before a wait says what it waits for
    "UNISHMEM_DEADLOCK_TIMEOUT": (5.0, True),  # of every PE waiting before a deadlock is declared
    "UNISHMEM_BOOTSTRAP_TIMEOUT": (120.0, False),  # one step of init's rendezvous waits for a rank
    "UNISHMEM_HANG_TIMEOUT": (0.0, True),  # a launch runs before the hang watchdog reports; 0: off
}


def seconds(name: str) -> float:
    default, zero_ok = SECONDS[name]
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value >= 0 if zero_ok else value > 0) or value == float("inf"):
        need = "a number of seconds >= 0" if zero_ok else "a positive number of seconds"
        raise ValueError(f"{name}={text!r} is not {need}")
    return value


# Under TRITON_INTERPRET=1, programs of one launch resident at once on each PE. A GPU keeps many
# (an SM holds several; an H200 has 132 SMs); here each is a thread, and 64 covers the grids that
# communicating and persistent kernels are tested with at little memory. 1 runs them one after another.
RESIDENT_DEFAULT = 64


def resident(value, what: str) -> int:
    """value as a residency cap, or a ValueError naming `what` (a setting or an argument)."""
    from .backends import native_module

    max_resident_programs = native_module("host").max_resident_programs
    if isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    else:
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
    if number is None or not 1 <= number <= max_resident_programs:
        raise ValueError(f"{what}={value!r} is not a whole number of programs from 1 to {max_resident_programs}")
    return number


def interpret_resident() -> int:
    text = os.environ.get("UNISHMEM_INTERPRET_RESIDENT")
    return RESIDENT_DEFAULT if text is None else resident(text, "UNISHMEM_INTERPRET_RESIDENT")


# UNISHMEM_TEAM_ARENA: bytes of symmetric memory reserved for the kernel workspaces of each team
# smaller than the world, when a world-sized team is split (NOTE [workspaces] in
# unishmem/kernels/_workspace.py); 0 reserves none. Default: a sixteenth of the heap, at most 64 MiB.
TEAM_ARENA_MAX_DEFAULT = 64 << 20


def team_arena(heap_size: int) -> int:
    text = os.environ.get("UNISHMEM_TEAM_ARENA")
    if text is None:
        return min(TEAM_ARENA_MAX_DEFAULT, heap_size // 16)
    if text.strip() == "0":
        return 0
    from . import parse_size

    try:
        return parse_size(text)
    except ValueError:
        raise ValueError(f"UNISHMEM_TEAM_ARENA={text!r} is not a byte count such as 0, 16777216 or '64M'") from None
