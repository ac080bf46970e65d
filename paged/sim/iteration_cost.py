"""What every time model of a serving iteration shares: the dispatch from a scheduled iteration to a time.

A time model of the simulator (:class:`paged.sim.executor.SimulatedExecutor`) is called with the
scheduler's :class:`~paged.core.scheduler.SchedulerOutputs` and returns the iteration's seconds. Both
the GPU cost model of the paper's servers (:class:`paged.sim.cost_model.CostModel`) and the cost
model fitted to a profile of this project's CPU engine (:class:`paged.sim.linear_cost.LinearCostModel`)
have the same form, so they share this dispatch:

* a **prefill** iteration costs ``prefill_time(prompt_lens)`` over the running sequences' tokens (a
  recomputation passes prompt + generated tokens, §4.5);
* a **decode** iteration costs ``decode_time(num_seqs, context_tokens)``, which must be linear in
  ``context_tokens`` for a fixed ``num_seqs`` (the simulator's fast-forward sums runs of decode
  iterations with it);
* swaps before the iteration add ``swap_time(blocks)`` for each direction (§4.5);
* copy-on-write block copies before the iteration (``blocks_to_copy``, §4.4: a block shared by
  forked sequences is copied when one of them writes into it) add ``block_copy_time(blocks)``.

A contiguous system's fork copies the parent's whole KV into the child's reservation
(:attr:`paged.contiguous.ContiguousKVCacheManager.fork_copies_kv`); the simulated executor charges
it with ``kv_copy_time(tokens)`` (:class:`paged.sim.executor.SimulatedExecutor`).
"""

from __future__ import annotations

from functools import partial

from paged.core.scheduler import SchedulerOutputs
from paged.core.sequence import SequenceStatus

__all__ = ["IterationCostModel", "ConstantIterationTime"]


class IterationCostModel:
    """Base of the iteration time models (module docstring). Subclasses define ``prefill_time``,
    ``decode_time`` and ``swap_time`` (seconds)."""

    __slots__ = ()

    def prefill_time(self, prompt_lens: list[int]) -> float:  # pragma: no cover - abstract
        """Seconds for one prefill over prompts of ``prompt_lens`` tokens each."""
        raise NotImplementedError

    def decode_time(self, num_seqs: int, context_tokens: int) -> float:  # pragma: no cover - abstract
        """Seconds for one decode of ``num_seqs`` sequences whose contexts total ``context_tokens``."""
        raise NotImplementedError

    def decode_time_of(self, num_seqs: int):
        """:meth:`decode_time` of ``num_seqs`` sequences as a function of the context tokens alone (here
        :meth:`decode_time` itself with the first argument bound; subclasses compute their constant terms
        once, returning exactly the same seconds)."""
        return partial(self.decode_time, num_seqs)

    def swap_time(self, num_blocks: int) -> float:  # pragma: no cover - abstract
        """Seconds to move ``num_blocks`` KV blocks one way between device and host."""
        raise NotImplementedError

    def kv_copy_time(self, num_tokens: int) -> float:
        """Seconds to copy the KV of ``num_tokens`` tokens inside device memory. 0 here: a time model
        without a copy cost (a fitted engine profile, whose measured steps already hold its copies)."""
        return 0.0

    def block_copy_time(self, num_blocks: int) -> float:
        """Seconds of ``num_blocks`` copy-on-write block copies inside device memory. 0 here (as above)."""
        return 0.0

    def recompute_time(self, num_tokens: int) -> float:
        """Seconds to recompute the KV of one ``num_tokens``-token sequence (a prefill, §4.5)."""
        return self.prefill_time([num_tokens])

    def __call__(self, outputs: SchedulerOutputs) -> float:
        """Seconds for the iteration the scheduler chose, swaps and copy-on-write copies included
        (before the step). O(sequences)."""
        running = SequenceStatus.RUNNING
        t = 0.0
        if outputs.blocks_to_swap_in:
            t += self.swap_time(len(outputs.blocks_to_swap_in))
        if outputs.blocks_to_swap_out:
            t += self.swap_time(len(outputs.blocks_to_swap_out))
        if outputs.blocks_to_copy:
            t += self.block_copy_time(len(outputs.blocks_to_copy))
        if outputs.is_prefill:  # the tokens computed: a prompt shared by samples once, cached tokens not
            return t + self.prefill_time(outputs.prefill_token_counts())
        num_seqs = context = 0
        for group in outputs.scheduled_seq_groups:
            for seq in group.seqs:
                if seq.status is running:
                    num_seqs += 1
                    context += seq.num_tokens
        return t + self.decode_time(num_seqs, context)


class ConstantIterationTime(IterationCostModel):
    """Every iteration takes ``seconds``, whatever it computes, swaps or copies: the clock of a study of
    memory alone (Fig. 2), where time only spaces arrivals against iterations.

    Raises:
        ValueError: if ``seconds`` is not a finite number > 0.
    """

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
            raise ValueError(f"seconds must be a finite number > 0, got {seconds!r}")
        self.seconds = float(seconds)

    def prefill_time(self, prompt_lens: list[int]) -> float:
        return self.seconds

    def decode_time(self, num_seqs: int, context_tokens: int) -> float:
        return self.seconds

    def swap_time(self, num_blocks: int) -> float:
        return 0.0
