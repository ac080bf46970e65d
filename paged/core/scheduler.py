"""Iteration-level FCFS scheduler with preemption (paper §4.5, as in vLLM 0.1, the paper's version).

Each iteration is either

1. a **prefill** of the waiting groups admitted in arrival order while nothing is swapped out, the KV cache
   manager can place them and the budgets allow: a group's peak sequences (``n`` samples or the beam width)
   count against ``max_num_seqs``, the tokens its prefill computes (a shared prompt once) against
   ``max_num_batched_tokens``; or, if none is admitted,
2. a **decode** of every running group. While a group cannot get a slot for its next token, the
   *latest-arriving* running group (possibly itself) is preempted, whole: by **recomputation** (its blocks are
   freed; it is prefilled again later, generated tokens included, sharing what it shared) or by **swapping**
   its blocks to CPU memory. Groups of several sequences are swapped in either mode (vLLM 0.1 cannot recompute
   them), a single sequence only in ``"swap"`` mode; a group the swap space cannot hold is recomputed. While
   any group is swapped out none is admitted; swapped groups return FCFS once they fit (the watermark only
   holds back new requests).

A request leaves when it finishes or is aborted (:meth:`Scheduler.abort_seq_group`). The scheduler uses only
the :class:`~paged.core.kv_cache_manager.KVCacheManager` interface, so it drives paged and Orca managers alike.
"""

from __future__ import annotations

import bisect
import math
import numbers
from collections import deque
from dataclasses import dataclass, field

from paged.core.checks import as_int, as_positive_int
from paged.core.kv_cache_manager import AllocStatus, KVCacheManager, RequestTooLargeError
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus

__all__ = ["Scheduler", "SchedulerOutputs", "PREEMPTION_MODES"]

PREEMPTION_MODES = ("recompute", "swap")


@dataclass(slots=True)
class SchedulerOutputs:
    """What one iteration runs; the block pairs are copied before it runs."""

    scheduled_seq_groups: list[SequenceGroup]  #: groups whose running sequences run
    is_prefill: bool  #: a prefill iteration, else a decode
    _num_batched_tokens: int | None = field(default=None, repr=False)
    blocks_to_swap_in: list[tuple[int, int]] = field(default_factory=list)  #: ``(cpu_block, gpu_block)``
    blocks_to_swap_out: list[tuple[int, int]] = field(default_factory=list)  #: ``(gpu_block, cpu_block)``
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)  #: copy-on-write ``(src, dst)``
    preempted: list[SequenceGroup] = field(default_factory=list)  #: by recomputation or swap
    #: prefill only: ``(sequence, start)`` per placed sequence, in batch order; the prefill computes tokens
    #: ``start .. num_tokens - 1``, the rest are cached (``start == num_tokens``: it takes its group's first
    #: logits; :meth:`~paged.core.kv_cache_manager.KVCacheManager.allocate`)
    prefill_seqs: list[tuple[Sequence, int]] = field(default_factory=list)

    @property
    def num_batched_tokens(self) -> int:
        """Tokens whose KV the iteration computes: the scheduler's count for a prefill, else counted when read
        (O(sequences)), so read it before the iteration runs. Settable after construction to an int ≥ 0 (else
        ValueError), or None to count; the constructor does not take it."""
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
        """Tokens each computed sequence of this prefill computes, per :attr:`prefill_seqs` (if empty: all tokens of
        every running sequence of the scheduled groups). O(sequences)."""
        if self.prefill_seqs:
            return [seq.num_tokens - start for seq, start in self.prefill_seqs if start < seq.num_tokens]
        running = SequenceStatus.RUNNING
        return [s.num_tokens for g in self.scheduled_seq_groups for s in g.seqs if s.status is running]


class Scheduler:
    """FCFS iteration-level scheduler over one KV cache manager (§4.5; module docstring). Raises ValueError on
    an unknown ``preemption_mode`` or a budget < 1.

    Args:
        kv_manager: a paged or contiguous KV cache manager.
        max_num_seqs: most sequences running at once (vLLM's default 256).
        max_num_batched_tokens: most prompt tokens in one prefill iteration (tokens; vLLM's default 2048).
        preemption_mode: ``"recompute"`` (vLLM 0.1's default; groups of several are swapped) or ``"swap"``.
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
        self.kv_manager = kv_manager
        self.max_num_seqs = as_positive_int(max_num_seqs, "max_num_seqs")
        self.max_num_batched_tokens = as_positive_int(max_num_batched_tokens, "max_num_batched_tokens")
        self.preemption_mode = preemption_mode
        self.waiting: deque[SequenceGroup] = deque()
        self.running: list[SequenceGroup] = []  # sorted by arrival time
        self.swapped: deque[SequenceGroup] = deque()
        self.num_preemptions = 0
        self._groups: dict = {}  # request id -> (group, its sequence ids), while waiting, running or swapped
        self._seq_ids: set[int] = set()  # the sequence ids of those groups

    def add_seq_group(self, seq_group: SequenceGroup) -> None:
        """Queue a new request (FCFS by call order). Raises ValueError for no sequences or one not waiting, an empty
        prompt, an output length < 1, or a request or sequence id already held (or repeated); TypeError for a
        length that is not an integer; RequestTooLargeError if the request could never
        fit in the KV cache or one prefill, or runs more than ``max_num_seqs`` sequences at once. Also ValueError for
        sequences of one request with different prompt lengths, token ids that do not match a sequence's length, or
        an arrival time that is not a finite number."""
        if seq_group.request_id in self._groups:
            raise ValueError(f"request id {seq_group.request_id!r} is already waiting, running or swapped out")
        if not seq_group.seqs or any(seq.status is not SequenceStatus.WAITING for seq in seq_group.seqs):
            raise ValueError(f"request {seq_group.request_id!r} must bring one or more new (waiting) sequences")
        as_int(seq_group.prompt_len, f"request {seq_group.request_id!r}'s prompt length")
        as_int(seq_group.output_len, f"request {seq_group.request_id!r}'s output length")
        self._check_prompt(seq_group)
        seq_ids = [seq.seq_id for seq in seq_group.seqs]
        if len(set(seq_ids)) != len(seq_ids) or not self._seq_ids.isdisjoint(seq_ids):
            dup = next(i for i in seq_ids if i in self._seq_ids or seq_ids.count(i) > 1)
            raise ValueError(f"request {seq_group.request_id!r}: sequence id {dup!r} is already in use "
                             f"(by this request or another the scheduler holds)")
        if seq_group.prompt_len < 1:
            raise ValueError(f"request {seq_group.request_id!r} has a prompt of {seq_group.prompt_len} tokens: "
                             "at least one is needed")
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

    @staticmethod
    def _check_prompt(seq_group: SequenceGroup) -> None:
        """Refuse a group whose sequences do not share one prompt, whose token ids do not match its lengths, or that
        arrives at a time that is not a finite number (it would sort and time nothing)."""
        name, prompt_len = f"request {seq_group.request_id!r}", seq_group.prompt_len
        for seq in seq_group.seqs:
            if seq.prompt_len != prompt_len:
                raise ValueError(f"{name}: its sequences have prompts of {prompt_len} and {seq.prompt_len} tokens; "
                                 f"a group's sequences share one prompt")
            if seq.token_ids is not None and len(seq.token_ids) != seq.num_tokens:
                raise ValueError(f"{name}: sequence {seq.seq_id!r} has {len(seq.token_ids)} token ids for "
                                 f"{seq.num_tokens} tokens (prompt_len {seq.prompt_len} + {seq.num_generated} generated)")
        arrival = seq_group.arrival_time
        if isinstance(arrival, bool) or not isinstance(arrival, numbers.Real) or not math.isfinite(arrival):
            raise ValueError(f"{name} has arrival time {arrival!r}: a finite number of seconds is needed")

    def _forget(self, seq_group: SequenceGroup) -> None:
        """The group has left (finished or aborted): free its ids."""
        entry = self._groups.get(seq_group.request_id)
        if entry is not None and entry[0] is seq_group:
            del self._groups[seq_group.request_id]
            self._seq_ids.difference_update(entry[1])

    def abort_seq_group(self, request_id) -> SequenceGroup | None:
        """Abort a waiting, running or swapped-out request: its sequences give back their KV space (a shared block
        when its last holder leaves) and end with ``finish_reason="abort"``. Returns the group, or None (a no-op,
        as in vLLM) for an id not held. O(sequences + queued requests)."""
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
        """Abort every request held (:meth:`abort_seq_group`), e.g. after an interrupted iteration; returns them
        in arrival order. O(sequences)."""
        # From the id table: an interrupt can fall between a group's leaving one queue and joining another.
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
        """Sequences the running groups will run at once (their ``peak_num_seqs``), for ``max_num_seqs``. O(groups)."""
        return sum(max(len(group.seqs), group.max_num_seqs) for group in self.running)

    def schedule(self) -> SchedulerOutputs:
        """Decide the next iteration: a prefill if any waiting group is admitted, else a decode (module docstring)."""
        if not self.swapped:
            outputs = self.schedule_prefills()
            if outputs.scheduled_seq_groups:
                return outputs
        return self.schedule_decodes()

    def schedule_prefills(self) -> SchedulerOutputs:
        """Step 1 of :meth:`schedule`: admit waiting groups into a prefill, none while a group is swapped out.
        O(admitted + running groups)."""
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
            # FCFS: the first group that does not fit ends admission (nobody overtakes the head).
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
        """Step 2 of :meth:`schedule`: decode every running group, earliest first, preempting the latest while one
        lacks a slot; if none was preempted, swap groups back in. O(sequences)."""
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
        """After a decode that preempted nothing: swap groups back in, FCFS, while they fit (no watermark) and
        ``max_num_seqs`` allows; swaps and copies go to ``outputs``. O(swapped + running groups)."""
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
        """Preempt a whole running group, recorded in ``outputs`` (§4.5): swapped out (in ``"swap"`` mode, or if it
        runs several sequences) when the CPU space holds it, else freed for recomputation and put at the head of
        the waiting queue. The caller removes it from :attr:`running`. O(the group's blocks)."""
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

    def fork_seq(self, group: SequenceGroup, parent: Sequence, child: Sequence) -> None:
        """Add ``child`` to the group, sharing ``parent``'s KV blocks (§4.4). O(parent's blocks). Raises ValueError
        if ``child``'s id is in use by a request held."""
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
