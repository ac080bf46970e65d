"""Where KV cache memory goes: the paper's Fig. 2 and the waste-vs-block-size sweep (§3, §6.2).

Each system serves the same trace with the same scheduler; only the KV cache manager differs
(:data:`SYSTEMS`). Time does not matter for where memory goes when every request is already
waiting (``rate=inf``, the default), so iterations take a constant :data:`ITERATION_TIME`; a
finite rate uses it to space arrivals against iterations.
"""

from __future__ import annotations

import pandas as pd

from paged.block_manager import PagedKVCacheManager
from paged.config import GiB, get_model, kv_cache_slots
from paged.contiguous import ContiguousKVCacheManager
from paged.simulator import SimulationResult, simulate

__all__ = [
    "SYSTEMS",
    "ITERATION_TIME",
    "make_kv_manager",
    "default_num_slots",
    "memory_waste",
    "memory_waste_table",
    "waste_vs_block_size",
]

#: Systems compared in Fig. 2, in the paper's order: name -> contiguous policy (None = paged).
SYSTEMS: dict[str, str | None] = {
    "orca-max": "max",
    "orca-pow2": "pow2",
    "orca-oracle": "oracle",
    "paged": None,
}

#: Seconds per iteration when only memory is measured: about one OPT-13B decode step on an
#: A100 (a 26 GB weight read at ~1.5 TB/s is ≈ 17 ms, plus KV reads); it only spaces
#: arrivals against iterations when the request rate is finite.
ITERATION_TIME = 0.025


def default_num_slots(model: str = "opt-13b", kv_cache_bytes: int = 12 * GiB, block_size: int = 16) -> int:
    """KV slots of the paper's default server: OPT-13B on one A100-40GB, 12 GiB of KV cache
    (Table 1) → 15,728 slots in 16-token blocks."""
    return kv_cache_slots(get_model(model), kv_cache_bytes, block_size)


def make_kv_manager(system: str, num_slots: int, *, block_size: int = 16, max_seq_len: int = 2048):
    """A fresh KV cache manager for ``system`` over ``num_slots`` token slots.

    The paged manager gets ``num_slots // block_size`` blocks.

    Raises:
        ValueError: for an unknown system.
    """
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}; choose one of {list(SYSTEMS)}")
    policy = SYSTEMS[system]
    if policy is None:
        return PagedKVCacheManager(num_slots // block_size, block_size)
    return ContiguousKVCacheManager(num_slots, policy, max_seq_len=max_seq_len)


def memory_waste(
    trace,
    system: str,
    *,
    num_slots: int | None = None,
    block_size: int = 16,
    max_seq_len: int = 2048,
) -> tuple[dict[str, float], SimulationResult]:
    """Average share of KV memory in token states / reservation / internal / external (Fig. 2).

    Averaged over the iterations in which at least one request was waiting (the cache is the
    binding constraint then), each iteration weighted equally.

    Returns:
        (fractions summing to 1, the :class:`SimulationResult`).

    Raises:
        ValueError: for an unknown system; RequestTooLargeError if a request can never fit.
    """
    num_slots = num_slots or default_num_slots(block_size=block_size)
    manager = make_kv_manager(system, num_slots, block_size=block_size, max_seq_len=max_seq_len)
    result = simulate(trace, manager, lambda outputs: ITERATION_TIME)
    return result.memory.mean(), result


def memory_waste_table(trace, systems=tuple(SYSTEMS), **kwargs) -> pd.DataFrame:
    """One row per system: the four fractions, average batched requests, iterations averaged."""
    rows = []
    for system in systems:
        fractions, result = memory_waste(trace, system, **kwargs)
        rows.append({"system": system, **fractions,
                     "avg_batched_requests": result.avg_batched_requests,
                     "iterations_averaged": result.memory.iterations})
    return pd.DataFrame(rows)


def waste_vs_block_size(trace, block_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256), *, num_slots=None,
                        max_seq_len: int = 2048) -> pd.DataFrame:
    """Paged manager's memory shares for each block size, same KV capacity in slots."""
    num_slots = num_slots or default_num_slots(block_size=1)
    rows = []
    for block_size in block_sizes:
        fractions, result = memory_waste(trace, "paged", num_slots=num_slots, block_size=block_size,
                                         max_seq_len=max_seq_len)
        rows.append({"block_size": block_size, **fractions,
                     "avg_batched_requests": result.avg_batched_requests})
    return pd.DataFrame(rows)
