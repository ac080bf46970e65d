"""The names users import from ``paged`` itself, without knowing the tree; heavy ones load on first use."""

from __future__ import annotations

import subprocess
import sys

import paged

PUBLIC = ["BlockAllocator", "BlockTable", "OutOfBlocksError", "PagedKVCacheManager", "Scheduler", "Sequence",
          "SequenceGroup", "SequenceStatus", "LLM", "SamplingParams", "simulate", "get_cost_model", "paged_attention",
          "Request", "Trace", "get_trace", "load_trace", "load_sharegpt", "poisson_arrivals"]


def test_public_names_resolve():
    for name in PUBLIC:
        assert getattr(paged, name) is not None, name
    assert set(PUBLIC) <= set(paged.__all__) and set(PUBLIC) <= set(dir(paged))


def test_import_paged_does_not_load_torch():
    code = "import sys, paged; paged.get_trace; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_unknown_attribute():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        paged.nope


def test_import_paged_loads_neither_pandas_nor_torch():
    """``import paged`` stays fast: the workloads (pandas) and the engine (torch) load on first use."""
    code = "import sys, paged; print(sorted(m for m in ('pandas', 'numpy', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
    code = "import paged; print(paged.Trace.__module__, paged.load_sharegpt.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["paged.workloads.trace", "paged.workloads.loader"]
