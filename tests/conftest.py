import glob

import pytest


@pytest.fixture(autouse=True, scope="session")
def no_segments_left_behind():
    """Every job must remove its shared-memory segments, whatever happened to it."""
    before = set(glob.glob("/dev/shm/unishmem-*"))
    yield
    left = set(glob.glob("/dev/shm/unishmem-*")) - before
    assert not left, f"shared-memory segments left behind: {sorted(left)}"
