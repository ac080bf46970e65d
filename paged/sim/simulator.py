"""Simulated serving: the real scheduler and KV cache managers, with time from a model.

Memory behaviour is never modelled: every block or reservation comes from the real
:class:`paged.core.scheduler.Scheduler` and KV cache manager. Only the duration of each iteration is
modelled, by an ``iteration_time(outputs) -> seconds`` callable (a GPU cost model, or a constant
when only memory matters).

The loop is the one the real engine runs (:class:`paged.core.serving_loop.ServingLoop`), with the
simulated executor (:class:`paged.sim.executor.SimulatedExecutor`): per iteration, admit the requests
that have arrived, ask the scheduler for a prefill or decode iteration, record where KV memory is
(while requests wait), advance the clock by the iteration's time, give every scheduled sequence one
new token, and retire finished requests.

Fast-forward (:mod:`paged.sim.fast_forward`): when the time model has a ``decode_time(num_seqs,
context_tokens)`` method (a :class:`paged.sim.cost_model.CostModel`), a decode iteration in which
nothing else happens starts a *run*: the next ``k - 1`` iterations are the same decode batch
with no arrival, no finish before the last one, no preemption, no swap and enough free blocks
for every block-boundary crossing. The run is applied at once: each sequence gains ``k`` tokens
(its blocks allocated in one call), the clock advances by the same per-iteration times added in
the same order, and the memory sums are added in closed form, so the result is exactly the
step-by-step loop's (``tests/sim/test_simulator.py`` checks it).

Decode calendar (:mod:`paged.sim.decode_calendar`): when the memory breakdown is not recorded and no request
replays a beam search, the loop is a :class:`~paged.sim.decode_calendar.CalendarServingLoop`: token counts follow a
global decode counter, and a decode step touches only the requests that cross a block boundary or finish
in it, so a step costs O(changes), not O(running sequences) (at paged's knee, where a request arrives
every iteration or two, the fast-forward's runs are one iteration long). It serves single sequences,
parallel samples (after the first decode, which copies the prompt's shared last block on write, the
samples advance in lock-step; on the paged manager their blocks are held in the manager and written into
their tables only when something reads them) and requests sharing a prefix (reserved, or found by prefix
caching). Beam searches have their own calendar (:mod:`paged.sim.beam_calendar`): each group's memory per
step, which depends only on the recorded search, the step and the prompt's offset in its last block
(:mod:`paged.sim.beam_blocks`), is added to a timeline when it joins the batch, so a decode iteration
reads one column whatever the number of groups. Both keep the real scheduler deciding every admission
and preemption and the real manager holding the right number of blocks whenever anything reads it; the
same steps, the same numbers (``tests/sim/test_decode_calendar.py``, ``tests/sim/test_beam_calendar.py``),
only physical block ids and forked sequences' ids differ. Both record the KV blocks held with and without
sharing (``record_sharing``, Fig. 15) as the step-by-step loop reads them at every iteration: the blocks in use
from the manager's exact free pool plus what a run's iterations take, the blocks without sharing from the
token counts (every sequence's table holds ``ceil(tokens / block_size)`` blocks, candidates and samples
alike), a run of decode iterations summed in closed form. The step-by-step :class:`ServingLoop` is the
reference (the tests refuse both calendars to run it).

Sequence groups (§4.4, :func:`groups_from_trace`): a request may run ``n`` parallel samples (they
share the prompt's blocks; the shared, partly filled last block is copied on write, one copy per
writer but the last), or a beam search of width ``k`` that replays a search the real engine recorded
(:mod:`paged.sim.beam_replay`: candidates fork from their parents, dropped candidates free their
blocks), and requests with a shared prefix (``prefix_len``) share its blocks.

Measured (``make bench-sim``, paper-length runs of notebook 02, against the step-by-step loop with its
fast-forward; load 0.7–1.0): beam search of width 6 on paged 8.5× faster (11.8 s → 1.4 s), on Orca
(Oracle) 6.7×, 6 parallel samples 3.5×, Fig. 16's shared 5-shot prefix 1.3× (admission-bound: its requests
are short); Fig. 14's sustained-rate searches at the full hour 5.2×. Recording sharing (Fig. 15, against
the step-by-step loop without fast-forward, Alpaca at 4 req/s, the full hour; load 0.8–1.0): beam search of
width 6 11.0× (10.2 s → 0.92 s), 6 parallel samples 4.5×; notebook 02's ``memory_saving`` (its 12 runs, 2
workers) 32.7 s → 4.6 s. docs/benchmarks.md has the spreads.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from operator import attrgetter
from collections.abc import Callable, Sequence as Seq
from dataclasses import dataclass

from paged.core.kv_cache_manager import KVCacheManager
from paged.core.max_model_len import check_request_len
from paged.core.scheduler import Scheduler, SchedulerOutputs
from paged.core.sequence import Sequence, SequenceGroup
from paged.core.serving_loop import ServingLoop, ServingResult
from paged.sim.beam_replay import BeamTrace, beam_trace
from paged.sim.beam_calendar import BeamCalendarServingLoop
from paged.sim.beam_calendar import applies as beam_applies
from paged.sim.decode_calendar import CalendarServingLoop, applies
from paged.sim.executor import SimulatedExecutor

__all__ = ["simulate", "groups_from_trace", "gc_paused", "SimSequenceGroup", "SHARED_PREFIX_MODES"]

#: How requests carrying a shared prefix (``prefix_len``) share it: ``"reserved"``, the provider-reserved
#: prefix of §4.4 (its blocks computed in advance and shared); ``"tokens"``, found by automatic prefix
#: caching (each prompt gets token ids, the prefix's the same for every request; needs a manager with
#: ``enable_prefix_caching``); ``"none"``, every request holds and computes its whole prompt.
SHARED_PREFIX_MODES = ("reserved", "tokens", "none")


@dataclass(slots=True, eq=False)
class SimSequenceGroup(SequenceGroup):
    """A simulated request: a :class:`~paged.core.SequenceGroup` plus, for beam search, the recorded
    search it replays (:mod:`paged.sim.beam_replay`); ``beam`` is None otherwise."""

    beam: BeamTrace | None = None


@contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector inside the block (restored after, also on an error).

    A simulated run allocates a few objects per request and per iteration (an hour of Alpaca at
    45 req/s: 163,000 groups) and makes no reference cycles, so the generational collections that
    the allocations trigger find nothing; they took two thirds of building the groups and would
    dominate the loop. Reference counting still frees everything.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def groups_from_trace(trace: Seq, *, n: int = 1, beam_width: int = 1,
                      shared_prefix: str = "reserved") -> list[SequenceGroup]:
    """One sequence group per request of a trace, in arrival order (§4.4, §4.5).

    Args:
        trace: requests with ``prompt_len``, ``output_len`` (tokens), ``arrival_time`` (seconds) and,
            optionally, ``prefix_len`` (tokens of a prefix shared by every request that has one).
        n: parallel samples per request: ``n`` sequences sharing the prompt, each generating the
            request's output length.
        beam_width: > 1: beam search of that width, replaying a recorded search (request ``i`` replays
            trace ``i`` of the width); exclusive with ``n > 1``.
        shared_prefix: one of :data:`SHARED_PREFIX_MODES`.

    Raises:
        ValueError: ``n`` or ``beam_width`` < 1, both above 1, an unknown ``shared_prefix``, or a width
            with no recorded trace.
    """
    if n < 1 or beam_width < 1 or (n > 1 and beam_width > 1):
        raise ValueError(f"need n ≥ 1 and beam_width ≥ 1, not both above 1; got n={n}, beam_width={beam_width}")
    if shared_prefix not in SHARED_PREFIX_MODES:
        raise ValueError(f"shared_prefix must be one of {SHARED_PREFIX_MODES}, got {shared_prefix!r}")
    width = n if beam_width == 1 else 1
    beam = beam_width > 1
    max_num_seqs = beam_width if beam else 0
    tokens = shared_prefix == "tokens"
    reserved = shared_prefix == "reserved"
    groups = []
    append = groups.append
    # Built once per simulated run (163,000 requests for an hour of Alpaca at 45 req/s): invariants are
    # hoisted and the constructors take positional arguments.
    for i, req in enumerate(trace):
        prompt_len = int(req.prompt_len)
        prefix_len = getattr(req, "prefix_len", 0)
        prefix_len = min(int(prefix_len), prompt_len) if prefix_len else 0
        token_ids = None
        if tokens:  # the prefix's tokens are the same for everyone, the rest are this request's
            token_ids = list(range(prefix_len)) + [-(i + 1)] * (prompt_len - prefix_len)
        if width == 1:
            seqs = [Sequence(i, prompt_len, 0, token_ids)]
        else:
            seqs = [Sequence(i * width + k, prompt_len, 0, token_ids) for k in range(width)]
        append(SimSequenceGroup(getattr(req, "request_id", i), float(req.arrival_time), seqs, int(req.output_len),
                                None, None, None, None, 0, max_num_seqs, prefix_len if reserved else 0, 0, False,
                                beam_trace(beam_width, i) if beam else None))
    groups.sort(key=attrgetter("arrival_time"))
    return groups


def simulate(
    trace: Seq,
    kv_manager: KVCacheManager,
    iteration_time: Callable[[SchedulerOutputs], float],
    *,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 2048,
    preemption_mode: str = "recompute",
    record_memory: bool = True,
    fast_forward: bool = True,
    n: int = 1,
    beam_width: int = 1,
    shared_prefix: str = "reserved",
    record_sharing: bool = False,
    on_finish: Callable[[list[SequenceGroup]], None] | None = None,
    max_seq_len: int | None = None,
) -> ServingResult:
    """Serve ``trace`` with the real scheduler over ``kv_manager``; time from ``iteration_time``.

    Args:
        trace: requests with ``prompt_len``, ``output_len`` (tokens) and ``arrival_time``
            (seconds), e.g. a :class:`paged.workloads.Trace`.
        kv_manager: a fresh paged or contiguous KV cache manager.
        iteration_time: seconds one iteration takes, given what the scheduler scheduled.
        max_num_seqs, max_num_batched_tokens, preemption_mode: passed to the
            :class:`~paged.core.scheduler.Scheduler`.
        record_memory: record the KV memory breakdown at each iteration while requests wait.
        fast_forward: apply runs of unchanging decode iterations at once, and serve with the decode or
            beam calendar where one applies (module docstring); used only when ``iteration_time`` has a
            ``decode_time`` method. Same results.
        n, beam_width, shared_prefix: the requests' sequence groups (:func:`groups_from_trace`):
            parallel samples, beam search replaying recorded searches, how a shared prefix is shared.
        record_sharing: record the KV blocks held with and without sharing at every iteration
            (``result.sharing``, Fig. 15): by the calendars where they apply, otherwise by the step-by-step
            loop, which then steps one iteration at a time (no fast-forward). Same results either way.
        on_finish: called with the groups that finished after each iteration (their
            ``finished_time`` is the clock); an exception it raises stops the run and propagates.
        max_seq_len: the server's longest sequence (tokens): a request whose prompt plus output
            exceeds it is refused before anything runs, with the message every system gives
            (:func:`paged.core.max_model_len.check_request_len`); None: no limit but the cache's.

    Returns:
        A :class:`~paged.core.serving_loop.ServingResult`; every request finishes exactly once, each of its
        sequences with exactly its output length.

    Raises:
        RequestTooLargeError: if a request could never fit in the KV cache or in ``max_seq_len``, or
            runs more sequences than ``max_num_seqs``.
        ValueError: on an empty prompt or output, or bad group settings (:func:`groups_from_trace`).
    """
    scheduler = Scheduler(
        kv_manager,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        preemption_mode=preemption_mode,
    )
    with gc_paused():  # building the groups and the loop make no reference cycles
        groups = groups_from_trace(trace, n=n, beam_width=beam_width, shared_prefix=shared_prefix)
        for group in groups:  # reject impossible requests before any work is done
            if group.prompt_len < 1 or group.output_len < 1:
                raise ValueError(
                    f"request {group.request_id!r}: prompt_len={group.prompt_len}, "
                    f"output_len={group.output_len}; both must be ≥ 1"
                )
            if max_seq_len is not None:
                check_request_len(group.request_id, group.prompt_len, group.output_len, max_seq_len)
        executor = SimulatedExecutor(iteration_time, fast_forward=fast_forward,
                                     first_fork_id=sum(len(g.seqs) for g in groups))
        recording = dict(record_memory=record_memory, record_sharing=record_sharing)
        if applies(groups, kv_manager, executor, **recording):
            loop_class = CalendarServingLoop
        elif beam_applies(groups, kv_manager, executor, **recording):
            loop_class = BeamCalendarServingLoop
        else:
            loop_class = ServingLoop
        loop = loop_class(scheduler, executor, groups, record_memory=record_memory, record_sharing=record_sharing,
                          on_finish=on_finish)
        result = loop.run()
    result.kv_copy_tokens, result.kv_copy_seconds = executor.copied_tokens, executor.copy_seconds
    result.cow_blocks, result.cow_seconds = executor.cow_blocks, executor.cow_seconds
    return result
