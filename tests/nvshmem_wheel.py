"""The installed nvidia-nvshmem wheel (the `cuda` extra), for the tests that check files against it."""

import importlib.metadata
import re
from pathlib import Path

import pytest


def _nvshmem_wheel():
    for dist in importlib.metadata.distributions():
        if (dist.metadata["Name"] or "").lower().startswith("nvidia-nvshmem"):
            return dist
    return None


WHEEL = _nvshmem_wheel()
needs_wheel = pytest.mark.skipif(WHEEL is None, reason="no nvidia-nvshmem wheel installed (the `cuda` extra)")


def wheel_file(name: str) -> Path:
    entry = next(f for f in WHEEL.files if f.name == name)
    return Path(WHEEL.locate_file(entry)).resolve()


def wheel_bitcode() -> dict[str, Path]:
    """The device bitcode files the wheel's RECORD lists, by name: one per arch from NVSHMEM 3.7
    (libnvshmem_device_sm_90.bc...), one for every arch before (libnvshmem_device.bc)."""
    return {f.name: wheel_file(f.name) for f in WHEEL.files if re.fullmatch(r"libnvshmem_device(_sm_\d+)?\.bc", f.name)}


def sm_90_bitcode() -> Path:
    """The file a device of compute capability 9.0 links, by the wheel's layout."""
    files = wheel_bitcode()
    return files.get("libnvshmem_device_sm_90.bc") or files["libnvshmem_device.bc"]
