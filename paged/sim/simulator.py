"""Simulated serving: the real scheduler and KV cache managers, with time from a model (§6).

Memory behaviour is never modelled: every block or reservation comes from the real
:class:`paged.core.scheduler.Scheduler` and KV cache manager. Only the duration of each iteration is
modelled, by an ``iteration_time(outputs) -> seconds`` callable (a GPU cost model, or a constant when
only memory matters).

The loop is the one the real engine runs (:class:`paged.core.serving_loop.ServingLoop`), with the
simulated executor (:class:`paged.sim.executor.SimulatedExecutor`): per iteration, admit the requests
that have arrived, ask the scheduler for a prefill or decode iteration, record where KV memory is
(while requests wait), advance the clock by the iteration's time, give every scheduled sequence one new
token, and retire finished requests. An hour of traffic at the paper's rates runs through the fast path
(:mod:`paged.sim.fast`: the same decisions, the same numbers, batched), when the manager is a fast one.

Sequence groups (§4.4, :func:`groups_from_trace`): a request may run ``n`` parallel samples (they share
the prompt's blocks; the shared, partly filled last block is copied on write, one copy per writer but
the last), or a beam search of width ``k`` that replays a search the real engine recorded
(:mod:`paged.sim.beam_replay`); requests with a shared prefix (``prefix_len``) share its blocks.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from operator import attrgetter
from collections.abc import Callable, Sequence as Seq
from dataclasses import dataclass

from paged.block.manager import PagedKVCacheManager
from paged.core.kv_cache_manager import KVCacheManager
from paged.core.max_model_len import check_request_len
from paged.core.scheduler import Scheduler, SchedulerOutputs
from paged.core.sequence import Sequence, SequenceGroup
from paged.core.serving_loop import ServingLoop, ServingResult
from paged.sim import fast
from paged.sim.beam_replay import BeamTrace, beam_trace
from paged.sim.cost_model import CostModel
from paged.sim.executor import SimulatedExecutor
from paged.sim.iteration_cost import IterationCostModel

__all__ = ["simulate", "make_kv_manager", "groups_from_trace", "gc_paused", "SimSequenceGroup", "SHARED_PREFIX_MODES"]

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


def make_kv_manager(system: str, num_blocks: int, block_size: int, **kwargs):
    """The KV cache manager :func:`simulate` serves fastest with the same results: that of
    :func:`paged.systems.make_kv_manager` (same arguments, same errors), its fast-path subclass while
    :mod:`paged.sim.fast`'s switch is on. Capacity in blocks."""
    return fast.make_kv_manager(system, num_blocks, block_size, **kwargs)


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
    n: int = 1,
    beam_width: int = 1,
    shared_prefix: str = "reserved",
    record_sharing: bool = False,
    on_finish: Callable[[list[SequenceGroup]], None] | None = None,
    max_seq_len: int | None = None,
) -> ServingResult:
    """Serve ``trace`` with the real scheduler over ``kv_manager``; time from ``iteration_time``.

    A manager built by the fast path (:func:`paged.sim.fast.make_kv_manager`, what
    :meth:`paged.sim.config.ServingConfig.kv_manager` builds while the switch is on) with a time model
    (:class:`~paged.sim.iteration_cost.IterationCostModel`) is served by the fast loops
    (:func:`paged.sim.fast.serving_loop`); any other by the reference loop, one iteration at a time.
    The results are the same.

    Args:
        trace: requests with ``prompt_len``, ``output_len`` (tokens) and ``arrival_time``
            (seconds), e.g. a :class:`paged.workloads.Trace`.
        kv_manager: a fresh paged or contiguous KV cache manager.
        iteration_time: seconds one iteration takes, given what the scheduler scheduled.
        max_num_seqs, max_num_batched_tokens, preemption_mode: passed to the
            :class:`~paged.core.scheduler.Scheduler`.
        record_memory: record the KV memory breakdown at each iteration while requests wait.
        n, beam_width, shared_prefix: the requests' sequence groups (:func:`groups_from_trace`):
            parallel samples, beam search replaying recorded searches, how a shared prefix is shared.
        record_sharing: record the KV blocks held with and without sharing at every iteration
            (``result.sharing``, Fig. 15).
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
        ValueError: on an empty prompt or output, bad group settings (:func:`groups_from_trace`), or a
            cost model whose paged kernel has another block size than the manager.
        InvalidTimeError: if the time model gives a negative, NaN or infinite time.
    """
    if isinstance(iteration_time, CostModel) and iteration_time.paged_kernel and \
            isinstance(kv_manager, PagedKVCacheManager) and iteration_time.block_size != kv_manager.block_size:
        raise ValueError(f"the cost model prices blocks of {iteration_time.block_size} tokens but the KV cache "
                         f"manager's blocks hold {kv_manager.block_size}")
    on_fast_path = fast.is_fast(kv_manager)
    scheduler = (fast.FastScheduler if on_fast_path else Scheduler)(
        kv_manager, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        preemption_mode=preemption_mode)
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
        first_fork_id = sum(len(g.seqs) for g in groups)
        recording = dict(record_memory=record_memory, record_sharing=record_sharing, on_finish=on_finish)
        if on_fast_path:
            executor = fast.FastSimulatedExecutor(iteration_time, first_fork_id=first_fork_id)
        else:
            executor = SimulatedExecutor(iteration_time, first_fork_id=first_fork_id)
        if on_fast_path and isinstance(iteration_time, IterationCostModel):
            loop = fast.serving_loop(scheduler, executor, groups, **recording)
        else:
            loop = ServingLoop(scheduler, executor, groups, **recording)
        result = loop.run()
    result.kv_copy_tokens, result.kv_copy_seconds = executor.copied_tokens, executor.copy_seconds
    result.cow_blocks, result.cow_seconds = executor.cow_blocks, executor.cow_seconds
    return result
