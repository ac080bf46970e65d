"""paged: a readable, measurable reproduction of PagedAttention (Kwon et al., SOSP 2023).

The package is grouped by the paper's layers; imports only point down the list:

1. :mod:`paged.workloads` (traces) and :mod:`paged.core` (sequences, the KV cache manager
   interface, the scheduler);
2. :mod:`paged.block` (the paged KV cache manager: allocator, block tables, copy-on-write) and
   :mod:`paged.contiguous` (the Orca baselines: reservation policies, buddy allocator);
3. :mod:`paged.systems` (the one registry of the paper's systems and the KV cache manager factory)
   and :mod:`paged.kernels` (paged-attention kernels);
4. :mod:`paged.sim` (simulated GPU executor) and :mod:`paged.engine` (real-model executor);
5. :mod:`paged.experiments` (one driver per notebook, figures, the paper's numbers);
6. :mod:`paged.bench` and :mod:`paged.cli` (command lines).

The names below are importable from ``paged`` itself; those that need torch (``LLM``,
``SamplingParams``, ``paged_attention``) and the workloads (pandas) are imported on first use, so
``import paged`` and ``python -m paged --help`` stay fast.
"""

from __future__ import annotations

from importlib import import_module

from paged.block import BlockAllocator, BlockTable, OutOfBlocksError, PagedKVCacheManager
from paged.core import Scheduler, Sequence, SequenceGroup, SequenceStatus

__version__ = "0.2.0"

#: Public names imported on first use (they pull in torch, pandas or the simulator), and where they live.
_LAZY = {
    **dict.fromkeys(("Request", "Trace", "get_trace", "load_sharegpt", "load_trace", "poisson_arrivals"),
                    "paged.workloads"),
    "LLM": "paged.engine.llm",
    "SamplingParams": "paged.engine.sampling",
    "shipped_model_path": "paged.engine.shipped_models",
    "paged_attention": "paged.kernels.attention",
    "simulate": "paged.sim.simulator",
    "get_cost_model": "paged.sim.cost_model",
}

__all__ = ["BlockAllocator", "BlockTable", "LLM", "OutOfBlocksError", "PagedKVCacheManager", "Request",
           "SamplingParams", "Scheduler", "Sequence", "SequenceGroup", "SequenceStatus", "Trace", "get_cost_model",
           "get_trace", "load_sharegpt", "load_trace", "paged_attention", "poisson_arrivals", "shipped_model_path", "simulate"]


def __getattr__(name: str):
    """Import a lazy public name (:data:`_LAZY`) on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'paged' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
