"""The paper's measures (§3, §6.1): where KV memory goes, memory saved by sharing, normalized latency.

* :class:`MemoryStats`: KV slots by use, summed over iterations and averaged as in Fig. 2;
* :class:`SharingStats`: KV blocks held with and without sharing, for the saving of §6.3, Fig. 15;
* :func:`request_metrics`: normalized latency (Fig. 12's y-axis), TTFT, TPOT and throughput of the
  finished requests of the simulator or the real engine.

Sums are integers (slot- or block-iterations), so a run of ``k`` identical iterations added at once (the
simulator's fast-forward) gives exactly the sums of ``k`` single additions; each iteration weighs the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from paged.core.kv_cache_manager import MemoryUsage
from paged.core.sequence import SequenceGroup

__all__ = ["MemoryStats", "SharingStats", "request_metrics"]


@dataclass(slots=True)
class MemoryStats:
    """KV slots of each part summed over the iterations in which requests waited (§3, Fig. 2), in
    slot-iterations."""

    iterations: int = 0
    token_states: int = 0
    reservation: int = 0
    internal: int = 0
    external: int = 0
    total: int = 0  #: ``iterations × num_total_slots``

    def add(self, usage: MemoryUsage) -> None:
        """Add one iteration's :class:`~paged.core.kv_cache_manager.MemoryUsage`."""
        self.add_usage(usage, 1)

    def add_usage(self, usage: MemoryUsage, iterations: int) -> None:
        """Add ``usage`` holding slot sums over ``iterations`` iterations; external is the rest of ``usage.total``."""
        self.iterations += iterations
        self.token_states += usage.token_states
        self.reservation += usage.reservation
        self.internal += usage.internal
        self.external += usage.total - usage.token_states - usage.reservation - usage.internal
        self.total += usage.total

    def mean(self) -> dict[str, float]:
        """Average fraction of KV memory per part (Fig. 2; sums to 1); NaNs if nothing was recorded."""
        n = self.total or float("nan")
        return {
            "token_states": self.token_states / n,
            "reservation": self.reservation / n,
            "internal": self.internal / n,
            "external": self.external / n,
        }


@dataclass(slots=True)
class SharingStats:
    """KV blocks of the running sequences, with and without sharing, summed over iterations (§6.3, Fig. 15),
    in block-iterations."""

    iterations: int = 0
    blocks_in_use: int = 0  #: physical blocks held
    blocks_without_sharing: int = 0  #: blocks held if each sequence had its own copy of each

    def add(self, in_use: int, without_sharing: int) -> None:
        """Add one iteration's counts (blocks)."""
        self.iterations += 1
        self.blocks_in_use += in_use
        self.blocks_without_sharing += without_sharing

    def add_sums(self, in_use: int, without_sharing: int, iterations: int) -> None:
        """Add ``iterations`` iterations at once, ``in_use`` and ``without_sharing`` being their sums
        (block-iterations): the totals of ``iterations`` calls of :meth:`add`. O(1)."""
        self.iterations += iterations
        self.blocks_in_use += in_use
        self.blocks_without_sharing += without_sharing

    @property
    def saving(self) -> float:
        """Fig. 15's saving: ``1 - blocks_in_use / blocks_without_sharing`` (0 when nothing was held)."""
        if not self.blocks_without_sharing:
            return 0.0
        return 1.0 - self.blocks_in_use / self.blocks_without_sharing


def request_metrics(groups: list[SequenceGroup], duration: float) -> dict[str, float]:
    """Latency and throughput (§6.1) of finished ``groups`` (their times set) over ``duration`` seconds (time 0
    to the last finish): ``normalized_latency`` (mean of end-to-end latency ÷ output tokens, s/token), ``ttft``
    (mean time to first token, s), ``tpot`` (mean time per output token after the first, s, over requests with
    more than one), ``throughput_rps`` (requests/s) and ``throughput_tps`` (output tokens/s).

    Raises:
        ValueError: if a request has not finished, or there are none.
    """
    if not groups:
        raise ValueError("no requests to measure")
    if any(g.finished_time is None for g in groups):
        raise ValueError("every request must have finished")
    n = len(groups)
    out_tokens = sum(g.output_len for g in groups)
    norm = sum((g.finished_time - g.arrival_time) / g.output_len for g in groups) / n
    ttft = sum(g.first_token_time - g.arrival_time for g in groups) / n
    multi = [g for g in groups if g.output_len > 1]
    tpot = sum((g.finished_time - g.first_token_time) / (g.output_len - 1) for g in multi) / max(len(multi), 1)
    span = duration or float("nan")
    return {"normalized_latency": norm, "ttft": ttft, "tpot": tpot, "throughput_rps": n / span,
            "throughput_tps": out_tokens / span}
