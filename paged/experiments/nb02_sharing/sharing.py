"""Notebook 02's driver: sharing KV memory and turning it into throughput (§4.4, §6.3, §6.4; Fig. 14–16).

* **Fig. 14** (:func:`sustained_rates`, :func:`latency_sweep`): normalized latency vs request rate of
  paged and the Orca baselines when every request runs ``n`` parallel samples or a beam search of
  width ``k`` (OPT-13B, Alpaca), and the sustained rate of each, whose ratio paged / Orca (Oracle) is
  the paper's "improvement". Beam searches replay parent pointers recorded from the real engine
  (:mod:`paged.sim.beam_replay`).
* **Fig. 15** (:func:`memory_saving`): KV blocks saved by sharing, measured as the paper defines it,
  "the number of blocks we saved by sharing divided by the number of total blocks without
  sharing": at every iteration of a simulated run, the physical blocks the running sequences hold and
  the blocks they would hold if each had its own copy of every block
  (:class:`paged.core.metrics.SharingStats`), summed over the run; saving = 1 − Σ held / Σ without.
  :func:`engine_memory_saving` is the real engine's cross-check, with the trace's output lengths.
* **Fig. 16** (:func:`shared_prefix_rates`): WMT16 translation with a 1-shot / 5-shot prefix shared
  by every request (LLaMA-13B): paged shares the prefix's blocks (a provider-reserved prefix, §4.4,
  or found by automatic prefix caching), Orca (Oracle) cannot. Needs the ``wmt16-*`` traces; without
  them it reports that and returns nothing.
* **Prefix caching on the real engine** (:func:`prefix_caching_demo`): requests sharing a system
  prompt, served with caching off and on: the hit rate, prefill tokens and time saved.

Figures and the paper-vs-this-run table: :mod:`paged.experiments.nb02_sharing.sharing_figures`.
"""

from __future__ import annotations

import math
import statistics

import pandas as pd

from paged.block.allocator import DEFAULT_BLOCK_SIZE
from paged.experiments.serving import LATENCY_THRESHOLD, SATURATED_REQUESTS, THRESHOLDS, as_names, sustained_rate, \
    sweep
from paged.experiments.notebook.sweep import run_jobs
from paged.workloads.named import NAMED_TRACES

__all__ = ["CURVE_LATENCY_CAP", "SEARCH_LATENCY_CAP", "FIG14_SYSTEMS", "FIG14_SETTINGS", "FIG16_TRACES",
           "FIG16_PAPER_PREFIX_TRACES", "prefix_block_note", "FIG16_SYSTEMS", "group_options", "sustained_rates",
           "latency_sweep", "improvement_over_oracle", "memory_saving", "engine_memory_saving",
           "available_fig16_traces", "shared_prefix_rates", "shared_prefix_sweep", "FIG16_CURVES", "length_summary", "prefix_caching_demo",
           "demo_summary", "SYSTEM_PROMPT", "SAVING_RATES", "saving_rates"]

#: Normalized latency (s/token) at which a curve point of Fig. 14 or 16 stops (the top of the paper's
#: latency axes, which end at 1 s/token): a run whose latency is sure to pass it is stopped there and
#: drawn at its bound as an open triangle, as notebook 03's curves are. An Orca system at paged's rates
#: is far past its own capacity, and a finished paper-length run would only measure how long its
#: queue takes to drain (the uncapped runs reached 170 s/token).
CURVE_LATENCY_CAP = 1.0
#: The searches' runs go on (and double until their latency converges) up to this latency, as notebook
#: 03's searches over every threshold of :data:`paged.experiments.serving.THRESHOLDS` do (s/token).
SEARCH_LATENCY_CAP = max(THRESHOLDS)
#: Systems of Fig. 14, the paper's order.
FIG14_SYSTEMS = ("paged", "orca-oracle", "orca-pow2", "orca-max")
#: (decoding, width) settings of Fig. 14; ``("basic", 1)`` is one sample per request, the paper's
#: "basic sampling" starting point of its 1.3× – 2.3× range.
FIG14_SETTINGS = (("basic", 1), ("parallel", 2), ("parallel", 4), ("parallel", 6),
                  ("beam", 2), ("beam", 4), ("beam", 6))
#: Fig. 16's traces (built by the WMT16 workload, paged.workloads.wmt16), by prefix.
FIG16_TRACES = {"1-shot": "wmt16-1shot", "5-shot": "wmt16-5shot"}
#: The same requests with the shared prefix at the paper's 80 and 341 tokens (a sensitivity of Fig. 16).
FIG16_PAPER_PREFIX_TRACES = {"1-shot": "wmt16-1shot-paper-prefix", "5-shot": "wmt16-5shot-paper-prefix"}
#: Fig. 16's systems: (label, system, prefix caching).
FIG16_SYSTEMS = (("paged (reserved prefix)", "paged", False), ("paged (prefix caching)", "paged", True),
                 ("orca-oracle", "orca-oracle", False))


def group_options(decoding: str, width: int) -> dict:
    """``simulate_point`` keywords of a Fig. 14 setting: ``{"n": ...}`` or ``{"beam_width": ...}``.

    Raises:
        ValueError: for an unknown decoding (``basic``, ``parallel``, ``beam``) or a width < 1.
    """
    if width < 1 or decoding not in ("basic", "parallel", "beam"):
        raise ValueError(f"unknown setting ({decoding!r}, {width}); decoding is basic, parallel or beam, width ≥ 1")
    return {"beam_width": width} if decoding == "beam" else {"n": width}


def sustained_rates(settings=FIG14_SETTINGS, systems=FIG14_SYSTEMS, *, model: str = "opt-13b",
                    trace: str = "alpaca-bare", num_requests: int | None = None, duration_scale: float = 1.0,
                    seed: int = 0, lo: float = 0.1, rel_tol: float = 0.03, workers: int = 2, block_size: int = DEFAULT_BLOCK_SIZE,
                    threshold: float = LATENCY_THRESHOLD, saturated_requests: int = SATURATED_REQUESTS,
                    probes=(), return_points: bool = False):
    """Each system's sustained rate (req/s, :func:`paged.experiments.serving.sustained_rate`) in every
    setting, by bisection on ``[0, saturated throughput]`` (the throughput from one run of
    ``saturated_requests`` arriving at once) after the ``probes`` (fractions of it), with paper-length
    runs (``duration_scale`` × the paper's hour, doubled until converged) or, given ``num_requests``,
    runs of that many requests; columns ``decoding``, ``width``, ``system``, ``sustained_rate``,
    ``throughput_rps``, ``at_throughput``, ``threshold``. With ``return_points``, also every run of the
    searches (:func:`~paged.experiments.serving.simulate_point` rows with ``decoding`` and ``width``)."""
    common = dict(model=model, trace=trace, lo=lo, thresholds=(threshold,), num_requests=num_requests,
                  duration_scale=duration_scale, saturated_requests=saturated_requests, seed=seed, rel_tol=rel_tol,
                  workers=1, block_size=block_size, probes=tuple(probes), return_points=True,
                  latency_cap=max(threshold, SEARCH_LATENCY_CAP))
    jobs = [dict(systems=[system], groups=group_options(decoding, width), **common)
            for decoding, width in settings for system in systems]  # one job per search: the workers stay busy
    results = run_jobs(sustained_rate, jobs, workers=workers, desc="Fig. 14 sustained rates")
    labels = [(d, w) for d, w in settings for _ in systems]
    frames = [df.assign(decoding=decoding, width=width) for (df, _), (decoding, width) in zip(results, labels)]
    out = pd.concat(frames, ignore_index=True)
    out = out[["model", "trace", "decoding", "width", "system", "sustained_rate", "throughput_rps", "at_throughput",
               "threshold"]]
    if not return_points:
        return out
    points = [p.assign(decoding=decoding, width=width) for (_, p), (decoding, width) in zip(results, labels) if len(p)]
    return out, pd.concat(points, ignore_index=True) if points else pd.DataFrame()


def improvement_over_oracle(rates: pd.DataFrame, baseline: str = "orca-oracle") -> pd.DataFrame:
    """Paged's sustained rate ÷ ``baseline``'s, per setting (the paper's throughput improvement);
    columns ``decoding``, ``width``, ``paged``, ``baseline``, ``improvement``."""
    rows = []
    for (decoding, width), part in rates.groupby(["decoding", "width"], sort=False):
        r = part.set_index("system")["sustained_rate"]
        rows.append({"decoding": decoding, "width": width, "paged": r["paged"], baseline: r[baseline],
                     "improvement": r["paged"] / r[baseline]})
    return pd.DataFrame(rows)


def latency_sweep(rates: pd.DataFrame, systems=FIG14_SYSTEMS, *, fractions=(0.2, 0.4, 0.6, 0.8, 1.0, 1.2),
                  model: str = "opt-13b", trace: str = "alpaca-bare", num_requests: int | None = None,
                  duration_scale: float = 1.0, seed: int = 0, workers: int = 2, block_size: int = DEFAULT_BLOCK_SIZE,
                  known: pd.DataFrame | None = None, latency_cap: float | None = CURVE_LATENCY_CAP) -> pd.DataFrame:
    """Normalized latency of every system at request rates = ``fractions`` × paged's sustained rate in
    each setting of ``rates`` (:func:`sustained_rates`), so each panel spans the interesting range;
    runs as :func:`sustained_rates` (paper-length, or ``num_requests``). A run stops once its latency
    is sure to pass ``latency_cap`` (s/token, default :data:`CURVE_LATENCY_CAP`; None: every run to
    its end) and its row has that bound and ``stopped_early``. ``known``: rows already run (the
    searches' points) are reused (:func:`~paged.experiments.serving.reusable`), and their finished
    runs join the curves (each system's points near its own knee)."""
    points, labels = [], []
    for (decoding, width), part in rates.groupby(["decoding", "width"], sort=False):
        top = float(part.set_index("system").loc["paged", "sustained_rate"])
        for system in systems:
            for f in fractions:
                points.append(dict(model=model, trace=trace, system=system, rate=top if f == 1 else round(f * top, 4),
                                   num_requests=num_requests, seed=seed, block_size=block_size,
                                   **({} if num_requests is not None else {"duration_scale": duration_scale}),
                                   record_sharing=False, latency_cap=latency_cap, **group_options(decoding, width)))
                labels.append((decoding, width))
    df = sweep(points, workers=workers, desc="Fig. 14 sweep", known=known)
    df = df.drop(columns=[c for c in ("decoding", "width") if c in df.columns])  # reused search rows carry them
    df.insert(2, "decoding", [d for d, _ in labels])
    df.insert(3, "width", [w for _, w in labels])
    return _with_finished(df, known, ["decoding", "width", "system"], systems)


#: Fig. 15's default request rates (req/s) by trace: loaded, below the beam-6 sustained rates.
SAVING_RATES = {"alpaca": 4.0, "alpaca-bare": 4.0, "sharegpt": 0.5}


def saving_rates(traces, rates: dict | None = None) -> dict:
    """Fig. 15's request rate (req/s) of each trace: ``rates`` over :data:`SAVING_RATES`.

    Raises:
        ValueError: naming the traces that have a rate in neither.
    """
    merged = {**SAVING_RATES, **(rates or {})}
    missing = [t for t in traces if t not in merged]
    if missing:
        raise ValueError(f"no request rate for trace(s) {missing}: give rates={{trace: req/s}} (defaults: {SAVING_RATES})")
    return {t: merged[t] for t in traces}


def memory_saving(traces=("alpaca-bare", "sharegpt"), widths=(2, 4, 6), *, rates: dict | None = None,
                  model: str = "opt-13b", num_requests: int | None = None, duration_scale: float = 1.0,
                  seed: int = 0, workers: int = 2, block_size: int = DEFAULT_BLOCK_SIZE) -> pd.DataFrame:
    """Fig. 15 at paper scale: KV blocks saved by sharing (module docstring) for parallel sampling and
    beam search on each trace, paged on ``model``'s server at ``rates[trace]`` req/s (default 4 for
    Alpaca, 0.5 for ShareGPT: loaded, below the beam-6 sustained rates), each run paper-length
    (``duration_scale`` × the paper's hour of arrivals, doubled until the latency converges) or, given
    ``num_requests``, that many requests. Every iteration's blocks in use are recorded; the decode
    and beam calendars sum them in closed form between events, so recording costs little (all twelve
    runs at the full hour take about 5 s on two cores). Columns
    ``trace``, ``decoding``, ``width``, ``rate``, ``saving_percent``, ``blocks_in_use_mean``,
    ``blocks_without_sharing_mean``, ``num_preemptions``, ``num_requests``, ``arrival_seconds``,
    ``converged``.

    Raises:
        ValueError: for a trace with no rate in ``rates`` or :data:`SAVING_RATES` (:func:`saving_rates`),
            or ``traces`` or ``widths`` empty or with a value twice; all before any run.
    """
    traces = as_names("traces", traces)
    widths = as_names("widths", widths)
    rates = saving_rates(traces, rates)
    length = {"num_requests": num_requests} if num_requests is not None else {"duration_scale": duration_scale}
    points = [dict(model=model, trace=t, system="paged", rate=rates[t], seed=seed, block_size=block_size,
                   record_sharing=True, **length, **group_options(d, w))
              for t in traces for d in ("parallel", "beam") for w in widths]
    df = sweep(points, workers=workers, desc="Fig. 15")
    df["decoding"] = ["parallel" if n > 1 else "beam" for n in df["n"]]
    df["width"] = [max(n, b) for n, b in zip(df["n"], df["beam_width"])]
    df["saving_percent"] = 100 * df["kv_sharing_saving"]
    return df.rename(columns={"kv_blocks_in_use_mean": "blocks_in_use_mean",
                              "kv_blocks_without_sharing_mean": "blocks_without_sharing_mean"})[
        ["trace", "decoding", "width", "rate", "saving_percent", "blocks_in_use_mean", "blocks_without_sharing_mean",
         "num_preemptions", "num_requests", "arrival_seconds", "converged"]]


def engine_memory_saving(model_path=None, *, trace: str = "alpaca", num_requests: int = 8, widths=(2, 4, 6),
                         seed: int = 0, block_size: int = DEFAULT_BLOCK_SIZE, length_scale: float | None = 1.0) -> pd.DataFrame:
    """The real engine's Fig. 15 cross-check: the same measure over its decode steps, prompts and
    output lengths from ``trace`` (times ``length_scale``, clipped to the model's context; None scales
    by context / 2048; EOS ignored so each sample or beam generates its request's length). Columns as
    :func:`paged.experiments.nb05_engine.engine.sharing_savings`, plus ``saving_percent`` and ``decoding``."""
    from paged.experiments.nb05_engine.engine import DEFAULT_MODEL, sharing_savings

    df = sharing_savings(model_path or DEFAULT_MODEL, num_requests=num_requests, widths=tuple(widths),
                         max_tokens=None, block_size=block_size, seed=seed, trace=trace, length_scale=length_scale)
    df["decoding"] = ["parallel" if m == "parallel sampling" else "beam" for m in df["mode"]]
    df["saving_percent"] = 100 * df["memory_saving"]
    return df.assign(trace=trace)


def available_fig16_traces() -> dict[str, str]:
    """The Fig. 16 traces this installation has (``{"1-shot": "wmt16-1shot", ...}``), possibly none."""
    return {shot: name for shot, name in FIG16_TRACES.items() if name in NAMED_TRACES}


def shared_prefix_rates(*, model: str = "llama-13b", num_requests: int | None = None, duration_scale: float = 1.0,
                        seed: int = 0, lo: float = 0.1, rel_tol: float = 0.03, workers: int = 2, block_size: int = DEFAULT_BLOCK_SIZE,
                        threshold: float = LATENCY_THRESHOLD, saturated_requests: int = SATURATED_REQUESTS,
                        probes=(), return_points: bool = False, traces: dict | None = None,
                        systems=FIG16_SYSTEMS):
    """Fig. 16: sustained rate of each of ``systems`` (default :data:`FIG16_SYSTEMS`, which must include
    Orca (Oracle)) on each available WMT16 trace (``traces``: shot -> trace name, default
    :func:`available_fig16_traces`; e.g. :data:`FIG16_PAPER_PREFIX_TRACES` for the paper's prefix lengths),
    and each ÷ Orca (Oracle); runs as :func:`sustained_rates` (one search per job, ``workers`` at once).
    None (after printing why) when no ``wmt16-*`` trace is installed. With ``return_points``, also every
    run of the searches (rows with ``shot`` and the system's label in ``label``)."""
    available = available_fig16_traces() if traces is None else dict(traces)
    if not available:
        print("Fig. 16 skipped: the WMT16 traces (wmt16-1shot, wmt16-5shot) are not in this installation's "
              f"named traces ({', '.join(NAMED_TRACES)}); they come with the WMT16 workload (paged.workloads.wmt16).")
        return None
    labels = [(shot, trace, label) for shot, trace in available.items() for label, _, _ in systems]
    jobs = [dict(systems=[system], model=model, trace=trace, lo=lo, thresholds=(threshold,), num_requests=num_requests,
                 duration_scale=duration_scale, saturated_requests=saturated_requests, seed=seed, rel_tol=rel_tol,
                 workers=1, block_size=block_size, groups={"prefix_caching": caching}, probes=tuple(probes),
                 return_points=True, latency_cap=max(threshold, SEARCH_LATENCY_CAP))
            for trace in available.values() for _, system, caching in systems]  # one job per search
    rows, points = [], []
    for (shot, trace, label), (df, runs) in zip(labels, run_jobs(sustained_rate, jobs, workers=workers,
                                                                 desc="Fig. 16 sustained rates")):
        if len(runs):
            points.append(runs.assign(shot=shot, label=label))
        rows.append({"shot": shot, "trace": trace, "system": label, "sustained_rate": df["sustained_rate"][0],
                     "throughput_rps": df["throughput_rps"][0], "at_throughput": df["at_throughput"][0]})
    out = pd.DataFrame(rows)
    oracle = out[out["system"] == "orca-oracle"].set_index("shot")["sustained_rate"]
    out["over_oracle"] = [r / oracle[s] for s, r in zip(out["shot"], out["sustained_rate"])]
    if return_points:
        return out, pd.concat(points, ignore_index=True) if points else pd.DataFrame()
    return out


#: Fig. 16's systems drawn as whole curves; the others (automatic prefix caching) at their own sustained
#: rate only, the run their search ended with (reused, not run again). Found by its tokens, the cached
#: prefix is the reserved one: the two paged variants differ only in the prefill work of each
#: admission, and a caching run costs this simulator about twice a reserved one (a hash lookup per
#: prompt block at every admission attempt).
FIG16_CURVES = ("paged (reserved prefix)", "orca-oracle")


def shared_prefix_sweep(rates: pd.DataFrame, *, fractions=(0.2, 0.4, 0.6, 0.8, 1.0, 1.2), model: str = "llama-13b",
                        num_requests: int | None = None, duration_scale: float = 1.0, seed: int = 0,
                        workers: int = 2, block_size: int = DEFAULT_BLOCK_SIZE, known: pd.DataFrame | None = None,
                        latency_cap: float | None = CURVE_LATENCY_CAP, curves=FIG16_CURVES) -> pd.DataFrame:
    """Fig. 16's curves: normalized latency of the :data:`FIG16_SYSTEMS` labels in ``curves`` at
    ``fractions`` × the reserved-prefix paged system's sustained rate on each trace of ``rates``
    (:func:`shared_prefix_rates`), and of the other labels at their own sustained rate (one point;
    :data:`FIG16_CURVES`); runs as :func:`sustained_rates`, stopped at ``latency_cap`` as
    :func:`latency_sweep`'s; ``known`` rows (with the system names of :func:`~paged.experiments.serving.simulate_point`) are reused
    and their finished runs join the curves, as :func:`latency_sweep`'s.

    Raises:
        ValueError: ``curves`` names a label that is not one of :data:`FIG16_SYSTEMS`.
    """
    unknown = set(curves) - {label for label, _, _ in FIG16_SYSTEMS}
    if unknown:
        raise ValueError(f"curves must name labels of FIG16_SYSTEMS {[label for label, _, _ in FIG16_SYSTEMS]}, "
                         f"got {sorted(unknown)}")
    points, labels = [], []
    for shot, part in rates.groupby("shot", sort=False):
        own = part.set_index("system")["sustained_rate"]
        top = float(own["paged (reserved prefix)"])
        trace = part["trace"].iloc[0]
        for label, system, caching in FIG16_SYSTEMS:
            at = [top if f == 1 else round(f * top, 4) for f in fractions] if label in curves else [float(own[label])]
            for rate in at:
                points.append(dict(model=model, trace=trace, system=system, rate=rate,
                                   num_requests=num_requests, seed=seed, block_size=block_size,
                                   **({} if num_requests is not None else {"duration_scale": duration_scale}),
                                   prefix_caching=caching, record_sharing=False, latency_cap=latency_cap))
                labels.append((shot, label))
    df = sweep(points, workers=workers, desc="Fig. 16 sweep", known=known)
    df = df.drop(columns=[c for c in ("shot", "label") if c in df.columns])  # reused search rows carry them
    df["shot"] = [s for s, _ in labels]
    df["system"] = [label for _, label in labels]
    searched = None if known is None or "label" not in known else known.assign(system=known["label"])
    return _with_finished(df, searched, ["shot", "system"], [label for label, _, _ in FIG16_SYSTEMS])


def _with_finished(curve: pd.DataFrame, known: pd.DataFrame | None, keys: list[str], systems) -> pd.DataFrame:
    """``curve`` plus the finished finite-rate runs of ``known`` (the searches' points near each system's
    own knee, which the curve's rates, fractions of paged's, may not reach) of the same panels
    (``keys`` without ``system``) and ``systems``, each rate once, sorted by panel, system and rate."""
    if known is None or not len(known) or not set(keys) <= set(known.columns):
        return curve
    finished = known[known["rate"].astype(float).map(math.isfinite)]
    if "stopped_early" in finished:
        finished = finished[~finished["stopped_early"].astype("boolean").fillna(False).astype(bool)]
    panels = curve[keys[:-1]].drop_duplicates()
    finished = finished[finished["system"].isin(list(systems))].merge(panels, on=keys[:-1])
    out = pd.concat([curve, finished[[c for c in curve.columns if c in finished.columns]]], ignore_index=True)
    out = out.drop_duplicates(subset=[*keys, "rate"], keep="first")
    return out.sort_values([*keys, "rate"], kind="stable").reset_index(drop=True)


def length_summary(traces=("alpaca-bare", "sharegpt"), num_requests: int = 1000, seed: int = 0,
                   block_size: int = DEFAULT_BLOCK_SIZE, tokenizer: str = "gpt2") -> pd.DataFrame:
    """What parallel sampling can share, per trace: mean prompt and output lengths (tokens) and the
    share of a request's blocks at its final length that are full prompt blocks (the blocks its
    samples share), ``Σ floor(prompt / bs) ÷ Σ ceil((prompt + output) / bs)``; lengths counted with
    ``tokenizer`` (GPT-2's BPE, as the simulations)."""
    from paged.workloads import get_trace

    rows = []
    for name in traces:
        t = get_trace(name, num_requests, seed=seed, tokenizer=tokenizer)
        shared = sum(r.prompt_len // block_size for r in t)
        total = sum(-(-(r.prompt_len + r.output_len) // block_size) for r in t)
        rows.append({"trace": name, "mean_prompt_len": t.mean_prompt_len, "mean_output_len": t.mean_output_len,
                     "prompt_block_share": shared / total, "source": t.source.splitlines()[0] if t.source else ""})
    return pd.DataFrame(rows)


#: The shared system prompt of :func:`prefix_caching_demo` (written for it).
SYSTEM_PROMPT = ("You are a helpful assistant for a small software company. Answer questions about our products "
                 "clearly and politely. If you do not know the answer, say so and suggest contacting support by "
                 "email. Keep answers short, use plain language, avoid jargon, and never share personal data. "
                 "When a question is about billing, explain the monthly and yearly plans, the free trial of "
                 "thirty days, and how to cancel at any time from the account page. When a question is about "
                 "installation, list the steps in order and mention the system requirements first. ")
_QUESTIONS = ("How do I install the app on Windows?", "Can I cancel my plan at any time?",
              "What does the free trial include?", "How do I reset my password?",
              "Is there a yearly discount?", "Which operating systems are supported?",
              "How do I contact support?", "Can I export my data?")


def prefix_caching_demo(model_path=None, *, num_requests: int = 32, max_tokens: int = 16, rounds: int = 3,
                        block_size: int = DEFAULT_BLOCK_SIZE, num_threads: int | None = 1) -> pd.DataFrame:
    """Requests sharing :data:`SYSTEM_PROMPT` on the real engine, prefix caching off and on (§4.4, APC).

    Each round serves the same ``num_requests`` prompts (system prompt + one of eight questions, all
    arriving at once, greedy, ``max_tokens`` tokens each) on a fresh cache with caching off, then on;
    rounds interleave the two so a busy machine slows both alike. Returns one row per run: ``caching``,
    ``round``, ``seconds`` (wall time), ``prefill_seconds``, ``prefill_tokens`` (tokens the model
    computed in prefills), ``prompt_tokens``, ``cached_tokens`` (prompt tokens found in the cache),
    ``hit_rate`` (cached ÷ prompt tokens), ``same_output`` (every completion equals the caching-off one).
    """
    from paged.engine import LLM, SamplingParams
    from paged.experiments.nb05_engine.engine import DEFAULT_MODEL, torch_threads

    base = LLM(model_path or DEFAULT_MODEL, block_size=block_size)
    prompts = [f"{SYSTEM_PROMPT}\nUser: {_QUESTIONS[i % len(_QUESTIONS)]}\nAssistant:" for i in range(num_requests)]
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    rows, reference = [], None
    with torch_threads(num_threads):
        LLM(base.model, tokenizer=base.tokenizer, block_size=block_size).generate(prompts[:2], params)  # warm-up
        for r in range(rounds):
            for caching in (False, True):
                llm = LLM(base.model, tokenizer=base.tokenizer, block_size=block_size, enable_prefix_caching=caching)
                outs = llm.generate(prompts, params, use_tqdm=False)
                tokens = [o.outputs[0].token_ids for o in outs]
                reference = tokens if reference is None else reference
                prefills = [s for s in llm.last_stats.steps if s.is_prefill]
                prompt_tokens = sum(len(o.prompt_token_ids) for o in outs)
                cached = sum(o.num_cached_tokens for o in outs)
                rows.append({"caching": caching, "round": r, "seconds": llm.last_stats.elapsed,
                             "prefill_seconds": sum(s.seconds for s in prefills),
                             "prefill_tokens": sum(s.num_tokens for s in prefills), "prompt_tokens": prompt_tokens,
                             "cached_tokens": cached, "hit_rate": cached / prompt_tokens,
                             "same_output": tokens == reference})
    return pd.DataFrame(rows)


def demo_summary(demo: pd.DataFrame) -> dict:
    """Medians of :func:`prefix_caching_demo` over rounds: ``hit_rate``, ``prefill_tokens_saved`` (fraction),
    ``time_saved`` and ``prefill_time_saved`` (fractions of the caching-off medians), their spread
    (min–max over rounds of the per-round saving), and ``same_output``."""
    off, on = demo[~demo["caching"]].set_index("round"), demo[demo["caching"]].set_index("round")
    per_round = 1 - on["seconds"] / off["seconds"]
    prefill = 1 - on["prefill_seconds"] / off["prefill_seconds"]
    return {"hit_rate": float(on["hit_rate"].median()),
            "prefill_tokens_saved": float(1 - on["prefill_tokens"].median() / off["prefill_tokens"].median()),
            "time_saved": float(statistics.median(per_round)), "time_saved_range": (float(per_round.min()),
                                                                                   float(per_round.max())),
            "prefill_time_saved": float(statistics.median(prefill)),
            "prefill_time_saved_range": (float(prefill.min()), float(prefill.max())),
            "same_output": bool(demo["same_output"].all())}



def prefix_block_note(prefix_len: int, block_size: int) -> str:
    """Whether a shared prefix of ``prefix_len`` tokens fills whole ``block_size``-token blocks: if not,
    its last block is partly filled and every request that writes its own first token there copies it
    (copy-on-write, §4.4), one block per request."""
    full, rest = divmod(prefix_len, block_size)
    if not rest:
        return f"{prefix_len} tokens are exactly {full} {block_size}-token blocks: no request copies a prefix block"
    return (f"{prefix_len} tokens are {full} full {block_size}-token blocks and {rest} tokens in a partly filled one, "
            f"which every request copies when it writes its first own token (one copy-on-write each)")
