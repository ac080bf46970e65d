"""Iteration-level FCFS scheduler with preemption (paper §4.5, following vLLM v0).

Every iteration the scheduler decides which sequence groups run:

1. If nothing is swapped out, admit waiting groups in arrival order while the KV cache manager
   can place their prompts and the batch budgets allow; if any were admitted, this iteration
   is a **prefill** of just those groups.
2. Otherwise it is a **decode** of every running group. A group that cannot get a slot for its
   next token makes the scheduler preempt the *latest-arriving* running group (possibly itself)
   until it can: by **recomputation** (free its blocks; it is prefilled again later with prompt
   plus generated tokens) or by **swapping** its blocks to CPU memory. Whole groups are
   preempted and resumed together. While any group is swapped out no new group is admitted,
   and swapped groups come back (FCFS) as soon as they fit.

The scheduler only talks to a :class:`paged.core.kv_cache_manager.KVCacheManager`, so the same code drives
the paged manager and the contiguous Orca baselines.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

from paged.core.kv_cache_manager import AllocStatus, KVCacheManager, RequestTooLargeError
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus

__all__ = ["Scheduler", "SchedulerOutputs", "PREEMPTION_MODES"]

PREEMPTION_MODES = ("recompute", "swap")


@dataclass(slots=True)
class SchedulerOutputs:
    """What one iteration runs.

    Attributes:
        scheduled_seq_groups: groups whose running sequences run this iteration.
        is_prefill: True for a prefill iteration, False for a decode iteration.
        num_batched_tokens: tokens whose KV this iteration computes (tokens).
        blocks_to_swap_in: ``(cpu_block, gpu_block)`` copies before the iteration.
        blocks_to_swap_out: ``(gpu_block, cpu_block)`` copies before the iteration.
        blocks_to_copy: copy-on-write ``(src_block, dst_block)`` copies before the iteration.
        preempted: groups preempted this iteration (recomputation or swap).
    """

    scheduled_seq_groups: list[SequenceGroup]
    is_prefill: bool
    num_batched_tokens: int = 0
    blocks_to_swap_in: list[tuple[int, int]] = field(default_factory=list)
    blocks_to_swap_out: list[tuple[int, int]] = field(default_factory=list)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)
    preempted: list[SequenceGroup] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        """True if nothing runs this iteration."""
        return not self.scheduled_seq_groups


class Scheduler:
    """FCFS iteration-level scheduler over one KV cache manager (§4.5).

    Args:
        kv_manager: a paged or contiguous KV cache manager.
        max_num_seqs: most sequences running at once (vLLM's default 256).
        max_num_batched_tokens: most prompt tokens in one prefill iteration (tokens; vLLM's
            default 2048 for 2048-token models).
        preemption_mode: ``"recompute"`` or ``"swap"``. With ``"swap"``, a group the CPU swap
            space cannot hold is recomputed instead.

    Raises:
        ValueError: on an unknown preemption mode or non-positive budgets.
    """

    def __init__(
        self,
        kv_manager: KVCacheManager,
        *,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 2048,
        preemption_mode: str = "recompute",
    ) -> None:
        if preemption_mode not in PREEMPTION_MODES:
            raise ValueError(f"preemption_mode must be one of {PREEMPTION_MODES}, got {preemption_mode!r}")
        if max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be ≥ 1")
        self.kv_manager = kv_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.preemption_mode = preemption_mode
        self.waiting: deque[SequenceGroup] = deque()
        self.running: list[SequenceGroup] = []  # sorted by arrival time
        self.swapped: deque[SequenceGroup] = deque()
        self.num_preemptions = 0

    # -- queue management -------------------------------------------------------------
    def add_seq_group(self, seq_group: SequenceGroup) -> None:
        """Queue a new request (FCFS by the order of calls).

        Raises:
            ValueError: if a sequence has an empty prompt or the output length is < 1.
            RequestTooLargeError: if the request could never fit in the KV cache or in one
                prefill iteration.
        """
        if seq_group.prompt_len < 1:
            raise ValueError(f"request {seq_group.request_id!r} has an empty prompt")
        if seq_group.output_len < 1:
            raise ValueError(f"request {seq_group.request_id!r} asks for {seq_group.output_len} output tokens")
        if self.kv_manager.can_allocate(seq_group) is AllocStatus.NEVER:
            raise RequestTooLargeError(
                f"request {seq_group.request_id!r} (prompt {seq_group.prompt_len} + output {seq_group.output_len} "
                f"tokens) could never run: {self.kv_manager.never_reason(seq_group)}"
            )
        if seq_group.prompt_len > self.max_num_batched_tokens:
            raise RequestTooLargeError(
                f"request {seq_group.request_id!r} has a {seq_group.prompt_len}-token prompt, more than "
                f"max_num_batched_tokens={self.max_num_batched_tokens}"
            )
        self.waiting.append(seq_group)

    def has_unfinished_seqs(self) -> bool:
        """True while any group waits, runs or is swapped out."""
        return bool(self.waiting or self.running or self.swapped)

    def num_running_seqs(self) -> int:
        """Running sequences across all running groups."""
        return sum(g.num_seqs(SequenceStatus.RUNNING) for g in self.running)

    # -- one iteration ----------------------------------------------------------------
    def schedule(self) -> SchedulerOutputs:
        """Decide the next iteration (module docstring)."""
        if not self.swapped:
            outputs = self._schedule_prefills()
            if outputs.scheduled_seq_groups:
                return outputs
        return self._schedule_decodes()

    def _schedule_prefills(self) -> SchedulerOutputs:
        scheduled: list[SequenceGroup] = []
        if not self.waiting:  # nothing to admit (skips counting the running sequences)
            return SchedulerOutputs(scheduled, is_prefill=True)
        num_tokens = 0
        num_seqs = self.num_running_seqs()
        while self.waiting:
            group = self.waiting[0]
            waiting_seqs = group.get_seqs(SequenceStatus.WAITING)
            group_tokens = sum(seq.num_tokens for seq in waiting_seqs)
            if num_tokens + group_tokens > self.max_num_batched_tokens and scheduled:
                break
            if num_seqs + len(waiting_seqs) > self.max_num_seqs:
                break
            if self.kv_manager.can_allocate(group) is not AllocStatus.OK:
                break  # FCFS: nobody overtakes the head of the queue
            self.waiting.popleft()
            self.kv_manager.allocate(group)
            for seq in waiting_seqs:
                seq.status = SequenceStatus.RUNNING
            self._add_running(group)
            scheduled.append(group)
            num_tokens += group_tokens
            num_seqs += len(waiting_seqs)
        return SchedulerOutputs(scheduled, is_prefill=True, num_batched_tokens=num_tokens)

    def _schedule_decodes(self) -> SchedulerOutputs:
        outputs = SchedulerOutputs([], is_prefill=False)
        queue = deque(self.running)  # earliest arrival first
        kept: list[SequenceGroup] = []
        while queue:
            group = queue.popleft()
            while not self.kv_manager.can_append_slots(group):
                victim = queue.pop() if queue else group  # the latest arrival goes first
                self._preempt(victim, outputs)
                if victim is group:
                    break
            else:
                for seq in group.seqs:
                    if seq.status is SequenceStatus.RUNNING:
                        outputs.blocks_to_copy.extend(self.kv_manager.append_slots(seq))
                kept.append(group)
        self.running = kept
        if not outputs.preempted:
            self._schedule_swap_in(outputs)
        outputs.scheduled_seq_groups = list(self.running)
        outputs.num_batched_tokens = self.num_running_seqs()
        return outputs

    def _schedule_swap_in(self, outputs: SchedulerOutputs) -> None:
        num_seqs = self.num_running_seqs()
        while self.swapped:
            group = self.swapped[0]
            n = group.num_seqs(SequenceStatus.SWAPPED)
            if num_seqs + n > self.max_num_seqs or self.kv_manager.can_swap_in(group) is not AllocStatus.OK:
                break
            self.swapped.popleft()
            outputs.blocks_to_swap_in.extend(self.kv_manager.swap_in(group))
            for seq in group.seqs:
                if seq.status is SequenceStatus.SWAPPED:
                    seq.status = SequenceStatus.RUNNING
                    outputs.blocks_to_copy.extend(self.kv_manager.append_slots(seq))
            self._add_running(group)
            num_seqs += n

    def _preempt(self, group: SequenceGroup, outputs: SchedulerOutputs) -> None:
        """Preempt a whole group by swapping (if chosen and possible) or recomputation."""
        group.num_preemptions += 1
        self.num_preemptions += 1
        outputs.preempted.append(group)
        if self.preemption_mode == "swap" and self.kv_manager.can_swap_out(group):
            outputs.blocks_to_swap_out.extend(self.kv_manager.swap_out(group))
            for seq in group.seqs:
                if seq.status is SequenceStatus.RUNNING:
                    seq.status = SequenceStatus.SWAPPED
            self.swapped.append(group)
            return
        for seq in group.seqs:
            if seq.status is SequenceStatus.RUNNING:
                self.kv_manager.free(seq)
                seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(group)  # preempted groups resume before new arrivals

    def _add_running(self, group: SequenceGroup) -> None:
        bisect.insort(self.running, group, key=lambda g: g.arrival_time)

    # -- after an iteration -----------------------------------------------------------
    def fork_seq(self, group: SequenceGroup, parent: Sequence, child: Sequence) -> None:
        """Add ``child`` to the group, sharing ``parent``'s KV blocks (§4.4)."""
        self.kv_manager.fork(parent, child)
        child.status = SequenceStatus.RUNNING
        group.seqs.append(child)

    def finish_seq(self, seq: Sequence) -> None:
        """Mark a sequence finished and release its KV space."""
        seq.status = SequenceStatus.FINISHED
        self.kv_manager.free(seq)

    def free_finished_seq_groups(self) -> list[SequenceGroup]:
        """Drop finished groups from the running list and return them."""
        finished = [g for g in self.running if g.is_finished()]
        if finished:
            self.running = [g for g in self.running if not g.is_finished()]
        return finished
