"""UNISHMEM_* settings that are numbers of seconds: read when needed, checked, and named when wrong."""
from __future__ import annotations

import os

# name -> (default, what it is for, whether 0 is allowed (it turns the check off))
SECONDS = {
    "UNISHMEM_WAIT_TIMEOUT": (300.0, "seconds before a wait gives up", False),
    "UNISHMEM_STALL_WARN": (30.0, "seconds before a wait says what it waits for", True),
    "UNISHMEM_DEADLOCK_TIMEOUT": (5.0, "seconds of every PE waiting before a deadlock is declared (0: never)", True),
    "UNISHMEM_BOOTSTRAP_TIMEOUT": (120.0, "seconds one step of init's rendezvous waits for a rank", False),
}


def seconds(name: str) -> float:
    default, _, zero_ok = SECONDS[name]
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
