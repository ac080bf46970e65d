"""Workload tests keep the trace cache out of the checkout: each test gets its own empty one."""

import pytest


@pytest.fixture(autouse=True)
def private_trace_cache(tmp_path, monkeypatch):
    """``PAGED_CACHE_DIR`` points at a fresh folder for every test (returned, for tests that look in it)."""
    folder = tmp_path / "trace-cache"
    monkeypatch.setenv("PAGED_CACHE_DIR", str(folder))
    return folder
