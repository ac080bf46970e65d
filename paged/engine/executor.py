"""The engine's executor: one scheduled iteration on the real model (paper §4.1, §4.4, §4.5, §5).

It plugs into the serving loop (:class:`paged.core.serving_loop.ServingLoop`) where the simulator
plugs in its cost model. :meth:`ModelExecutor.execute` is the engine's step: apply the iteration's
swaps and copy-on-write copies to the KV cache tensors, pack the scheduled tokens with their slot
mapping and block tables, run the model once, then choose every sequence's next token (greedy,
sampling, or a beam-search step that forks survivors and frees dropped candidates) and finish the
sequences that stop. :class:`EngineStats` collects what every iteration did (batch size, KV slots
in use, blocks with and without sharing), which the throughput and sharing measurements read.

The clock is wall time since the executor was made (seconds); :meth:`ModelExecutor.wait_until`
sleeps, so requests with arrival times are served as they arrive.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from paged.core.kv_cache_manager import KVCacheManager
from paged.core.scheduler import Scheduler, SchedulerOutputs
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus
from paged.engine.beam_search import BeamSearchState, beam_search_step
from paged.engine.kv_cache import PagedKVCache
from paged.engine.model_runner import ModelRunner
from paged.engine.sampling import make_generator, sample

__all__ = ["EngineStats", "ModelExecutor", "StepStats"]


class StepStats(NamedTuple):
    """One iteration: tokens, slots and blocks are counts; ``seconds`` wall time."""

    is_prefill: bool
    num_seqs: int  # sequences whose next token this iteration produced
    num_tokens: int  # tokens the model computed
    used_slots: int  # KV slots allocated (paged) or reserved (contiguous) during the iteration
    blocks_in_use: int  # paged: physical blocks held
    blocks_without_sharing: int  # paged: blocks the running sequences would hold if nothing were shared
    num_copies: int  # copy-on-write block copies before the iteration
    seconds: float


@dataclass(slots=True)
class EngineStats:
    """Per-iteration statistics of one ``generate`` call.

    Attributes:
        total_slots: KV slots of the cache (tokens).
        bytes_per_slot: KV bytes of one token over all layers (bytes).
        steps: one :class:`StepStats` per iteration.
        elapsed: wall time of the call (seconds).
        num_preemptions: preemptions (recompute or swap).
        generated_tokens: tokens generated over all sequences.
    """

    total_slots: int
    bytes_per_slot: int
    steps: list[StepStats] = field(default_factory=list)
    elapsed: float = 0.0
    num_preemptions: int = 0
    generated_tokens: int = 0

    @property
    def peak_used_slots(self) -> int:
        """Most KV slots allocated (paged) or reserved (contiguous) at once (tokens)."""
        return max((s[3] for s in self.steps), default=0)

    @property
    def peak_kv_bytes(self) -> int:
        """Peak KV memory in use (bytes)."""
        return self.peak_used_slots * self.bytes_per_slot

    @property
    def max_batch_size(self) -> int:
        """Most sequences in one decode iteration."""
        return max((s[1] for s in self.steps if not s[0]), default=0)

    @property
    def mean_batch_size(self) -> float:
        """Mean sequences per decode iteration."""
        sizes = [s[1] for s in self.steps if not s[0]]
        return sum(sizes) / len(sizes) if sizes else 0.0


def _slots(table: list[int], block_size: int, start: int, end: int) -> list[int]:
    return [table[p // block_size] * block_size + p % block_size for p in range(start, end)]


def _finish(scheduler: Scheduler, seq: Sequence, reason: str) -> None:
    seq.finish_reason = reason
    scheduler.finish_seq(seq)


class ModelExecutor:
    """Runs scheduled iterations on a model (a :class:`paged.core.serving_loop.Executor`).

    Args:
        runner: the model on the KV cache.
        kv_cache: the KV cache tensors the runner writes and reads.
        kv_manager: the KV cache manager the scheduler drives (block tables come from it).
        eos_token_ids: the model's end-of-sequence token ids.
        new_seq_id: a fresh sequence id for each beam fork.
        stats: where each iteration's :class:`StepStats` go.

    Attributes:
        now: wall time since the executor was made (seconds).
    """

    def __init__(self, runner: ModelRunner, kv_cache: PagedKVCache, kv_manager: KVCacheManager,
                 eos_token_ids: frozenset[int], new_seq_id: Callable[[], int], stats: EngineStats) -> None:
        self.runner = runner
        self.kv_cache = kv_cache
        self.kv_manager = kv_manager
        self.block_size = kv_manager.block_size
        self.eos_token_ids = eos_token_ids
        self.new_seq_id = new_seq_id
        self.stats = stats
        self._start = self._mark = time.perf_counter()

    @property
    def now(self) -> float:
        """Seconds since the executor was made (wall clock)."""
        return time.perf_counter() - self._start

    def wait_until(self, time_s: float) -> None:
        """Sleep until ``now`` reads ``time_s`` (seconds): no request is there to run."""
        delay = time_s - self.now
        if delay > 0:
            time.sleep(delay)
        self._mark = time.perf_counter()

    def execute(self, scheduler: Scheduler, outputs: SchedulerOutputs) -> bool:
        """The engine's step: run the scheduled iteration ``outputs`` on the model (module docstring).

        Records a :class:`StepStats` (its ``seconds`` span from the end of the previous iteration, so
        the scheduler's time counts). Returns True (sequences may have finished).
        """
        out = outputs
        manager = self.kv_manager
        running_seqs = [s for g in scheduler.running for s in g.seqs if s.status is SequenceStatus.RUNNING]
        memory = (manager.num_used_slots, *manager.blocks_held(running_seqs))
        cache = self.kv_cache
        if out.blocks_to_swap_out:
            cache.swap_out(out.blocks_to_swap_out)
        if out.blocks_to_swap_in:
            cache.swap_in(out.blocks_to_swap_in)
        if out.blocks_to_copy:
            cache.copy_blocks(out.blocks_to_copy)
        bs = self.block_size
        ids, positions, slots, seq_lens, tables, ctx = [], [], [], [], [], []
        rows: list[tuple[SequenceGroup, list[Sequence]]] = []  # per group: the sequences each logits row serves
        prompt_copies: list[tuple[int, int]] = []
        starts = {seq.seq_id: start for seq, start in out.prefill_seqs}
        for group in out.scheduled_seq_groups:
            running = group.get_seqs(SequenceStatus.RUNNING)
            if out.is_prefill:
                first = None  # the group's first computed sequence and its row
                for seq in running:
                    table = manager.get_block_table(seq)
                    n = seq.num_tokens
                    start = starts.get(seq.seq_id, 0)
                    if start >= n:  # the same tokens as the first: its logits (contiguous: copy its prompt KV)
                        src = manager.get_block_table(first[0])[: -(-n // bs)]
                        prompt_copies += [(a, b) for a, b in zip(src, table) if a != b]
                        first[1].append(seq)
                        continue
                    ids += seq.token_ids[start:n]  # only the tokens whose KV is not in the cache yet
                    positions += range(start, n)
                    slots += _slots(table, bs, start, n)
                    seq_lens.append(n - start)
                    ctx.append(n)
                    tables.append(table[: -(-n // bs)] if start else [])
                    row = (group, [seq])
                    rows.append(row)
                    if first is None:
                        first = (seq, row[1])
            else:
                for seq in running:
                    table = manager.get_block_table(seq)
                    n = seq.num_tokens
                    ids.append(seq.token_ids[-1])
                    positions.append(n - 1)
                    slots += _slots(table, bs, n - 1, n)
                    tables.append(table[: -(-n // bs)])
                    ctx.append(n)
                    rows.append((group, [seq]))
        logits = self.runner.execute(ids, positions, slots, is_prefill=out.is_prefill, seq_lens=seq_lens,
                                    block_tables=tables, context_lens=ctx)
        if prompt_copies:
            cache.copy_blocks(prompt_copies)
        now = self.now
        # Group rows: beam search needs all of a group's candidates at once.
        by_group: dict[int, list[tuple[list[Sequence], torch.Tensor, int]]] = {}
        greedy = logits.argmax(dim=-1).tolist()  # every row's greedy token, one call for the batch
        for i, (group, seqs) in enumerate(rows):
            by_group.setdefault(id(group), []).append((seqs, logits[i], greedy[i]))
        num_generated = 0
        for group in out.scheduled_seq_groups:
            entries = by_group[id(group)]
            if group.first_token_time is None:
                group.first_token_time = now
            if group.sampling_params.use_beam_search:
                seqs = [s for seqs, _, _ in entries for s in seqs]
                self._process_beam(scheduler, group, seqs, torch.stack([row for _, row, _ in entries]))
                num_generated += len(seqs)
            else:
                for seqs, row, token in entries:
                    self._process_sampling(scheduler, group, seqs, row, token)
                    num_generated += len(seqs)
        end = time.perf_counter()
        stats = self.stats
        stats.generated_tokens += num_generated
        stats.steps.append(StepStats(out.is_prefill, sum(len(seqs) for _, seqs in rows), len(ids), *memory,
                                     len(out.blocks_to_copy), end - self._mark))
        self._mark = end
        return True

    def _process_sampling(self, scheduler: Scheduler, group, seqs, row: torch.Tensor, greedy_token: int) -> None:
        """Sample each sequence's next token from its logits ``row`` ``[vocab_size]`` (greedy: ``greedy_token``)."""
        params = group.sampling_params
        gen = group.generator
        if gen is None:
            gen = group.generator = make_generator(params.seed, row.device)
        if params.temperature == 0:  # the step's batched argmax (what sample() would return, one row at a time)
            tokens = [greedy_token] * len(seqs)
        else:
            tokens = sample(row.expand(len(seqs), -1), params, gen)
        stop = params.stop_ids(self.eos_token_ids)
        for seq, token in zip(seqs, tokens):
            seq.append_token(token)
            if token in stop:
                _finish(scheduler, seq, "stop")
            elif seq.num_generated >= params.max_tokens:
                _finish(scheduler, seq, "length")

    def _process_beam(self, scheduler: Scheduler, group, seqs, logits: torch.Tensor) -> None:
        """One beam-search step of ``group`` over its candidates' logits ``[num_live, vocab_size]``:
        survivors fork from their parents (sharing every block), dropped candidates free theirs (§4.4)."""
        params = group.sampling_params
        state = group.beam
        if state is None:
            state = group.beam = BeamSearchState(params.beam_width, params.length_penalty, params.early_stopping,
                                                 params.max_tokens, params.stop_ids(self.eos_token_ids))
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        result = beam_search_step(state, logprobs, [s.output_token_ids for s in seqs])
        history = {"step": seqs[0].num_generated, "seq_ids": [s.seq_id for s in seqs]}
        if result.done:
            for seq in seqs:
                scheduler.finish_seq(seq)
            history.update(parents=[], children=[], blocks_in_use=0, blocks_without_sharing=0)
            group.beam_history.append(history)
            return
        # Fork every extra child from its parent's state before any parent appends its token (§4.4).
        targets, reused = [], set()
        for p in result.parents:
            parent = seqs[p]
            if p not in reused:
                reused.add(p)
                targets.append(parent)
            else:
                child = Sequence(self.new_seq_id(), parent.prompt_len, parent.num_generated, list(parent.token_ids),
                                 parent_seq_id=parent.seq_id)
                scheduler.fork_seq(group, parent, child)
                targets.append(child)
        for p, seq in enumerate(seqs):  # dropped candidates free their blocks
            if p not in reused:
                scheduler.finish_seq(seq)
                group.seqs.remove(seq)
        for seq, token in zip(targets, result.tokens):
            seq.append_token(token)
        group.seqs.sort(key=lambda s: targets.index(s) if s in targets else len(targets))
        in_use, unshared = self.kv_manager.blocks_held(targets)
        history.update(parents=[seqs[p].seq_id for p in result.parents], children=[s.seq_id for s in targets],
                       blocks_in_use=in_use, blocks_without_sharing=unshared)
        group.beam_history.append(history)
