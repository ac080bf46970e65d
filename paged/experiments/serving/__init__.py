"""Simulated serving of the paper's systems, shared by notebooks 02, 03 and 05 (§6).

* :mod:`~paged.experiments.serving.point`: one simulated run (:func:`simulate_point`)
  and its metrics, the systems and the latency thresholds;
* :mod:`~paged.experiments.serving.sweeps`: many points in parallel, rows already run reused;
* :mod:`~paged.experiments.serving.sustained`: peak (saturated) throughput and the sustained-rate search;
* :mod:`~paged.experiments.serving.run_length`: paper-length traces, convergence, early stop.

The public names of these modules are importable from this package.
"""

from paged.experiments.serving.point import (LATENCY_THRESHOLD, SATURATED_REQUESTS, SYSTEMS, THRESHOLDS, TRACES,
                                             WALL_TIME_COLUMNS, metrics, simulate_point)
from paged.experiments.serving.sustained import as_names, sustained_rate
from paged.experiments.serving.sweeps import reusable, sweep

__all__ = ["as_names", "SYSTEMS", "TRACES", "LATENCY_THRESHOLD", "THRESHOLDS", "SATURATED_REQUESTS",
           "WALL_TIME_COLUMNS", "metrics", "simulate_point", "sweep", "reusable", "sustained_rate"]
