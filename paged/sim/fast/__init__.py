"""The simulator's fast path: the same results as the paper's mechanisms, sooner (§6's hour-long runs).

The reference path — the scheduler and KV cache managers of :mod:`paged.core`, :mod:`paged.block` and
:mod:`paged.contiguous`, served one iteration at a time by :class:`paged.core.serving_loop.ServingLoop`
— is what a reader learns §4 from. An hour of simulated traffic at the paper's rates is millions of
decode iterations, so the simulator runs the same decisions through the devices here:

* :mod:`~paged.sim.fast.manager`: KV cache managers and a scheduler with batched operations (a whole
  decode step's appends in one call, a beam step's frees and forks in one call, a run of decode steps'
  block limit and memory sums in closed form);
* :mod:`~paged.sim.fast.fast_forward` and :mod:`~paged.sim.fast.loop`: a run of identical decode
  iterations applied at once;
* :mod:`~paged.sim.fast.decode_calendar`: decode steps that touch only the requests crossing a block
  boundary or finishing; :mod:`~paged.sim.fast.beam_calendar` with :mod:`~paged.sim.fast.beam_blocks`:
  replayed beam searches read from per-step memory profiles.

One switch turns all of it on or off: :func:`enabled` (on by default; the environment variable
``PAGED_SIM_FAST=0`` or :func:`disabled` turns it off). It decides which manager
:func:`make_kv_manager` builds, and :func:`paged.sim.simulator.simulate` takes the fast loops exactly
when it is given a fast manager. Every result is identical either way (the differential tests in
``tests/sim/fast/`` and the notebooks' figures with the switch off); only physical block ids and the
ids of forked beam candidates may differ. :mod:`paged.block` and :mod:`paged.core` never import this
package: deleting it (and the switch) changes no result.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

from paged.sim.fast.beam_calendar import BeamCalendarServingLoop
from paged.sim.fast.beam_calendar import applies as beam_calendar_applies
from paged.sim.fast.decode_calendar import CalendarServingLoop
from paged.sim.fast.decode_calendar import applies as decode_calendar_applies
from paged.sim.fast.executor import FastSimulatedExecutor
from paged.sim.fast.loop import FastServingLoop
from paged.sim.fast.manager import FastContiguousKVCacheManager, FastPagedKVCacheManager, FastScheduler
from paged.systems import make_kv_manager as reference_make_kv_manager

__all__ = ["enabled", "disabled", "make_kv_manager", "is_fast", "serving_loop", "FastPagedKVCacheManager",
           "FastContiguousKVCacheManager", "FastScheduler", "FastSimulatedExecutor"]

#: The switch (module docstring); read once from ``PAGED_SIM_FAST`` ("0": off).
_ENABLED = os.environ.get("PAGED_SIM_FAST", "1").strip() != "0"


def enabled() -> bool:
    """True if the simulator builds fast managers (module docstring)."""
    return _ENABLED


@contextmanager
def disabled():
    """Inside the block, :func:`make_kv_manager` builds the reference managers (the switch off); the
    previous setting is restored after, also on an error."""
    global _ENABLED
    before, _ENABLED = _ENABLED, False
    try:
        yield
    finally:
        _ENABLED = before


def is_fast(kv_manager) -> bool:
    """True for a manager built by the fast path (the fast loops apply to it)."""
    return isinstance(kv_manager, (FastPagedKVCacheManager, FastContiguousKVCacheManager))


def make_kv_manager(system: str, num_blocks: int, block_size: int, **kwargs):
    """:func:`paged.systems.make_kv_manager` with the same arguments, building the fast subclass of the
    manager when the switch is on. Raises as that function does."""
    classes = (FastPagedKVCacheManager, FastContiguousKVCacheManager) if _ENABLED else None
    return reference_make_kv_manager(system, num_blocks, block_size, classes=classes, **kwargs)


def serving_loop(scheduler, executor, groups, *, record_memory: bool, record_sharing: bool, on_finish=None):
    """The fastest loop that serves ``groups`` with the reference loop's results: the decode calendar or
    the beam calendar where one applies, else :class:`~paged.sim.fast.loop.FastServingLoop`. Needs the
    fast scheduler, manager and executor, and a time model
    (:class:`~paged.sim.iteration_cost.IterationCostModel`)."""
    kwargs = dict(record_memory=record_memory, record_sharing=record_sharing, on_finish=on_finish)
    if decode_calendar_applies(groups, record_memory=record_memory):
        return CalendarServingLoop(scheduler, executor, groups, **kwargs)
    if beam_calendar_applies(groups, scheduler.kv_manager, record_memory=record_memory):
        return BeamCalendarServingLoop(scheduler, executor, groups, **kwargs)
    return FastServingLoop(scheduler, executor, groups, **kwargs)
