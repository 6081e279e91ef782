"""The installed nvidia-nvshmem wheel (the `cuda` extra), for the tests that check files against it."""

import importlib.metadata

import pytest


def _nvshmem_wheel():
    for dist in importlib.metadata.distributions():
        if (dist.metadata["Name"] or "").lower().startswith("nvidia-nvshmem"):
            return dist
    return None


WHEEL = _nvshmem_wheel()
needs_wheel = pytest.mark.skipif(WHEEL is None, reason="no nvidia-nvshmem wheel installed (the `cuda` extra)")
