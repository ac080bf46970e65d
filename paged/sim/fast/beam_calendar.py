"""The serving loop for replayed beam searches, their memory read from per-step profiles (simulator speed, §4.4).

A replayed beam group (:mod:`paged.sim.beam_replay`) changes its KV memory at every decode step: its
candidates copy shared blocks on write and cross into new ones, dropped candidates free blocks, forks
share them (paged) or copy the parent's KV into another reservation (Orca). What a step does depends
only on the recorded search, the step, the block size and where the prompt ends in its last block
(:mod:`paged.sim.fast.beam_blocks`), so :class:`BeamCalendarServingLoop` serves the same iterations
without touching the groups:

* a global decode counter ``G`` and running sums of the batch, as in :mod:`paged.sim.fast.decode_calendar`;
* each group's profile is added, when it joins the batch, to a timeline over ``G`` of the blocks the
  decodes take, the copy-on-write copies among them (priced by ``block_copy_time``) and the blocks its
  beam steps free (paged), or the KV tokens its forks copy (contiguous, priced by ``kv_copy_time``); a
  decode reads one column, O(1) however many groups run;
* on the paged manager a joining group's tables are put aside (its first candidate keeps the prompt's
  blocks) and the blocks past them are held (``hold_blocks``), changing by each step's net count.

Every decision stays the real scheduler's: admission runs through it at every step, and a decode that
must preempt (or anything swapped out) first writes out every group's tables as the reference would
have them (:class:`~paged.sim.fast.beam_blocks.BeamBlockTree`, ``replace_tables``) and runs a step of
the fast loop; the groups then rejoin from their current step. Iterations add the same times in the same
order, several at once only while no admission can change. With ``record_sharing`` each iteration's
blocks with and without sharing (Fig. 15) follow from the tracked free pool and the token counts.

Used by :func:`paged.sim.fast.serving_loop` where :func:`applies`: every group replays a beam search, no
memory breakdown recorded, no prefix cache. Results equal the reference's
(``tests/sim/fast/test_beam_calendar.py``); only block ids and forked candidates' ids differ.
"""

from __future__ import annotations

import numpy as np

from paged.core.kv_cache_manager import AllocStatus
from paged.core.sequence import SequenceGroup, SequenceStatus
from paged.core.serving_loop import ServingLoop
from paged.sim.fast.beam_blocks import BeamBlockTree, fork_counts, paged_profile
from paged.sim.fast.decode_calendar import CalendarServingLoop

__all__ = ["BeamCalendarServingLoop", "applies"]


def applies(groups, kv_manager, *, record_memory: bool) -> bool:
    """Whether :class:`BeamCalendarServingLoop` can serve ``groups`` (module docstring): every group replays
    a beam search, no memory breakdown is recorded, and a paged manager has no prefix cache. O(groups)."""
    if record_memory or not groups or (kv_manager.decode_allocates and kv_manager.enable_prefix_caching):
        return False
    return all(getattr(g, "beam", None) is not None and len(g.seqs) == 1 for g in groups)


class BeamCalendarServingLoop(CalendarServingLoop):
    """:class:`~paged.core.serving_loop.ServingLoop` for replayed beam groups whose decode iterations read
    the groups' memory from a timeline (module docstring); the same arguments, the same results. Needs an
    executor with ``decode_time`` (:class:`paged.sim.executor.SimulatedExecutor` over a cost model) and
    groups for which :func:`applies`."""

    __slots__ = ("_paged", "_timeline", "_final", "_on_calendar", "_num_seqs")

    def __init__(self, scheduler, executor, groups, **kwargs) -> None:
        super().__init__(scheduler, executor, groups, **kwargs)
        self._paged = self._allocates
        # paged: rows blocks taken, copies, blocks freed; contiguous: KV tokens copied by forks
        self._timeline = np.zeros((3 if self._paged else 1, 4096), dtype=np.int64)
        self._final: dict[SequenceGroup, int] = {}  # paged: the blocks past its prompt a group frees at its end
        self._on_calendar = True  # False: the tables are written out and ServingLoop.step runs
        self._num_seqs = 0  # running candidates

    # -- the calendar ------------------------------------------------------------------
    def _join(self, group: SequenceGroup) -> None:
        """Put a running group (its candidates up to date, its tables the manager's) on the calendar: on the
        paged manager, its first candidate keeps a table of the prompt's blocks and the blocks past them are
        held (:meth:`_put_aside`); its decodes' memory goes on the timeline."""
        seqs = group.seqs
        width = len(seqs)
        seq = seqs[0]
        generated = seq.num_generated
        g = self._g
        length = group.output_len
        off = g - generated
        self._offset[group] = off
        self._finish_at.setdefault(off + length, []).append(group)
        self._num_seqs += width
        self._context += width * (seq.prompt_len + generated)
        end = off + length  # decodes generated .. length - 1 run at G = g .. end - 1
        if end > self._timeline.shape[1]:
            grown = np.zeros((self._timeline.shape[0], 2 * end), dtype=np.int64)
            grown[:, :self._timeline.shape[1]] = self._timeline
            self._timeline = grown
        beam = group.beam
        if self._paged:
            bs = self._block_size
            self._blocks += width * -(-(seq.prompt_len + generated - 1) // bs)  # every candidate's table alike
            self._put_aside(group)
            profile = paged_profile(beam, seq.prompt_len, bs, length)
            self._timeline[:, g:end] += profile.counts[:, generated:length]
            self._timeline[2, end - 1] -= profile.counts[2, length - 1]  # the last decode ends the group instead
            self._final[group] = profile.held[length - 2] + int(profile.counts[0, length - 1]) - \
                (seq.prompt_len % bs > 0)
        elif end - 1 > g:
            forks = fork_counts(beam, length - 1)[generated:length - 1]  # beam steps generated .. length - 2
            self._timeline[0, g:end - 1] += forks * np.arange(seq.prompt_len + generated, seq.prompt_len + length - 1)

    def _put_aside(self, group: SequenceGroup) -> None:
        """The paged manager's tables of a group joining the calendar, put aside: the first candidate keeps
        the prompt's blocks (its partly filled last one too), the others none, and the blocks past them are
        held (:meth:`~paged.block.PagedKVCacheManager.replace_tables`). O(blocks)."""
        manager = self.scheduler.kv_manager
        seqs = group.seqs
        prompt_len = seqs[0].prompt_len
        base, keep = prompt_len // self._block_size, -(-prompt_len // self._block_size)
        tables = [manager.get_block_table(seq) for seq in seqs]
        first = tables[0]
        kept = set(first[:keep])
        rest = list(dict.fromkeys(b for table in tables for b in table[base:] if b not in kept))
        if rest or len(first) > keep:
            manager.replace_tables([(seqs[0], first[:keep], prompt_len)], take=rest)
            self._held += rest
        manager.free_and_fork(seqs[1:], ())

    def _sync(self) -> None:
        """Every running group's candidates up to date and, on the paged manager, their tables written out
        (:meth:`_write_beam_tables`); the calendar is emptied and the run continues in :meth:`ServingLoop.step`
        until nothing is swapped out (:meth:`_rebuild`)."""
        g = self._g
        manager = self.scheduler.kv_manager
        for group, off in self._offset.items():
            for seq in group.seqs:
                seq.num_generated = g - off
            if self._paged:
                self._write_beam_tables(group, g - off, manager)
        if self._held:
            raise RuntimeError(f"{len(self._held)} blocks held past the groups' tables")  # a bookkeeping error
        self._offset.clear()
        self._finish_at.clear()
        self._final.clear()
        self._timeline[:, g:] = 0
        self._num_seqs = self._context = self._blocks = 0
        self._on_calendar = False
        self._refused = False

    def _write_beam_tables(self, group: SequenceGroup, generated: int, manager) -> None:
        """Give the candidates of ``group`` (``generated`` tokens each, the last not yet in the cache) the
        block tables the step-by-step loop would have (up to block ids): the prompt's full blocks, then the
        blocks of the replayed tree (:class:`~paged.sim.beam_blocks.BeamBlockTree`), laid out on the first
        candidate's block past them and the blocks held for the group. O(steps × width)."""
        seqs = group.seqs
        prompt_len = seqs[0].prompt_len
        bs = self._block_size
        tree = BeamBlockTree(group.beam, prompt_len, bs)
        for _ in range(generated - 1):
            tree.decode()
            tree.beam_step()
        paths, live = tree.tables()
        own = manager.get_block_table(seqs[0])  # the prompt's blocks
        base = prompt_len // bs
        count = len(live) - len(own) + base
        held = self._held[len(self._held) - count:] if count else []
        del self._held[len(self._held) - count:]
        where = dict(zip(live, own[base:] + held))  # the blocks past the prompt's full ones are interchangeable
        prompt = own[:base]
        manager.replace_tables([(seq, prompt + [where[node] for node in path], prompt_len + generated - 1)
                                for seq, path in zip(seqs, paths)], held=held)

    def _rebuild(self) -> None:
        """Back on the calendar after :meth:`ServingLoop.step` once nothing is swapped out: every running
        group joins it again (:meth:`_join`)."""
        if self.scheduler.swapped:
            return
        self._on_calendar = True
        for group in self.scheduler.running:
            self._join(group)

    def abandon(self) -> list[SequenceGroup]:
        """:meth:`ServingLoop.abandon` after giving the manager back the blocks held past the groups'
        tables (the aborted groups then free everything they hold)."""
        if self._held:
            self.scheduler.kv_manager.release_blocks(self._held)
            self._held.clear()
        g = self._g
        for group, off in self._offset.items():
            for seq in group.seqs:
                seq.num_generated = g - off
        self._offset.clear()
        self._on_calendar = False
        return ServingLoop.abandon(self)

    def abort_request(self, request_id) -> bool:
        """:meth:`ServingLoop.abort_request` on written-out tables (the calendar is rebuilt after)."""
        if self._on_calendar:
            self._sync()
        try:
            return ServingLoop.abort_request(self, request_id)
        finally:
            self._rebuild()

    # -- one step ----------------------------------------------------------------------
    def step(self) -> list[SequenceGroup]:
        """One step (module docstring): a prefill, decode iterations by the timeline, or, when nothing runs,
        the scheduler must preempt or something is swapped out, :meth:`ServingLoop.step` on written-out
        tables (the calendar is rebuilt after it). Whatever escapes it aborts every request of the loop
        first (:meth:`abandon`)."""
        scheduler = self.scheduler
        if self._on_calendar:
            try:
                now = self.executor.now
                self._admit_arrivals()
                if scheduler.waiting and not scheduler.swapped and not self._refused:
                    outputs = scheduler.schedule_prefills()
                    if outputs.scheduled_seq_groups:
                        return self._prefill(outputs, now)
                    # Refused for a reason a decode cannot change (drops free paged blocks: not memory there).
                    self._refused = not self._paged or \
                        scheduler.kv_manager.can_allocate(scheduler.waiting[0]) is AllocStatus.OK
                if scheduler.running and not scheduler.swapped:
                    nxt, groups = self._next, self.groups
                    finished = self._beam_decode(now, groups[nxt].arrival_time if nxt < len(groups) else float("inf"))
                    if finished is not None:
                        return finished
                    self._sync()  # the scheduler preempts: one step on written-out tables
            except BaseException:
                self.abandon()
                raise
        finished = ServingLoop.step(self)
        if not self._on_calendar:
            try:
                self._rebuild()
            except BaseException:
                self.abandon()
                raise
        return finished

    def _beam_decode(self, now: float, next_arrival: float) -> list[SequenceGroup] | None:
        """Decode iterations of every running group, each as :meth:`ServingLoop.step` runs it with the
        simulated executor: the first, then the following ones while no request arrives or finishes, every
        iteration's appends find their blocks free and no admission can change (a contiguous manager's
        memory does not change in a decode; on the paged one, drops free blocks, so the head of the queue
        must be refused for another reason than memory, or nothing waits). The blocks held for the groups
        change once, by the step's net count; with ``record_sharing``, each iteration's sharing counts are
        summed (module docstring). None, changing nothing, if the first iteration's appends need more blocks
        than are free (the scheduler would preempt)."""
        scheduler, executor, result = self.scheduler, self.executor, self.result
        manager = scheduler.kv_manager
        finish_at, timeline = self._finish_at, self._timeline
        cost = executor.iteration_time
        g = self._g
        n, context = self._num_seqs, self._context
        decode_time = self._decode_time_of(n)
        num_groups = len(scheduler.running)
        paged = self._paged
        stable = not scheduler.waiting or self._refused  # no admission can change before a finish or an arrival
        free = manager.get_num_free_gpu_blocks() if paged else 0
        net = 0  # blocks held for the groups: taken minus freed (paged)
        grown = 0  # blocks the appends add to the tables (paged; a copy replaces a shared entry: none)
        recording = self.record_sharing
        if recording:  # Fig. 15's counts of each iteration, as ServingLoop.step reads them after its appends
            in_use = without = 0
            if paged:
                base, blocks = manager.blocks_in_use() + free, self._blocks
            else:  # a contiguous manager's reservations: a decode changes none
                counts = manager.sharing_counts()
        t = now
        k = 0
        while True:
            start = t
            if paged:
                taken, copies, freed = timeline[:, g].tolist()
                if taken > free:
                    if not k:
                        return None
                    break  # the next step's scheduler preempts
                grown += taken - copies
                if recording:
                    in_use += base - free + taken
                    without += blocks + grown
                free += freed - taken
                net += taken - freed
                if copies:
                    seconds = cost.block_copy_time(copies)
                    t = start + (seconds + decode_time(context))
                    executor.cow_blocks += copies
                    executor.cow_seconds += seconds
                else:
                    t = start + decode_time(context)
            else:
                t = start + decode_time(context)
                tokens = int(timeline[0, g])
                if tokens:
                    seconds = cost.kv_copy_time(tokens)
                    executor.copied_tokens += tokens
                    executor.copy_seconds += seconds
                    t += seconds
            g += 1
            k += 1
            context += n
            busy = t - start
            result.busy_seconds += busy
            result.batched_requests_seconds += busy * num_groups
            if g in finish_at or next_arrival <= t or not stable:
                break
        self._check_clock(now, t)
        executor.now = t
        self._g = g
        result.num_iterations += k
        result.batched_requests_sum += k * num_groups
        if recording:
            if paged:
                result.sharing.add_sums(in_use, without, k)
            else:
                result.sharing.add_sums(k * counts[0], k * counts[1], k)
        self._blocks += grown
        ending = finish_at.pop(g, None)
        if ending is not None:
            self._refused = False
            finished_status = SequenceStatus.FINISHED
            final = self._final
            bs = self._block_size
            for group in ending:
                seqs = group.seqs
                del self._offset[group]
                for seq in seqs:
                    seq.num_generated = group.output_len
                    seq.status = finished_status
                manager.free_and_fork(seqs, ())
                if paged:
                    net -= final.pop(group)
                    self._blocks -= len(seqs) * -(-(seqs[0].prompt_len + group.output_len - 1) // bs)
                self._num_seqs -= len(seqs)
                context -= len(seqs) * seqs[0].num_tokens
        held = self._held
        if net > 0:
            held += manager.hold_blocks(net)
        elif net < 0:
            manager.release_blocks(held[net:])
            del held[net:]
        self._context = context
        return self._retire(scheduler.free_finished_seq_groups(ending)) if ending is not None else []
