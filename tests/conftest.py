import pytest
import spmd


@pytest.fixture(autouse=True, scope="session")
def no_segments_left_behind():
    """Every job must remove its shared-memory segments, whatever happened to it."""
    before = spmd.segments()
    yield
    spmd.close_jobs()  # the last job may still be finalizing
    left = spmd.segments_left(before)
    assert not left, f"shared-memory segments left behind: {sorted(left)}"


@pytest.fixture
def spmd_started(request):
    """The setup of an SPMD test: every PE has begun its function (tests/spmd.py)."""
    spmd.started(request.node)


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected
def pytest_collection_modifyitems(items):
    """SPMD tests run after the plain ones, grouped into one job per size (tests/spmd.py)."""
    keys = {id(item): spmd.spmd_key(item) for item in items}
    spmd_items = [item for item in items if keys[id(item)] is not None]
    order = spmd.plan([keys[id(item)] for item in spmd_items])
    rank = {(n, m, name): i for i, (n, _, m, name) in enumerate(order)}
    spmd_items.sort(key=lambda item: rank[keys[id(item)]])
    items[:] = [item for item in items if keys[id(item)] is None] + spmd_items


def pytest_sessionfinish():
    spmd.close_jobs()  # jobs of an interrupted session
