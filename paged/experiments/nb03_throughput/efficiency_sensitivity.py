"""How Fig. 12's capacity ratios move with the cost model's factors (§6.2, sensitivity).

The GPU cost model (:mod:`paged.sim.cost_model`) turns bytes and FLOPs into seconds with two
achieved fractions: of HBM bandwidth (``memory_efficiency``) and of peak Tensor Core FLOP/s
(``compute_efficiency``), measured on A100 GEMMs; their low and high ends are the spread of the
same fit over the profiled models and GPU counts (:data:`~paged.sim.cost_model.EFFICIENCY_RANGES`);
on another GPU the ends keep their ratio to the A100's central value, around that GPU's own measured one.
The same driver varies any other :class:`~paged.sim.cost_model.CostModel` field over its stated
range (``ranges``, e.g. the per-iteration host cost of :data:`~paged.sim.cost_model.ASSUMPTION_RANGES`).
It reruns the saturated-throughput point of every system with one factor at a time at each end (the
others at their central values) and reports paged's peak ÷ each baseline's peak, the threshold-free
capacity ratio, beside the central one. Cheap: one saturated run per (model, trace, system, factor
value), no rate search. Nothing here is fitted to the paper.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from paged.experiments.serving import SATURATED_REQUESTS, simulate_point
from paged.sim.config import ServingConfig
from paged.experiments.notebook.sweep import run_jobs
from paged.sim.cost_model import EFFICIENCY_RANGES
from paged.systems import get_system

__all__ = ["efficiency_sensitivity"]


def _used(cost, factor: str | None, value: float | None) -> float | None:
    """The value ``factor`` takes on ``cost``'s GPU: an efficiency end scaled by the GPU's measured central
    value ÷ the A100's (at most 1); any other factor as given."""
    if factor in EFFICIENCY_RANGES and value is not None:
        return min(1.0, value * getattr(cost, factor) / EFFICIENCY_RANGES[factor][1])
    return value


def _peak(model: str, trace: str, system: str, factor: str | None, value: float | None, saturated_requests: int,
          seed: int, tokenizer: str) -> float:  # a module-level function: the worker processes import it
    cost = ServingConfig(model=model, system=system).cost_model()
    if factor is not None:
        cost = replace(cost, **{factor: _used(cost, factor, value)})
    row = simulate_point(model=cost, trace=trace, system=system, rate=math.inf, num_requests=saturated_requests,
                         seed=seed, record_sharing=False, tokenizer=tokenizer)
    return float(row["throughput_rps"])


def efficiency_sensitivity(models, traces, systems, *, saturated_requests: int = SATURATED_REQUESTS,
                           seed: int = 0, tokenizer: str = "gpt2", workers: int = 2,
                           ranges: dict | None = None) -> pd.DataFrame:
    """Paged's saturated throughput ÷ each baseline's, with each factor at its low, central and high
    value (``ranges``: field -> (low, central, high); default the efficiency factors'
    :data:`~paged.sim.cost_model.EFFICIENCY_RANGES`).

    Args:
        models, traces: Table 1 presets and trace names (lists).
        systems: names from :data:`~paged.experiments.serving.SYSTEMS`; must include ``"paged"``.
        saturated_requests: requests of each saturated run (all arrive at 0 s).

    Returns:
        One row per (model, trace, factor, end, baseline): ``factor`` (a :class:`~paged.sim.cost_model.CostModel`
        field), ``end`` (``low``/``central``/``high``), ``value`` (as given; an efficiency's A100 value),
        ``on this GPU`` (the value the model ran with), ``peak ÷``
        (paged ÷ baseline, saturated throughputs), ``paged peak`` and ``baseline peak`` (req/s).

    Raises:
        ValueError: if ``systems`` lacks ``"paged"``; from :func:`simulate_point` for bad names.
    """
    ranges = EFFICIENCY_RANGES if ranges is None else ranges
    systems = list(systems)
    if "paged" not in systems:
        raise ValueError(f"systems must include 'paged' (the ratios are paged ÷ each baseline), got {systems}")
    ends = ("low", "central", "high")
    keys = []
    for m in models:
        for t in traces:
            for s in systems:
                keys.append((m, t, s, None, None))  # central: both factors at their defaults
                for factor, values in ranges.items():
                    keys += [(m, t, s, factor, values[0]), (m, t, s, factor, values[2])]
    jobs = [dict(model=m, trace=t, system=s, factor=f, value=v, saturated_requests=saturated_requests, seed=seed,
                 tokenizer=tokenizer) for m, t, s, f, v in keys]
    peaks = dict(zip(keys, run_jobs(_peak, jobs, workers=workers, desc=f"peak throughput × {', '.join(ranges)}")))
    rows = []
    for m in models:
        for t in traces:
            for factor, values in ranges.items():
                for end, value in zip(ends, values):
                    def peak(s):
                        return peaks[(m, t, s, None, None) if end == "central" else (m, t, s, factor, value)]
                    used = _used(ServingConfig(model=m, system="paged").cost_model(), factor, value)
                    rows += [{"model": m, "trace": t, "factor": factor, "end": end, "value": value, "on this GPU": used,
                              "baseline": get_system(s).label, "peak ÷": peak("paged") / peak(s),
                              "paged peak": peak("paged"), "baseline peak": peak(s)}
                             for s in systems if s != "paged"]
    return pd.DataFrame(rows)
