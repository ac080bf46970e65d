"""Sweeps of simulated points (§6): many :func:`~paged.experiments.serving.point.simulate_point` runs in
parallel, and the reuse of a row already run (runs are deterministic: same inputs, same row).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import replace

import pandas as pd

from paged.experiments.notebook.jobs import SweepFailed, run_jobs
from paged.experiments.serving.point import simulate_point
from paged.experiments.serving.run_length import paper_duration
from paged.sim.config import model_name

__all__ = ["sweep", "reusable", "matching_rows"]

#: simulate_point's defaults, for :func:`reusable` (derived from its signature, not restated).
_POINT_DEFAULTS = {name: p.default for name, p in inspect.signature(simulate_point).parameters.items()}


def sweep(points: list[dict], workers: int = 2, desc: str = "simulate", known: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`simulate_point` for every dict of keyword arguments in ``points``, in parallel.

    Args:
        known: rows of earlier runs (:func:`sweep`, the points of :func:`sustained_rate`); a point
            whose run one of them already is (:func:`reusable`) takes that row instead of running
            again. Nothing else is cached between calls.

    Returns:
        One row per point, in the order given.

    Raises:
        SweepFailed: after every point ran, if some raised; its ``results`` are the rows of
            ``points`` (None where a point failed) and its failures' ``index`` their positions in
            ``points``. The same call again reruns only those (:func:`~paged.experiments.notebook.jobs.run_jobs`).
    """
    rows: list[dict | None] = [reusable(point, known) for point in points]
    todo = [i for i, row in enumerate(rows) if row is None]
    try:
        done = run_jobs(simulate_point, [points[i] for i in todo], workers=workers, desc=desc)
    except SweepFailed as err:  # every other point ran: its row is on the error, in the order of ``points``
        for i, row in zip(todo, err.results):
            rows[i] = row
        err.results = rows
        err.failures = [replace(f, index=todo[f.index]) for f in err.failures]
        raise
    for i, row in zip(todo, done):
        rows[i] = row
    return pd.DataFrame(rows)


#: What makes two :func:`simulate_point` runs the same run: their rows' columns (``num_requests``
#: only when given: a paper-length row holds the count it ran).
_RUN_KEYS = ("model", "trace", "system", "rate", "seed", "block_size", "preemption", "cpu_scale", "min_duration",
             "n", "beam_width", "prefix_caching", "tokenizer")


def reusable(point: dict, known: pd.DataFrame | None) -> dict | None:
    """The row of ``known`` that is the run ``simulate_point(**point)`` would do, or None.

    A row matches when every setting of :data:`_RUN_KEYS` is the point's (defaults filled in, the
    paper-length floor from ``duration_scale``), it ran to the end (not ``stopped_early``, a latency
    that is not NaN), and its latency is at most the point's ``latency_cap`` (a run under the cap
    never stops early, so the capped run would have been the same). Runs are deterministic: the row
    is the run's. None when ``known`` is empty or lacks those columns, and for a point that sets
    ``min_duration``, ``extend_below`` or ``record_sharing`` other than False (a run that records
    sharing has more columns; always run). O(rows).

    Raises:
        TypeError: for a ``known`` that is not a DataFrame, or a point with a name
            :func:`simulate_point` has no parameter for (a typo must not match another run).
    """
    if known is not None and not isinstance(known, pd.DataFrame):
        raise TypeError(f"known must be a DataFrame of earlier rows (or None), got {type(known).__name__}")
    unknown = sorted(set(point) - set(_POINT_DEFAULTS))
    if unknown:  # simulate_point would refuse them: so does the reuse, not match another run's row
        raise TypeError(f"simulate_point() has no parameter(s) {', '.join(map(repr, unknown))}")
    args = {**_POINT_DEFAULTS, **point}  # the defaults simulate_point fills in
    if known is None or len(known) == 0 or args["extend_below"] != _POINT_DEFAULTS["extend_below"] \
            or args["record_sharing"] not in (None, False) or args["min_duration"] is not None \
            or (args["record_sharing"] is None and (args["n"] > 1 or args["beam_width"] > 1 or args["prefix_caching"])):
        return None
    model = args["model"]
    name = model_name(model)
    count, rate = args["num_requests"], float(args["rate"])
    want = {**{key: args[key] for key in _RUN_KEYS if key in args}, "model": name, "trace": str(args["trace"]),
            "rate": rate, "cpu_scale": float(args["cpu_scale"]),
            "min_duration": math.nan if count is not None or math.isinf(rate)
            else paper_duration(name) * args["duration_scale"]}
    rows = matching_rows(known, {k: v for k, v in want.items() if k != "system"}, want["system"])
    if not len(rows) or not {"num_requests", "stopped_early", "normalized_latency"} <= set(rows.columns):
        return None
    if count is not None:
        rows = rows[rows["num_requests"] == count]
    rows = rows[~rows["stopped_early"].astype(bool) & rows["normalized_latency"].notna()]
    if args["latency_cap"] is not None:
        rows = rows[rows["normalized_latency"] <= args["latency_cap"]]
    if not len(rows):
        return None
    row = rows.iloc[0].to_dict()
    row["num_requests"] = int(row["num_requests"])
    return row


def matching_rows(known: pd.DataFrame | None, settings: dict, system: str) -> pd.DataFrame:
    """The rows of ``known`` for ``system`` with exactly ``settings`` (NaN matches NaN)."""
    if known is None or len(known) == 0 or "system" not in known.columns:
        return pd.DataFrame()
    rows = known[known["system"] == system]
    for key, value in settings.items():
        if key not in rows.columns:
            return pd.DataFrame()
        col = rows[key]
        rows = rows[col.isna()] if value is None or (isinstance(value, float) and math.isnan(value)) \
            else rows[col == value]
    return rows
