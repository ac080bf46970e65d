"""The serving loop with fast-forward (simulator speed, §6).

:class:`FastServingLoop` is :class:`paged.core.serving_loop.ServingLoop` whose decode iterations go
through :func:`paged.sim.fast.fast_forward.decode_run`: a decode iteration in which nothing else happens
starts a run of identical ones, applied at once, with the reference loop's results.
"""

from __future__ import annotations

from paged.core.scheduler import SchedulerOutputs
from paged.core.serving_loop import ServingLoop
from paged.sim.fast.fast_forward import decode_run

__all__ = ["FastServingLoop"]


class FastServingLoop(ServingLoop):
    """:class:`~paged.core.serving_loop.ServingLoop` with fast-forward (module docstring): the same
    arguments, the same results. The executor's ``iteration_time`` must be an
    :class:`~paged.sim.iteration_cost.IterationCostModel` (its ``decode_time`` is linear in the context)."""

    __slots__ = ()

    def run_iteration(self, outputs: SchedulerOutputs, next_arrival_time: float) -> tuple[int, bool]:
        """A decode iteration and the run of identical ones after it (:func:`decode_run`), unless sharing
        is recorded (every iteration is then read) or the iteration is not eligible; else
        :meth:`ServingLoop.run_iteration`."""
        if not outputs.is_prefill and not self.record_sharing:
            scheduler, executor = self.scheduler, self.executor
            memory = self.result.memory if self.record_memory and scheduler.waiting else None
            end = decode_run(scheduler, outputs, executor.iteration_time, executor.now, next_arrival_time, memory,
                             executor.num_iterations + 1)
            if end is not None:
                executor.now, k = end
                executor.num_iterations += k
                return k, True
        return super().run_iteration(outputs, next_arrival_time)
