"""The paper's two measures, in one place (§3, §6.1): where KV memory goes, and normalized latency.

* :class:`MemoryStats`: the KV cache's slots by use (token states, reservation, internal and
  external fragmentation), summed over iterations and averaged as in Fig. 2;
* :class:`SharingStats`: KV blocks held with sharing and without it, summed over iterations, for
  the memory saved by sharing (§6.3, Fig. 15);
* :func:`request_metrics`: normalized latency (the mean over requests of end-to-end latency ÷
  output tokens, s/token, the y-axis of Fig. 12), time to first token, time per output token and
  throughput, from finished sequence groups of the simulator or of the real engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from paged.core.kv_cache_manager import MemoryUsage
from paged.core.sequence import SequenceGroup

__all__ = ["MemoryStats", "SharingStats", "request_metrics"]


@dataclass(slots=True)
class MemoryStats:
    """Sums of KV slot usage over the iterations in which requests were waiting (§3, Fig. 2).

    Sums are integers (slot-iterations), so a run of ``k`` identical-shape iterations added at
    once (the simulator's fast-forward) gives exactly the sums of ``k`` single additions.
    ``mean()`` gives the average share of KV memory in each part over those iterations, each
    iteration weighted equally (Fig. 2's "average during the experiment").

    Attributes:
        iterations: iterations recorded.
        token_states, reservation, internal, external: summed slots of each part.
        total: summed slots of the whole cache (``iterations × num_total_slots``).
    """

    iterations: int = 0
    token_states: int = 0
    reservation: int = 0
    internal: int = 0
    external: int = 0
    total: int = 0

    def add(self, usage: MemoryUsage) -> None:
        """Add one iteration's :class:`~paged.core.kv_cache_manager.MemoryUsage`."""
        self.add_usage(usage, 1)

    def add_usage(self, usage: MemoryUsage, iterations: int) -> None:
        """Add slot sums over ``iterations`` iterations (``usage`` holds the sums, e.g. from a
        fast manager's ``decode_run_usage``); external is the rest of ``usage.total``."""
        self.iterations += iterations
        self.token_states += usage.token_states
        self.reservation += usage.reservation
        self.internal += usage.internal
        self.external += usage.total - usage.token_states - usage.reservation - usage.internal
        self.total += usage.total

    def mean(self) -> dict[str, float]:
        """Average fraction of KV memory per part (sums to 1); NaNs if nothing was recorded."""
        n = self.total or float("nan")
        return {
            "token_states": self.token_states / n,
            "reservation": self.reservation / n,
            "internal": self.internal / n,
            "external": self.external / n,
        }


@dataclass(slots=True)
class SharingStats:
    """KV blocks of the running sequences, with and without sharing, summed over iterations (§6.3).

    The paper's Fig. 15 measure: "the number of blocks we saved by sharing divided by the number of
    total blocks without sharing". Each iteration adds the physical blocks the sequences hold and the
    blocks they would hold if every sequence had its own copy of each of its blocks; :attr:`saving` is
    ``1 - Σ in use / Σ without sharing``, each iteration weighted equally (blocks × iterations). Sums are
    integers, so a run of iterations added at once (:meth:`add_sums`) gives exactly the per-iteration sums.

    Attributes:
        iterations: iterations recorded.
        blocks_in_use: summed physical blocks held (block-iterations).
        blocks_without_sharing: summed blocks without sharing (block-iterations).
    """

    iterations: int = 0
    blocks_in_use: int = 0
    blocks_without_sharing: int = 0

    def add(self, in_use: int, without_sharing: int) -> None:
        """Add one iteration's counts (blocks)."""
        self.iterations += 1
        self.blocks_in_use += in_use
        self.blocks_without_sharing += without_sharing

    def add_sums(self, in_use: int, without_sharing: int, iterations: int) -> None:
        """Add the counts of ``iterations`` iterations at once: ``in_use`` and ``without_sharing`` are their
        sums (block-iterations, e.g. from the simulator's calendars, which sum a run of decode iterations
        in closed form); the same totals as ``iterations`` calls of :meth:`add`. O(1)."""
        self.iterations += iterations
        self.blocks_in_use += in_use
        self.blocks_without_sharing += without_sharing

    @property
    def saving(self) -> float:
        """Fraction of the blocks without sharing that sharing saved (0 when nothing was held)."""
        if not self.blocks_without_sharing:
            return 0.0
        return 1.0 - self.blocks_in_use / self.blocks_without_sharing


def request_metrics(groups: list[SequenceGroup], duration: float) -> dict[str, float]:
    """Latency and throughput of finished requests (§6.1); times in seconds.

    Args:
        groups: finished sequence groups with ``arrival_time``, ``first_token_time`` and
            ``finished_time`` set (seconds) and ``output_len`` (tokens).
        duration: the run's span (seconds), from time 0 to the last finish.

    Returns:
        ``normalized_latency`` (s/token: mean of end-to-end latency ÷ output tokens), ``ttft`` (mean
        time to first token, s), ``tpot`` (mean time per output token after the first, s, over
        requests with more than one), ``throughput_rps`` (requests/s) and ``throughput_tps``
        (output tokens/s) over ``duration``.

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
