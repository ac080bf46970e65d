"""One engine iteration: schedule, move blocks, run the model, sample, fork / free (paper §4.4, §4.5).

:func:`run_step` is the body of :meth:`paged.engine.LLM.generate`'s loop, kept apart so the loop reads
in one screen. :class:`EngineStats` collects what every iteration did (batch size, KV slots in use,
blocks with and without sharing), which the throughput and sharing measurements read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from paged.block.manager import PagedKVCacheManager
from paged.engine.beam_search import BeamSearchState, beam_search_step
from paged.engine.sampling import make_generator, sample
from paged.core.scheduler import Scheduler
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus

__all__ = ["EngineStats", "StepStats", "run_step"]


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


def _memory(llm, scheduler: Scheduler) -> tuple[int, int, int]:
    """(used slots, blocks in use, blocks the running sequences would hold without sharing)."""
    manager = llm.kv_manager
    running = [s for g in scheduler.running for s in g.seqs if s.status is SequenceStatus.RUNNING]
    return (manager.num_used_slots, *manager.blocks_held(running))


def _slots(table: list[int], block_size: int, start: int, end: int) -> list[int]:
    return [table[p // block_size] * block_size + p % block_size for p in range(start, end)]


def _finish(scheduler: Scheduler, seq: Sequence, reason: str) -> None:
    seq.finish_reason = reason
    scheduler.finish_seq(seq)


def _process_sampling(llm, scheduler, group, seqs, row: torch.Tensor, greedy_token: int) -> None:
    """Sample each sequence's next token from its logits ``row`` ``[vocab_size]`` (greedy: ``greedy_token``)."""
    params = group.sampling_params
    gen = group.generator
    if gen is None:
        gen = group.generator = make_generator(params.seed, row.device)
    if params.temperature == 0:  # the step's batched argmax (what sample() would return, one row at a time)
        tokens = [greedy_token] * len(seqs)
    else:
        tokens = sample(row.expand(len(seqs), -1), params, gen)
    stop = llm.stop_token_ids(params)
    for seq, token in zip(seqs, tokens):
        seq.append_token(token)
        if token in stop:
            _finish(scheduler, seq, "stop")
        elif seq.num_generated >= params.max_tokens:
            _finish(scheduler, seq, "length")


def _process_beam(llm, scheduler, group, seqs, logits) -> None:
    params = group.sampling_params
    state = group.beam
    if state is None:
        state = group.beam = BeamSearchState(params.beam_width, params.length_penalty, params.early_stopping,
                                             params.max_tokens, llm.stop_token_ids(params))
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
            child = Sequence(llm.new_seq_id(), parent.prompt_len, parent.num_generated, list(parent.token_ids),
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
    in_use, unshared = llm.kv_manager.blocks_held(targets)
    history.update(parents=[seqs[p].seq_id for p in result.parents], children=[s.seq_id for s in targets],
                   blocks_in_use=in_use, blocks_without_sharing=unshared)
    group.beam_history.append(history)


def run_step(llm, scheduler: Scheduler, stats: EngineStats) -> list[SequenceGroup]:
    """Run one iteration; return the groups that finished in it.

    Raises:
        RuntimeError: if the scheduler can run nothing although requests remain (a deadlock).
    """
    t0 = time.perf_counter()
    out = scheduler.schedule()
    if out.is_empty:
        raise RuntimeError("the scheduler could run no request although some remain (KV cache too small?)")
    memory = _memory(llm, scheduler)
    cache = llm.kv_cache
    manager = llm.kv_manager
    if out.blocks_to_swap_out:
        cache.swap_out(out.blocks_to_swap_out)
    if out.blocks_to_swap_in:
        cache.swap_in(out.blocks_to_swap_in)
    if out.blocks_to_copy:
        cache.copy_blocks(out.blocks_to_copy)
    bs = llm.block_size
    ids, positions, slots, seq_lens, tables, ctx = [], [], [], [], [], []
    rows: list[tuple[SequenceGroup, list[Sequence]]] = []  # per group: the sequences each logits row serves
    prompt_copies: list[tuple[int, int]] = []
    for group in out.scheduled_seq_groups:
        running = group.get_seqs(SequenceStatus.RUNNING)
        if group.first_scheduled_time is None:
            group.first_scheduled_time = t0
        if out.is_prefill:
            shared = len(running) > 1 and all(s.num_generated == 0 for s in running)
            computed = running[:1] if shared else running
            for seq in computed:
                table = manager.get_block_table(seq)
                n = seq.num_tokens
                ids += seq.token_ids
                positions += range(n)
                slots += _slots(table, bs, 0, n)
                seq_lens.append(n)
            if shared:  # contiguous reservations cannot share the prompt: copy its blocks (paged: no-op)
                src = manager.get_block_table(running[0])[: -(-running[0].num_tokens // bs)]
                for seq in running[1:]:
                    prompt_copies += [(a, b) for a, b in zip(src, manager.get_block_table(seq)) if a != b]
                rows.append((group, running))
            else:
                rows += [(group, [seq]) for seq in running]
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
    logits = llm.runner.execute(ids, positions, slots, is_prefill=out.is_prefill, seq_lens=seq_lens,
                                block_tables=tables, context_lens=ctx)
    if prompt_copies:
        cache.copy_blocks(prompt_copies)
    now = time.perf_counter()
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
            _process_beam(llm, scheduler, group, seqs, torch.stack([row for _, row, _ in entries]))
            num_generated += len(seqs)
        else:
            for seqs, row, token in entries:
                _process_sampling(llm, scheduler, group, seqs, row, token)
                num_generated += len(seqs)
    finished = scheduler.free_finished_seq_groups()
    end = time.perf_counter()
    for group in finished:
        group.finished_time = end
    stats.generated_tokens += num_generated
    stats.steps.append(StepStats(out.is_prefill, sum(len(seqs) for _, seqs in rows), len(ids), *memory,
                                 len(out.blocks_to_copy), end - t0))
    return finished
