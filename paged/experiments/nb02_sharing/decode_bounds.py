"""What bounds the decode steps of Fig. 14's runs: the mechanism behind paged's gain over Orca (Oracle) (§6.3).

Sharing lets paged hold more sequences at once; whether that buys throughput depends on what then bounds
a decode step. Each system is run once more at its own sustained rate (the searches of
:func:`paged.experiments.nb02_sharing.sharing.sustained_rates`), the same paper-length run, through notebook
06's :class:`~paged.experiments.nb06_today.iteration_bounds.BoundRecorder`, which returns the cost model's
times unchanged and tallies, per decode step, the sequences in the batch and whether its linear layers are
compute bound (their FLOP time above the time to stream the weights). A wide beam search fills paged's
batch up to the scheduler's cap of :data:`MAX_NUM_SEQS` sequences, where its decode steps turn compute
bound and each takes longer than Orca's smaller ones: the gain is then set by time per step, no longer by
the batch memory allows. One run per (setting, system): seconds each.
"""

from __future__ import annotations

import pandas as pd

from paged.experiments.nb02_sharing.sharing import group_options
from paged.experiments.nb06_today.iteration_bounds import BoundRecorder
from paged.experiments.notebook.sweep import run_jobs
from paged.experiments.serving.run_length import long_trace, paper_duration, run_duration
from paged.sim.config import DEFAULT_BLOCK_SIZE, ServingConfig

__all__ = ["MAX_NUM_SEQS", "decode_bounds"]

#: The scheduler's cap on running sequences (vLLM's ``max_num_seqs`` default, the simulator's).
MAX_NUM_SEQS = 256


def _bound(model: str, trace: str, system: str, rate: float, decoding: str, width: int, num_requests: int | None,
           duration_scale: float, seed: int, block_size: int) -> dict:  # module level: worker processes import it
    config = ServingConfig(model=model, system=system, block_size=block_size, **group_options(decoding, width))
    recorder = BoundRecorder.of(config.cost_model())
    duration = num_requests / rate if num_requests else run_duration(paper_duration(model) * duration_scale, rate)
    requests = long_trace(trace, rate, duration, seed)
    config.replace(model=recorder).serve(requests)
    t = recorder.tally
    decode = t["decode_seconds"] or float("nan")
    return {"decoding": decoding, "width": width, "system": system, "rate": rate,
            "decode_batch": t["decode_seq_seconds"] / decode, "max_decode_batch": t["max_decode_batch"],
            "ms_per_decode": 1e3 * decode / max(t["decode_iterations"], 1),
            "compute_bound_share": t["compute_bound_seconds"] / (t["seconds"] or float("nan"))}


def decode_bounds(rates: pd.DataFrame, settings=(("beam", 6),), systems=("paged", "orca-oracle"), *,
                  model: str = "opt-13b", trace: str = "alpaca-bare", num_requests: int | None = None,
                  duration_scale: float = 1.0, seed: int = 0, block_size: int = DEFAULT_BLOCK_SIZE, workers: int = 2) -> pd.DataFrame:
    """Per (setting, system) at its sustained rate (``rates``: ``sustained_rates`` rows): ``decode_batch``
    (sequences, time-weighted mean over decode steps), ``max_decode_batch``, ``ms_per_decode`` (mean
    seconds of a decode step, ms) and ``compute_bound_share`` (of the busy time). Settings or systems
    missing from ``rates`` are left out."""
    by = rates.set_index(["decoding", "width", "system"])["sustained_rate"]
    jobs = [dict(model=model, trace=trace, system=s, rate=float(by[d, w, s]), decoding=d, width=w,
                 num_requests=num_requests, duration_scale=duration_scale, seed=seed, block_size=block_size)
            for d, w in settings for s in systems if (d, w, s) in by.index and by[d, w, s] > 0]
    return pd.DataFrame(run_jobs(_bound, jobs, workers=workers, desc="Fig. 14 decode bounds"))
