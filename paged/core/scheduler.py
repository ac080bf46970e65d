"""Iteration-level FCFS scheduler with preemption (paper §4.5, following vLLM v0).

Every iteration the scheduler decides which sequence groups run:

1. If nothing is swapped out, admit waiting groups in arrival order while the KV cache manager
   can place their prompts and the batch budgets allow; if any were admitted, this iteration
   is a **prefill** of just those groups. The budgets count what a group will run: its peak number
   of sequences (``n`` samples, or the beam width) against ``max_num_seqs``, and the tokens its
   prefill computes (a prompt its sequences share, once) against ``max_num_batched_tokens``.
2. Otherwise it is a **decode** of every running group. A group that cannot get a slot for its
   next token makes the scheduler preempt the *latest-arriving* running group (possibly itself)
   until it can: by **recomputation** (free its blocks; it is prefilled again later with prompt
   plus generated tokens) or by **swapping** its blocks to CPU memory. Whole groups are
   preempted and resumed together; as in vLLM 0.1, a group of several sequences (parallel samples,
   beam candidates) is swapped in either mode, a single sequence only in ``"swap"`` mode (a group the
   CPU swap space cannot hold, or on a manager without one, is recomputed). While any group is swapped out no new group is admitted,
   and swapped groups come back (FCFS) as soon as they fit. A group preempted by recomputation
   is prefilled again sharing what it shared before (its prompt once, forked again), and a
   swapped-out group comes back as soon as its blocks (each shared block once) and the blocks its
   next tokens need fit in the free memory; the watermark only holds back new requests.

A request leaves the scheduler when it finishes or is aborted (:meth:`Scheduler.abort_seq_group`,
vLLM's name): an aborted request's sequences give back every block they hold, a shared block only
when its last holder leaves, and end with ``finish_reason="abort"``. Request and sequence ids are
unique among the requests the scheduler holds; a duplicate is refused when it is added.

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
        num_batched_tokens: tokens whose KV this iteration computes (tokens); a property: what the
            scheduler counted for a prefill, else counted from the groups when read (one per running
            sequence of a decode; :meth:`prefill_token_counts` of a prefill built by hand), so read
            it before the iteration executes (sequences that finish in it stop counting). O(sequences)
            when counted, so the decode step does not pay for it unless something reads it. Set it
            (an int ≥ 0, or None to count) after construction; the constructor does not take it.
        blocks_to_swap_in: ``(cpu_block, gpu_block)`` copies before the iteration.
        blocks_to_swap_out: ``(gpu_block, cpu_block)`` copies before the iteration.
        blocks_to_copy: copy-on-write ``(src_block, dst_block)`` copies before the iteration.
        preempted: groups preempted this iteration (recomputation or swap).
        prefill_seqs: prefill only: ``(sequence, start)`` for every sequence the prefill places, in
            batch order: the prefill computes its tokens ``start .. num_tokens - 1`` (the earlier ones
            are already in the cache: a prefix-cache hit, a reserved prefix, or blocks an earlier
            sequence of its group computes); ``start == num_tokens`` means it takes the logits of its
            group's first sequence (a parallel sample of a new request), see
            :meth:`paged.core.kv_cache_manager.KVCacheManager.allocate`.
    """

    scheduled_seq_groups: list[SequenceGroup]
    is_prefill: bool
    _num_batched_tokens: int | None = field(default=None, repr=False)
    blocks_to_swap_in: list[tuple[int, int]] = field(default_factory=list)
    blocks_to_swap_out: list[tuple[int, int]] = field(default_factory=list)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)
    preempted: list[SequenceGroup] = field(default_factory=list)
    prefill_seqs: list[tuple[Sequence, int]] = field(default_factory=list)

    @property
    def num_batched_tokens(self) -> int:
        """Tokens whose KV this iteration computes (tokens; class docstring)."""
        if self._num_batched_tokens is not None:
            return self._num_batched_tokens
        if self.is_prefill:
            return sum(self.prefill_token_counts())
        running = SequenceStatus.RUNNING
        return sum(s.status is running for g in self.scheduled_seq_groups for s in g.seqs)

    @num_batched_tokens.setter
    def num_batched_tokens(self, value: int | None) -> None:
        if value is not None and (type(value) is not int or value < 0):
            raise ValueError(f"num_batched_tokens must be an int ≥ 0 (or None: count), got {value!r}")
        self._num_batched_tokens = value

    @property
    def is_empty(self) -> bool:
        """True if nothing runs this iteration."""
        return not self.scheduled_seq_groups

    def prefill_token_counts(self) -> list[int]:
        """Tokens each computed sequence of this prefill computes (tokens), from :attr:`prefill_seqs`:
        a prompt shared by a group's samples counts once, cached tokens not at all. Outputs built by
        hand without ``prefill_seqs``: every running sequence of the scheduled groups computes all of
        its tokens. O(sequences)."""
        if self.prefill_seqs:
            return [seq.num_tokens - start for seq, start in self.prefill_seqs if start < seq.num_tokens]
        running = SequenceStatus.RUNNING
        return [s.num_tokens for g in self.scheduled_seq_groups for s in g.seqs if s.status is running]


class Scheduler:
    """FCFS iteration-level scheduler over one KV cache manager (§4.5).

    Args:
        kv_manager: a paged or contiguous KV cache manager.
        max_num_seqs: most sequences running at once (vLLM's default 256).
        max_num_batched_tokens: most prompt tokens in one prefill iteration (tokens; vLLM's
            default 2048 for 2048-token models).
        preemption_mode: ``"recompute"`` (vLLM 0.1's default: single sequences recomputed, groups of
            several swapped) or ``"swap"`` (every group swapped). A group the CPU swap space cannot hold
            is recomputed instead.

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
        # request id -> (its group, its sequence ids when added), while waiting, running or swapped out
        self._groups: dict = {}
        self._seq_ids: set[int] = set()  # the sequence ids of those groups

    # -- queue management -------------------------------------------------------------
    def add_seq_group(self, seq_group: SequenceGroup) -> None:
        """Queue a new request (FCFS by the order of calls).

        Raises:
            ValueError: if a sequence has an empty prompt or the output length is < 1, or the request id
                or a sequence id is already held by a request of this scheduler (or repeats in the group).
            RequestTooLargeError: if the request could never fit in the KV cache or in one
                prefill iteration, or runs more sequences at once than ``max_num_seqs``.
        """
        if seq_group.request_id in self._groups:
            raise ValueError(f"request id {seq_group.request_id!r} is already waiting, running or swapped out")
        seq_ids = [seq.seq_id for seq in seq_group.seqs]
        if len(set(seq_ids)) != len(seq_ids) or not self._seq_ids.isdisjoint(seq_ids):
            dup = next(i for i in seq_ids if i in self._seq_ids or seq_ids.count(i) > 1)
            raise ValueError(f"request {seq_group.request_id!r}: sequence id {dup!r} is already in use "
                             f"(by this request or another the scheduler holds)")
        if seq_group.prompt_len < 1:
            raise ValueError(f"request {seq_group.request_id!r} has an empty prompt")
        if seq_group.output_len < 1:
            raise ValueError(f"request {seq_group.request_id!r} asks for {seq_group.output_len} output tokens")
        if seq_group.peak_num_seqs > self.max_num_seqs:
            raise RequestTooLargeError(
                f"request {seq_group.request_id!r} runs {seq_group.peak_num_seqs} sequences at once (parallel "
                f"samples or beam width), more than max_num_seqs={self.max_num_seqs}"
            )
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
        self._groups[seq_group.request_id] = (seq_group, seq_ids)
        self._seq_ids.update(seq_ids)

    def _forget(self, seq_group: SequenceGroup) -> None:
        """The group has left (finished or aborted): its ids may be used again."""
        entry = self._groups.get(seq_group.request_id)
        if entry is not None and entry[0] is seq_group:
            del self._groups[seq_group.request_id]
            self._seq_ids.difference_update(entry[1])

    def abort_seq_group(self, request_id) -> SequenceGroup | None:
        """Abort one waiting, running or swapped-out request (vLLM's ``abort_seq_group``): its sequences
        give back their KV space (a block shared with another request only when its last holder leaves)
        and end ``FINISHED`` with ``finish_reason="abort"``; the other requests are untouched.

        Returns the aborted group, or None for an id the scheduler does not hold (unknown, finished or
        already aborted): a no-op, as in vLLM. O(sequences + queued requests).
        """
        entry = self._groups.get(request_id)
        if entry is None:
            return None
        group = entry[0]
        for queue in (self.waiting, self.swapped):
            if group in queue:
                queue.remove(group)
        if group in self.running:
            self.running.remove(group)
        self._abort(group)
        return group

    def abort_all(self) -> list[SequenceGroup]:
        """Abort every request the scheduler holds (:meth:`abort_seq_group`), e.g. after an
        interrupted iteration; returns them in arrival order. O(sequences)."""
        # From the id table, not the queues: an interrupt can fall between a group leaving one queue and
        # joining another.
        groups = [group for group, _ in list(self._groups.values())]
        self.running, self.swapped, self.waiting = [], deque(), deque()
        for group in groups:
            self._abort(group)
        return groups

    def _abort(self, group: SequenceGroup) -> None:
        finished = SequenceStatus.FINISHED
        for seq in group.seqs:
            if seq.status is not finished:
                seq.status = finished
                seq.finish_reason = "abort"
            self.kv_manager.free(seq)  # a no-op for a sequence that holds nothing
        group.aborted = True
        self._forget(group)

    def has_unfinished_seqs(self) -> bool:
        """True while any group waits, runs or is swapped out."""
        return bool(self.waiting or self.running or self.swapped)

    def num_reserved_seqs(self) -> int:
        """Sequences the running groups will run at once (each group's ``peak_num_seqs``), which
        ``max_num_seqs`` bounds: a beam group counts its width from its prefill on. O(groups)."""
        return sum(max(len(group.seqs), group.max_num_seqs) for group in self.running)

    # -- one iteration ----------------------------------------------------------------
    def schedule(self) -> SchedulerOutputs:
        """Decide the next iteration (module docstring): a prefill of waiting groups if any is admitted,
        else a decode of the running groups."""
        if not self.swapped:
            outputs = self.schedule_prefills()
            if outputs.scheduled_seq_groups:
                return outputs
        return self.schedule_decodes()

    def schedule_prefills(self) -> SchedulerOutputs:
        """Step 1 of :meth:`schedule`: admit waiting groups in arrival order into a prefill iteration while
        the KV cache manager can place them and the budgets allow (module docstring). Schedules none
        while a group is swapped out. O(admitted groups + running groups)."""
        outputs = SchedulerOutputs([], is_prefill=True)
        if self.swapped or not self.waiting:
            return outputs
        manager = self.kv_manager
        budget = 0  # prefill tokens admitted (a shared prompt once)
        num_tokens = 0  # tokens the prefill computes (cached ones not)
        num_seqs = self.num_reserved_seqs()
        while self.waiting:
            group = self.waiting[0]
            waiting_seqs = group.get_seqs(SequenceStatus.WAITING)
            group_tokens = manager.prefill_tokens(group)
            # FCFS: the first group that does not fit ends the admission (nobody overtakes the head).
            if budget + group_tokens > self.max_num_batched_tokens and outputs.scheduled_seq_groups:
                break
            if manager.can_allocate(group) is not AllocStatus.OK:
                break
            group_seqs = max(group.peak_num_seqs, len(waiting_seqs))
            if num_seqs + group_seqs > self.max_num_seqs:
                break
            starts = manager.allocate(group)
            self.waiting.popleft()  # only once placed: a refused allocate leaves the request queued
            if group.num_preemptions == 0:
                group.num_cached_tokens = starts[0]
            for seq, start in zip(waiting_seqs, starts):
                seq.status = SequenceStatus.RUNNING
                outputs.prefill_seqs.append((seq, start))
                num_tokens += seq.num_tokens - start  # 0 for a sample taking its group's first logits
            self._add_running(group)
            outputs.scheduled_seq_groups.append(group)
            budget += group_tokens
            num_seqs += group_seqs
        outputs.num_batched_tokens = num_tokens
        return outputs

    def schedule_decodes(self) -> SchedulerOutputs:
        """Step 2 of :meth:`schedule`: a decode of every running group. Walking the groups earliest
        arrival first, each gets a slot for its next token; while one cannot, the latest-arriving group
        still running is preempted (the group itself when it is the latest). Then swapped-out groups come
        back if nothing was preempted (module docstring). O(sequences)."""
        outputs = SchedulerOutputs([], is_prefill=False)
        manager = self.kv_manager
        queue = deque(self.running)  # earliest arrival first
        kept: list[SequenceGroup] = []
        while queue:
            group = queue.popleft()
            while not manager.can_append_slots(group):
                if not queue:  # nobody later to preempt: the group itself
                    self.preempt(group, outputs)
                    break
                self.preempt(queue.pop(), outputs)
            else:
                for seq in group.get_seqs(SequenceStatus.RUNNING):
                    outputs.blocks_to_copy.extend(manager.append_slots(seq))
                kept.append(group)
        self.running = kept
        if not outputs.preempted:
            self.schedule_swap_in(outputs)
        outputs.scheduled_seq_groups = list(self.running)
        return outputs

    def schedule_swap_in(self, outputs: SchedulerOutputs) -> None:
        """The end of a decode step that preempted nothing: bring swapped-out groups back, first out first
        in, while they fit (no watermark) and ``max_num_seqs`` allows, their swaps and copies recorded in
        ``outputs``. O(swapped groups + running groups)."""
        if not self.swapped:
            return
        num_seqs = self.num_reserved_seqs()
        while self.swapped:
            group = self.swapped[0]
            n = max(group.peak_num_seqs, group.num_seqs(SequenceStatus.SWAPPED))
            if num_seqs + n > self.max_num_seqs or self.kv_manager.can_swap_in(group) is not AllocStatus.OK:
                break
            self.swapped.popleft()
            outputs.blocks_to_swap_in.extend(self.kv_manager.swap_in(group))
            for seq in group.get_seqs(SequenceStatus.SWAPPED):
                seq.status = SequenceStatus.RUNNING
                outputs.blocks_to_copy.extend(self.kv_manager.append_slots(seq))
            self._add_running(group)
            num_seqs += n

    def preempt(self, group: SequenceGroup, outputs: SchedulerOutputs) -> None:
        """Preempt a whole running group and record it in ``outputs`` (§4.5): swap its blocks out when the
        mode is ``"swap"``, or when the group runs several sequences (vLLM 0.1 swaps those in either mode:
        it cannot recompute a group), if the CPU space holds them; else free them for recomputation (the
        group goes back to the head of the waiting queue). The caller takes it out of :attr:`running`.
        O(the group's blocks)."""
        group.num_preemptions += 1
        self.num_preemptions += 1
        outputs.preempted.append(group)
        swap = self.preemption_mode == "swap" or group.peak_num_seqs > 1
        if swap and self.kv_manager.can_swap_out(group):
            outputs.blocks_to_swap_out.extend(self.kv_manager.swap_out(group))
            for seq in group.get_seqs(SequenceStatus.RUNNING):
                seq.status = SequenceStatus.SWAPPED
            self.swapped.append(group)
            return
        self.kv_manager.free_for_recompute(group)  # remembers what the sequences shared
        for seq in group.get_seqs(SequenceStatus.RUNNING):
            seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(group)  # preempted groups resume before new arrivals

    def _add_running(self, group: SequenceGroup) -> None:
        bisect.insort(self.running, group, key=lambda g: g.arrival_time)

    # -- after an iteration -----------------------------------------------------------
    def fork_seq(self, group: SequenceGroup, parent: Sequence, child: Sequence) -> None:
        """Add ``child`` to the group, sharing ``parent``'s KV blocks (§4.4). O(parent's blocks).

        Raises:
            ValueError: if ``child``'s id is held by a sequence of a request this scheduler holds.
        """
        if child.seq_id in self._seq_ids:
            raise ValueError(f"cannot fork into sequence id {child.seq_id!r}: a request this scheduler holds uses it")
        self.kv_manager.fork(parent, child)
        child.status = SequenceStatus.RUNNING
        group.seqs.append(child)
        self._seq_ids.add(child.seq_id)
        entry = self._groups.get(group.request_id)
        if entry is not None and entry[0] is group:
            entry[1].append(child.seq_id)  # released with the group's other ids when it leaves

    def finish_seq(self, seq: Sequence) -> None:
        """Mark a sequence finished and release its KV space."""
        seq.status = SequenceStatus.FINISHED
        self.kv_manager.free(seq)

    def free_finished_seq_groups(self) -> list[SequenceGroup]:
        """Drop finished groups from the running list and return them, in running order. O(groups)."""
        finished = [group for group in self.running if group.is_finished()]
        if finished:
            self.running = [group for group in self.running if not group.is_finished()]
            for group in finished:
                self._forget(group)
        return finished
