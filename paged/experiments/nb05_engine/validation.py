"""The simulator checked against the real engine on this machine (notebook 05; the paper has no such check).

The simulator (:mod:`paged.sim`) and the engine (:mod:`paged.engine`) serve requests through one
serving loop and one scheduler; only the executor differs (a cost model vs the model on the KV
cache). So a cost model of this CPU, fitted to a profile of the engine's own steps, should let the
simulator predict what the engine measures when it serves a trace. Three steps:

1. :func:`profile_engine`: the paged engine runs a grid of batches (sequences × context length)
   and single prompts; every iteration's wall time (scheduling included) is recorded with its
   shape: sequences, tokens computed, total context (decode), Σ prompt² (prefill). The grid is
   profiled once before the first served run and again after each one (:func:`validate`), so the
   profile spans the same minutes as the runs.
2. :class:`paged.sim.linear_cost.LinearCostModel` is fitted to the pooled passes: the form of the
   GPU cost model (per sequence, per token, per context token, per squared prompt token, fixed),
   never to a served trace.
3. :func:`validate`: the engine serves ShareGPT-length requests
   (:func:`paged.experiments.nb05_engine.engine.sharegpt_requests`) all at once and with Poisson arrivals at
   fractions of its measured saturated throughput; the simulator serves the identical requests and
   arrival times with the same KV cache, block size, scheduler budgets and preemption mode. Each row
   gives prediction ÷ measurement of throughput and mean normalized latency (target: within 15%),
   and the range of that ratio over the fits of the single passes.

Why several passes: one pass's step times move by 5–10% on a shared machine, so a fit to one pass
carries its luck into every prediction; the pooled fit averages the whole check, and the single-pass
range shows how much a prediction depends on when the profile was taken. The engine measures wall
time, so a machine busier than its cores slows it by amounts no profile can know: :func:`validate`
records the load around every run, and one above :data:`MAX_LOAD_PER_CORE` per core is reported but
not judged (``judged`` False; measured evidence for the threshold at :data:`MAX_LOAD_PER_CORE`).
"""

from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from paged.block.allocator import DEFAULT_BLOCK_SIZE
from paged.core.checks import as_positive_int
from paged.core.metrics import request_metrics
from paged.engine import LLM, SamplingParams
from paged.experiments.nb05_engine.engine import DEFAULT_MODEL, sharegpt_requests, torch_threads
from paged.sim.linear_cost import LinearCostModel
from paged.sim.simulator import simulate
from paged.systems import make_kv_manager
from paged.workloads import poisson_arrivals
from paged.workloads.trace import Trace

__all__ = ["DECODE_GRID", "PREFILL_LENS", "PROFILE_COLUMNS", "TARGET", "MAX_LOAD_PER_CORE", "available_cores", "profile_engine", "measure_swap", "validate", "profile_errors",
           "summary_text", "plot_validation"]

#: Decode shapes profiled: (sequences, prompt tokens each), within an 8192-slot cache and the 64
#: sequences a run of notebook 05's 64 requests can batch at most (shapes it never forms only cost
#: profiling time and pull the fit away from the ones it does).
DECODE_GRID = ((1, 32), (4, 32), (16, 32), (48, 32), (64, 32), (1, 256), (8, 256), (24, 256),
               (1, 640), (4, 640), (10, 640))
#: Single prompts profiled (tokens): prefills alone.
PREFILL_LENS = (16, 64, 160, 320, 640, 960)
#: Prediction ÷ measurement within 1 ± this counts as validated.
TARGET = 0.15
#: A run is judged against :data:`TARGET` only when the machine's 1-minute load average stayed at or
#: below this many runnable threads per core: measured on 2 cores, all four runs fell within ±15% at
#: load 1.2-1.3 and none did at load 3 (above it the engine's thread shares a core for part of a run).
MAX_LOAD_PER_CORE = 1.0


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


@contextmanager
def _recording(llm: LLM):
    """Record the shape of every forward the engine's runner executes (list of dicts)."""
    rows: list[dict] = []
    runner = llm.runner
    execute = runner.execute

    def recorded(input_ids, positions, slot_mapping, *, is_prefill, seq_lens=None, block_tables=None,
                 context_lens=None):
        lens = seq_lens if is_prefill else [1] * len(context_lens)
        rows.append({"is_prefill": is_prefill, "num_seqs": len(lens), "num_tokens": len(input_ids),
                     "context_tokens": 0 if is_prefill else int(sum(context_lens)),
                     "sum_sq_tokens": int(sum(n * n for n in seq_lens)) if is_prefill else 0})
        return execute(input_ids, positions, slot_mapping, is_prefill=is_prefill, seq_lens=seq_lens,
                       block_tables=block_tables, context_lens=context_lens)

    runner.execute = recorded
    try:
        yield rows
    finally:
        del runner.execute


def _run(llm: LLM, prompts, outputs, arrival_times=None) -> list[dict]:
    """Serve the requests; one row per iteration: its shape and wall seconds (scheduling included)."""
    params = [SamplingParams(temperature=0, max_tokens=o, ignore_eos=True) for o in outputs]
    with _recording(llm) as rows:
        llm.generate(prompts, params, arrival_times=arrival_times, use_tqdm=False)
    return [{**row, "seconds": step.seconds} for row, step in zip(rows, llm.last_stats.steps, strict=True)]


def profile_engine(llm: LLM, *, decode_grid=DECODE_GRID, prefill_lens=PREFILL_LENS, decode_steps: int = 8,
                   seed: int = 0) -> pd.DataFrame:
    """Step times of ``llm`` over a grid of shapes (module docstring, step 1).

    Grid entries that would fill more than 95% of the KV cache are left out (a smaller cache
    profiles fewer shapes).

    Returns:
        One row per iteration: ``is_prefill``, ``num_seqs``, ``num_tokens``, ``context_tokens``,
        ``sum_sq_tokens``, ``seconds`` (wall time), ``config`` (the grid entry).

    Raises:
        ValueError: if no decode entry fits the KV cache, or ``decode_steps`` is not an integer ≥ 1.
    """
    as_positive_int(decode_steps, "decode_steps")
    rng = np.random.default_rng(seed)
    vocab = llm.model.config.vocab_size
    slots = llm.kv_cache.num_blocks * llm.block_size
    _run(llm, [rng.integers(3, vocab, size=16).tolist()] * 2, [4, 4])  # warm-up, not recorded
    fits = [(b, ctx) for b, ctx in decode_grid
            if b * -(-(ctx + decode_steps + 1) // llm.block_size) * llm.block_size <= 0.95 * slots]
    if not fits:
        raise ValueError(f"no decode profile entry of {list(decode_grid)} fits the {slots}-slot KV cache")
    rows = []
    for b, ctx in fits:
        prompts = [rng.integers(3, vocab, size=ctx).tolist() for _ in range(b)]
        rows += [{**r, "config": f"decode {b}×{ctx}"} for r in _run(llm, prompts, [decode_steps + 1] * b)]
    for n in [n for n in prefill_lens if n < min(slots, llm.max_model_len)]:
        rows += [{**r, "config": f"prefill {n}"} for r in _run(llm, [rng.integers(3, vocab, size=n).tolist()], [1])]
    return pd.DataFrame(rows)


def measure_swap(llm: LLM, num_blocks: int = 64, repeats: int = 5) -> float:
    """Median seconds to copy one KV block one way (swap out then in, ``num_blocks`` at a time)."""
    cache = llm.kv_cache
    n = min(num_blocks, cache.num_blocks, cache.num_cpu_blocks)
    if n == 0:
        return 0.0
    pairs = [(i, i) for i in range(n)]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        cache.swap_out(pairs)
        cache.swap_in(pairs)
        times.append((time.perf_counter() - start) / (2 * n))
    return float(np.median(times))


def _metrics(groups, duration) -> dict:
    m = request_metrics(groups, duration)
    return {"throughput_rps": m["throughput_rps"], "normalized_latency": m["normalized_latency"]}


#: Columns a profile table needs (:meth:`paged.sim.linear_cost.LinearCostModel.fit`).
PROFILE_COLUMNS = ("is_prefill", "num_seqs", "num_tokens", "context_tokens", "sum_sq_tokens", "seconds")


def _check_arguments(rate_fractions, decode_steps, num_requests, kv_cache_tokens, block_size, profile) -> None:
    """Refuse :func:`validate`'s bad arguments by name, before anything runs."""
    if isinstance(rate_fractions, (str, bytes)) or not hasattr(rate_fractions, "__iter__"):
        raise ValueError(f"rate_fractions must be a list of fractions of the peak in (0, 1), got {rate_fractions!r}")
    fractions = list(rate_fractions)
    if not fractions or not all(isinstance(f, (int, float, np.number)) and not isinstance(f, bool)
                                and 0 < f < math.inf for f in fractions):
        raise ValueError(f"rate_fractions must be positive finite fractions of the peak, got {rate_fractions!r}")
    as_positive_int(decode_steps, "decode_steps")
    as_positive_int(num_requests, "num_requests")
    as_positive_int(block_size, "block_size")
    as_positive_int(kv_cache_tokens, "kv_cache_tokens")
    if kv_cache_tokens < block_size:
        raise ValueError(f"kv_cache_tokens={kv_cache_tokens} is less than one {block_size}-token block")
    if profile is not None:
        if not isinstance(profile, pd.DataFrame):
            raise ValueError(f"profile must be a DataFrame from profile_engine, got {type(profile).__name__}")
        missing = [c for c in PROFILE_COLUMNS if c not in profile.columns]
        if missing or len(profile) == 0:
            raise ValueError(f"profile must be a non-empty profile_engine table; missing columns: {missing or 'none'}, "
                             f"{len(profile)} rows")


def validate(model_path=DEFAULT_MODEL, *, num_requests: int = 64, rate_fractions=(0.3, 0.6, 0.9),
             kv_cache_tokens: int = 8192, block_size: int = DEFAULT_BLOCK_SIZE, seed: int = 0, preemption: str = "recompute",
             num_threads: int | None = 1, profile: pd.DataFrame | None = None, decode_steps: int = 4):
    """Profile the engine, fit the CPU cost model, and compare simulation with measurement (module docstring).

    Order on the machine: a profile pass, then each served run followed by another pass (so
    ``len(rate_fractions) + 2`` passes of :func:`profile_engine` with ``decode_steps``), then the
    fits and the simulations (milliseconds each).

    Args:
        rate_fractions: request rates as fractions of the engine's measured saturated throughput
            (the run with every request at t = 0, which is also compared).
        profile: a :func:`profile_engine` table to reuse (else measured here, in passes); a
            ``pass`` column, if any, gives the single-pass fits.
        decode_steps: decode iterations per grid entry and pass.

    Returns:
        ``(table, profile, cost)``: one row per rate (``rate`` req/s, ``inf`` first) with measured
        and predicted ``throughput_rps`` and ``normalized_latency`` and their ratios
        (``*_ratio`` = prediction ÷ measurement with the pooled fit; ``*_ratio_min`` /
        ``*_ratio_max``: the same over the fits of single passes, NaN with one pass), preemptions
        and mean decode batches of both, ``engine_step_vs_model`` (median over the engine's
        iterations in that run of its measured step time ÷ the pooled model's: above 1 when the
        engine stepped slower while serving than while profiled), ``at_speed_*_ratio`` (the same
        ratios with the pooled model × ``engine_step_vs_model``: what is left when the machine's
        speed during the run is known, i.e. the scheduler's and the cost model's form's share of
        the error; one number of the run is used, its step times, never its throughput or
        latency), the machine's 1-minute load average (the larger of before and after the run),
        ``cores`` (:func:`available_cores`) and ``judged`` (the load was at most
        :data:`MAX_LOAD_PER_CORE` per core, so the run counts against :data:`TARGET`); the profile (every pass,
        ``pass`` numbered from 0); the pooled :class:`~paged.sim.linear_cost.LinearCostModel`.

    Raises:
        ValueError: bad sizes, fractions or ``decode_steps``, or a ``profile`` without the columns
            :meth:`LinearCostModel.fit` needs (all checked before the engine runs).
    """
    _check_arguments(rate_fractions, decode_steps, num_requests, kv_cache_tokens, block_size, profile)
    with torch_threads(num_threads):
        llm = LLM(model_path, block_size=block_size, num_gpu_blocks=kv_cache_tokens // block_size,
                  preemption=preemption)
        passes: list[pd.DataFrame] = []

        def profile_pass():
            if profile is None:
                passes.append(profile_engine(llm, seed=seed + len(passes), decode_steps=decode_steps)
                              .assign(**{"pass": len(passes)}))

        profile_pass()
        prompts, outputs = sharegpt_requests(num_requests, llm.max_model_len, llm.model.config.vocab_size, seed)
        runs, saturated = [], math.inf
        for fraction in (math.inf, *rate_fractions):
            rate = math.inf if math.isinf(fraction) else fraction * saturated
            times = [0.0] * num_requests if math.isinf(rate) else poisson_arrivals(num_requests, rate, seed).tolist()
            load_before = os.getloadavg()[0]
            steps = pd.DataFrame(_run(llm, prompts, outputs, times))
            engine = llm.last_result
            measured = _metrics(engine.groups, engine.duration)
            if math.isinf(rate):
                saturated = measured["throughput_rps"]
            runs.append({"rate_fraction": fraction, "rate": rate, "times": times, "steps": steps, "measured": measured,
                         "measured_preemptions": engine.num_preemptions,
                         "measured_decode_batch": engine.avg_decode_batched_requests,
                         "load_1min": max(load_before, os.getloadavg()[0])})
            profile_pass()
        if profile is None:
            profile = pd.concat(passes, ignore_index=True)
        swap = measure_swap(llm) if preemption == "swap" else 0.0
    cost = LinearCostModel.fit(profile, swap_per_block=swap)
    cores = available_cores()
    singles = [LinearCostModel.fit(part, swap_per_block=swap) for _, part in profile.groupby("pass")] \
        if "pass" in profile and profile["pass"].nunique() > 1 else []

    def predict(model: LinearCostModel, times):
        trace = Trace.from_lengths([len(p) for p in prompts], outputs, arrival_times=times)
        manager = make_kv_manager("paged", llm.kv_cache.num_blocks, block_size,
                                  max_seq_len=llm.max_model_len, num_cpu_blocks=llm.kv_cache.num_cpu_blocks)
        return simulate(trace, manager, model, max_num_seqs=llm.max_num_seqs, preemption_mode=preemption,
                        max_num_batched_tokens=llm.max_num_batched_tokens, record_memory=False,
                        max_seq_len=llm.max_model_len)

    rows = []
    for run in runs:
        measured = run["measured"]
        sim = predict(cost, run["times"])
        predicted = _metrics(sim.groups, sim.duration)
        band = [_metrics(s.groups, s.duration) for s in (predict(m, run["times"]) for m in singles)]
        row = {"rate_fraction": run["rate_fraction"], "rate": run["rate"],
               **{f"measured_{k}": v for k, v in measured.items()},
               **{f"predicted_{k}": v for k, v in predicted.items()}}
        for name, key in (("throughput_ratio", "throughput_rps"), ("latency_ratio", "normalized_latency")):
            ratios = [b[key] / measured[key] for b in band]
            row[name] = predicted[key] / measured[key]
            row[f"{name}_min"] = min(ratios, default=math.nan)
            row[f"{name}_max"] = max(ratios, default=math.nan)
        speed = float(np.median(1.0 / (1.0 + cost.relative_errors(run["steps"]))))
        at_speed = predict(cost.scaled(speed), run["times"])
        at_speed = _metrics(at_speed.groups, at_speed.duration)
        rows.append({**row, "measured_preemptions": run["measured_preemptions"], "predicted_preemptions": sim.num_preemptions,
                     "measured_decode_batch": run["measured_decode_batch"],
                     "predicted_decode_batch": sim.avg_decode_batched_requests,
                     "engine_step_vs_model": speed,
                     "at_speed_throughput_ratio": at_speed["throughput_rps"] / measured["throughput_rps"],
                     "at_speed_latency_ratio": at_speed["normalized_latency"] / measured["normalized_latency"],
                     "load_1min": run["load_1min"], "cores": cores,
                     "judged": run["load_1min"] <= MAX_LOAD_PER_CORE * cores})
    return pd.DataFrame(rows), profile, cost


def plot_validation(table: pd.DataFrame, profile: pd.DataFrame, cost: LinearCostModel):
    """(a) the fitted CPU cost model vs every profiled step; (b) prediction ÷ measurement per rate
    (bars: the pooled fit; whiskers: the range over single-pass fits, when :func:`validate` gave one;
    diamonds: the pooled fit at each run's own step speed).

    Raises:
        ValueError: if ``table`` or ``profile`` has no rows (nothing to draw).
    """
    if not len(table) or not len(profile):
        raise ValueError(f"plot_validation needs the rows of validate(): got {len(table)} compared runs and "
                         f"{len(profile)} profiled steps")
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
    predicted = np.asarray(cost.relative_errors(profile)) + 1.0
    for prefill, marker, label in ((False, "o", "decode steps"), (True, "s", "prefill steps")):
        part = profile["is_prefill"].astype(bool) == prefill
        a.scatter(1e3 * profile.loc[part, "seconds"], 1e3 * profile.loc[part, "seconds"] * predicted[part.to_numpy()],
                  s=12, marker=marker, label=label)
    top = 1e3 * profile["seconds"].max() * 1.1
    a.plot([0, top], [0, top], color="0.4", linewidth=1)
    a.set(xlabel="measured step time (ms)", ylabel="fitted cost model (ms)", title="(a) CPU cost model vs profile")
    a.legend(frameon=False)
    judged = table["judged"] if "judged" in table else pd.Series(True, index=table.index)
    labels = [("all at once" if math.isinf(r) else f"{f:.0%} of peak\n({r:.2g} req/s)")
              + ("" if ok else f"\nnot judged (load {load:.1f})")
              for r, f, ok, load in zip(table["rate"], table["rate_fraction"], judged, table["load_1min"])]
    x = np.arange(len(table))
    for shift, col, label in ((-0.2, "throughput_ratio", "throughput"), (0.2, "latency_ratio", "normalized latency")):
        low = (table[col] - table.get(f"{col}_min", table[col])).clip(lower=0).fillna(0)
        high = (table.get(f"{col}_max", table[col]) - table[col]).clip(lower=0).fillna(0)
        b.bar(x + shift, table[col], 0.4, label=label, yerr=[low, high], capsize=3, error_kw={"elinewidth": 1})
    if "at_speed_throughput_ratio" in table:
        b.scatter(np.r_[x - 0.2, x + 0.2], np.r_[table["at_speed_throughput_ratio"], table["at_speed_latency_ratio"]],
                  marker="D", s=18, color="0.15", zorder=3, label="model at the run's step speed")
    b.axhspan(1 - TARGET, 1 + TARGET, color="0.85", zorder=0, label=f"±{TARGET:.0%}")
    b.axhline(1.0, color="0.3", linewidth=1)
    b.set_xticks(x, labels)
    b.set(ylabel="simulated ÷ measured", title="(b) simulator vs engine, same trace")
    top = np.nanmax(table[[c for c in table.columns if c.endswith("_ratio") or c.endswith("_ratio_max")]].to_numpy())
    b.set_ylim(0, max(1.2, top) * 1.35)  # room above the bars for the legend
    b.legend(frameon=False, fontsize=8, loc="upper center", ncol=2)
    fig.tight_layout()
    return fig


def profile_errors(profile: pd.DataFrame, cost: LinearCostModel) -> pd.DataFrame:
    """How well the fitted cost model matches the profile: per step kind, the median and largest
    absolute relative error and the steps measured."""
    err = np.abs(cost.relative_errors(profile))
    kind = np.where(profile["is_prefill"].astype(bool), "prefill", "decode")
    return pd.DataFrame({"kind": kind, "err": err}).groupby("kind")["err"].agg(
        median_abs_error="median", max_abs_error="max", steps="count").reset_index()


def summary_text(table: pd.DataFrame, cost: LinearCostModel) -> str:
    """Markdown lines quoting :func:`validate`'s numbers: the pooled fit's coefficients, each ratio
    with its single-pass range, and how many runs fall within ±:data:`TARGET` on both measures."""
    d, p = cost.decode, cost.prefill
    lines = [f"* Fitted CPU cost model: decode {1e3 * d[0]:.2f} ms + {1e6 * d[1]:.0f} µs per sequence + "
             f"{1e9 * d[2]:.0f} ns per context token; prefill {1e3 * p[0]:.2f} ms + {1e6 * p[1]:.0f} µs per "
             f"sequence + {1e6 * p[2]:.1f} µs per token + {1e9 * p[3]:.2f} ns per squared prompt token."]
    inside = judged = 0
    for _, r in table.iterrows():
        where = "all requests at once" if math.isinf(r["rate"]) else f"{r['rate']:.2g} req/s"
        ok = all(abs(r[c] - 1) <= TARGET for c in ("throughput_ratio", "latency_ratio"))
        counts = bool(r.get("judged", True))
        judged += counts
        inside += ok and counts
        verdict = (f"{'within' if ok else 'outside'} ±{TARGET:.0%}" if counts else
                   f"not judged: load {r['load_1min']:.1f} on {int(r['cores'])} cores, above the "
                   f"{MAX_LOAD_PER_CORE:g} per core the check needs")
        band = {c: f" (single passes {r[f'{c}_min']:.2f}–{r[f'{c}_max']:.2f})" if math.isfinite(r.get(f"{c}_min", math.nan))
                else "" for c in ("throughput_ratio", "latency_ratio")}
        lines.append(f"* {where}: predicted ÷ measured throughput {r['throughput_ratio']:.2f}{band['throughput_ratio']}, "
                     f"normalized latency {r['latency_ratio']:.2f}{band['latency_ratio']} "
                     f"({verdict}); the engine's own steps "
                     f"took {r['engine_step_vs_model']:.2f}× the fitted model's time (at that speed the prediction is "
                     f"{r['at_speed_throughput_ratio']:.2f} and {r['at_speed_latency_ratio']:.2f}); decode batch "
                     f"{r['measured_decode_batch']:.1f} measured, {r['predicted_decode_batch']:.1f} predicted; load "
                     f"{r['load_1min']:.1f}.")
    at_speed = sum(all(abs(r[f"at_speed_{c}"] - 1) <= TARGET for c in ("throughput_ratio", "latency_ratio"))
                   for _, r in table.iterrows() if bool(r.get("judged", True)))
    skipped = len(table) - judged
    lines.append(f"* {inside} of {judged} judged runs within ±{TARGET:.0%} on both measures; {at_speed} of {judged} "
                 f"with the model at each run's own step speed"
                 + (f"; {skipped} run{'s' * (skipped != 1)} not judged (the machine's load above "
                    f"{MAX_LOAD_PER_CORE:g} per core: the engine's thread shared a core)" if skipped else "") + ".")
    return "\n".join(lines)
