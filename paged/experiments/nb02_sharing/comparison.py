"""Notebook 02's "paper vs this run" table (§6.3, §6.4): every figure's number beside the paper's.

One row per number the paper states for Fig. 14 (throughput gain over Orca (Oracle) per decoding
setting), Fig. 15 (KV blocks saved by sharing, Alpaca and ShareGPT), Fig. 16 (shared prefix, WMT16),
and the real engine's sharing figures (its Fig. 15 cross-check, automatic prefix caching). Each row
gives the figure, the claim, the paper's number (:mod:`paged.experiments.notebook.paper`), this
run's (the paper column quotes its sentence), and the measured cause of the difference, in words built
from this run's own numbers: what bounds the decode steps of paged and Orca (Oracle) at their sustained
rates (the sequence cap, compute-bound steps), their batches and preemptions, whether a search ended at
the saturated throughput, the run lengths, the prompt's share of each request's blocks, the prefix
lengths and whether they fill whole blocks; sensitivities are labelled as the assumptions they are.
"""

from __future__ import annotations

import pandas as pd

from paged.block.allocator import DEFAULT_BLOCK_SIZE
from paged.experiments.nb02_sharing.decode_bounds import MAX_NUM_SEQS
from paged.experiments.nb02_sharing.sharing import prefix_block_note
from paged.experiments.notebook.paper import (ALPACA_MEAN_LENS, FIG14_GAIN_OVER_ORACLE, FIG15_SHARING_SAVED_PERCENT,
                                              FIG16_SHARED_PREFIX, SHAREGPT_MEAN_LENS, SHAREGPT_SHARING_RANGES, TEXT)

__all__ = ["paper_comparison", "COLUMNS"]

#: The table's columns.
COLUMNS = ["figure", "claim", "paper", "this run", "measured cause of the difference"]

_LABELS = {"parallel": "parallel sampling, n = {}", "beam": "beam search, width {}", "basic": "one sample"}


def _runs(runs: pd.DataFrame | None, rates: pd.DataFrame | None, decoding: str, width: int) -> str:
    """Paged and Orca (Oracle) each at its own sustained rate (the run of ``runs``, the Fig. 14 curves
    and searches, at that rate, else the nearest finished run below it): the mean batches, the
    preemptions and paged's run length (arrival seconds, converged)."""
    if runs is None or not len(runs) or rates is None:
        return ""
    part = runs[(runs["decoding"] == decoding) & (runs["width"] == width)]
    own = rates[(rates["decoding"] == decoding) & (rates["width"] == width)].set_index("system")["sustained_rate"]
    at = {}
    for system in ("paged", "orca-oracle"):
        rows = part[(part["system"] == system) & (part["rate"] <= own.get(system, 0.0))]
        if "stopped_early" in rows:
            rows = rows[~rows["stopped_early"].astype("boolean").fillna(False).astype(bool)]
        if not len(rows):
            return ""
        at[system] = rows.loc[rows["rate"].idxmax()]
    paged, oracle = at["paged"], at["orca-oracle"]
    text = (f"at their sustained rates (paged {paged['rate']:.3g}, Oracle {oracle['rate']:.3g} req/s): mean batch "
            f"{paged['avg_batched_requests']:.1f} vs {oracle['avg_batched_requests']:.1f} requests, preempted "
            f"{paged['num_preemptions']:.0f} vs {oracle['num_preemptions']:.0f} times")
    if "arrival_seconds" in paged and "converged" in paged:
        text += (f"; runs of {paged['arrival_seconds']:.0f} s of arrivals (paged converged: "
                 f"{'yes' if bool(paged['converged']) else 'no'})")
    return text


def _peak_note(rates: pd.DataFrame | None, decoding: str, width: int) -> str:
    """Which searches ended at their system's saturated throughput (then the ratio is peak ÷ peak)."""
    if rates is None or "at_throughput" not in rates:
        return ""
    part = rates[(rates["decoding"] == decoding) & (rates["width"] == width)].set_index("system")
    ended = [s for s in ("paged", "orca-oracle") if s in part.index and bool(part.loc[s, "at_throughput"])]
    if not ended:
        return ""
    which = "both searches" if len(ended) == 2 else f"the {ended[0]} search"
    return f"{which} ended at the saturated throughput (latency under the threshold up to the peak)"


def _mechanism(bounds: pd.DataFrame | None, decoding: str, width: int) -> str:
    """What bounds the decode steps of paged and Orca (Oracle) at their sustained rates (measured,
    :func:`paged.experiments.nb02_sharing.decode_bounds.decode_bounds`)."""
    if bounds is None or not len(bounds):
        return ""
    part = bounds[(bounds["decoding"] == decoding) & (bounds["width"] == width)].set_index("system")
    if not {"paged", "orca-oracle"} <= set(part.index):
        return ""
    p, o = part.loc["paged"], part.loc["orca-oracle"]
    text = (f"measured mechanism: at their sustained rates paged decodes {p['decode_batch']:.0f} sequences per step "
            f"(at most {p['max_decode_batch']:.0f}; the scheduler caps {MAX_NUM_SEQS}), {p['ms_per_decode']:.0f} ms per "
            f"step, {p['compute_bound_share']:.0%} of its time compute bound; Orca (Oracle) {o['decode_batch']:.0f} "
            f"sequences, {o['ms_per_decode']:.0f} ms, {o['compute_bound_share']:.0%}")
    if p["max_decode_batch"] >= 0.9 * MAX_NUM_SEQS and p["compute_bound_share"] > 0.5:
        text += (": paged's batch sits at the sequence cap and its steps are compute bound, so more memory would "
                 "not raise its rate; each of its steps serving "
                 f"{p['decode_batch'] / o['decode_batch']:.2f}× the sequences takes {p['ms_per_decode'] / o['ms_per_decode']:.2f}× as long")
    return text


def _sharing_note(saving: pd.DataFrame, trace: str | None, decoding: str, width: int) -> str:
    if trace is None or decoding == "basic" or not len(saving):
        return ""
    row = saving[(saving["trace"] == trace) & (saving["decoding"] == decoding) & (saving["width"] == width)]
    return f"sharing saves {row['saving_percent'].iloc[0]:.1f}% of paged's blocks here (Fig. 15)" if len(row) else ""


def _prompt_share(mean_prompt: float, mean_output: float) -> float:
    return mean_prompt / (mean_prompt + mean_output)


def _fig15_cause(trace: str, decoding: str, lengths: pd.DataFrame | None, engine: pd.DataFrame | None) -> str:
    """Parallel samples share only the prompt: the saving follows the prompt's share of the blocks,
    measured on this trace and set beside the share the paper's Fig. 11 means give. Beams share
    what the replayed trees share: the real engine's own beams are the cross-check."""
    if decoding == "parallel":
        paper_means = ALPACA_MEAN_LENS if trace.startswith("alpaca") else SHAREGPT_MEAN_LENS
        paper_share = _prompt_share(*paper_means)
        if lengths is None or trace not in set(lengths["trace"]):
            return (f"samples share the prompt only; at the paper's Fig. 11 means the prompt is "
                    f"{100 * paper_share:.1f}% of a request's tokens")
        r = lengths.set_index("trace").loc[trace]
        ours = _prompt_share(r["mean_prompt_len"], r["mean_output_len"])
        direction = "less" if ours < paper_share else "more"
        return (f"samples share the prompt only: here mean prompt {r['mean_prompt_len']:.1f} / output "
                f"{r['mean_output_len']:.1f} tokens, prompt = {100 * ours:.1f}% of the tokens and full prompt blocks "
                f"{100 * r['prompt_block_share']:.1f}% of the blocks; the paper's means {paper_means[0]} / "
                f"{paper_means[1]} give {100 * paper_share:.1f}% of the tokens, so {direction} to share here")
    text = ("candidates share what the replayed searches share (parent pointers recorded from the shipped tiny "
            "model, data/beam_traces.json); OPT-13B's own searches are not available")
    if engine is not None and len(engine):
        e = engine[engine["decoding"] == "beam"]
        if len(e):
            text += ("; the real engine's own beams save " +
                     ", ".join(f"{w}: {p:.1f}%" for w, p in zip(e["width"], e["saving_percent"])))
    return text


def _fig15_row(trace: str, decoding: str, part: pd.DataFrame, lengths, engine) -> dict:
    ours = ", ".join(f"{w}: {p:.1f}%" for w, p in zip(part["width"], part["saving_percent"]))
    key = "parallel" if decoding == "parallel" else "beam"
    if trace.startswith("alpaca"):
        paper = ", ".join(f"{w}: {p}%" for w, p in FIG15_SHARING_SAVED_PERCENT[key].items())
    else:
        lo, hi = SHAREGPT_SHARING_RANGES[key]
        paper = f"{lo}–{hi}% over widths 2–6"
    kind = "parallel sampling (n)" if decoding == "parallel" else "beam search (width)"
    return {"figure": "Fig. 15", "claim": f"KV blocks saved by sharing, {kind}, {trace}", "paper": paper,
            "this run": ours, "measured cause of the difference": _fig15_cause(trace, decoding, lengths, engine)}


def _prefix_lens(trace: str) -> tuple[int, float]:
    """(prefix tokens, mean prompt tokens) of a shared-prefix trace, GPT-2's counts (the simulations')."""
    from paged.workloads import get_trace

    t = get_trace(trace, tokenizer="gpt2")
    return int(t[0].prefix_len), float(t.mean_prompt_len)


def _fig16_rows(prefix_rates: pd.DataFrame | None, prefix_lens: dict | None, sensitivity: pd.DataFrame | None = None,
                block_size: int = DEFAULT_BLOCK_SIZE) -> list[dict]:
    if prefix_rates is None:
        return [{"figure": "Fig. 16", "claim": f"paged ÷ Orca (Oracle) throughput, WMT16 {shot}",
                 "paper": f"{p['gain_over_oracle']}× (prefix {p['prefix_tokens']} tokens)",
                 "this run": "not run: no wmt16 traces", "measured cause of the difference": "needs the WMT16 workload"}
                for shot, p in FIG16_SHARED_PREFIX.items()]
    rows = []
    for (shot, system), part in prefix_rates.groupby(["shot", "system"], sort=False):
        if system == "orca-oracle":
            continue
        paper = FIG16_SHARED_PREFIX[shot]
        r = part.iloc[0]
        oracle = prefix_rates[(prefix_rates["shot"] == shot) & (prefix_rates["system"] == "orca-oracle")].iloc[0]
        cause = []
        lens = (prefix_lens or {}).get(r["trace"])
        if lens is not None:
            prefix, prompt = lens
            cause.append(f"prefix {prefix} tokens here (GPT-2's BPE; LLaMA's tokenizer is not available offline) vs "
                         f"{paper['prefix_tokens']}, {100 * prefix / prompt:.0f}% of the mean prompt ({prompt:.1f} tokens); "
                         f"here {prefix_block_note(prefix, block_size)}; the paper's "
                         f"{prefix_block_note(paper['prefix_tokens'], block_size)}")
        if sensitivity is not None and len(sensitivity):
            alt = sensitivity[(sensitivity["shot"] == shot) & (sensitivity["system"] == system)]
            if len(alt):
                cause.append(f"sensitivity, an assumption about the paper's prompts: with its {paper['prefix_tokens']}-token "
                             f"prefix and our requests' own tokens, {system} ÷ Oracle {alt['over_oracle'].iloc[0]:.2f}×")
        cause.append(f"{system} {r['sustained_rate']:.3g} vs Oracle {oracle['sustained_rate']:.3g} req/s")
        ended = [n for n, row in (("paged", r), ("Oracle", oracle)) if bool(row.get("at_throughput", False))]
        if ended:
            cause.append(f"{' and '.join(ended)} ended at the saturated throughput (the ratio is peak ÷ peak)")
        cause.append("LLaMA-13B's shapes on OPT-13B's server (the paper does not state its server)")
        rows.append({"figure": "Fig. 16", "claim": f"{system} ÷ Orca (Oracle) sustained rate, WMT16 {shot}",
                     "paper": f"{paper['gain_over_oracle']}× (prefix {paper['prefix_tokens']} tokens) — {TEXT['fig16']}",
                     "this run": f"{r['over_oracle']:.2f}×", "measured cause of the difference": "; ".join(cause)})
    return rows


def paper_comparison(gains: pd.DataFrame, saving: pd.DataFrame, *, engine: pd.DataFrame | None = None,
                     prefix_rates: pd.DataFrame | None = None, demo: dict | None = None,
                     sweep: pd.DataFrame | None = None, rates: pd.DataFrame | None = None,
                     lengths: pd.DataFrame | None = None, trace: str | None = None,
                     prefix_lens: dict | None = None, bounds: pd.DataFrame | None = None,
                     prefix_sensitivity: pd.DataFrame | None = None, block_size: int = DEFAULT_BLOCK_SIZE) -> pd.DataFrame:
    """Every number of §6.3–6.4 the paper states beside this run's, with the measured cause.

    Args:
        gains: :func:`paged.experiments.nb02_sharing.sharing.improvement_over_oracle` rows (Fig. 14).
        saving: :func:`paged.experiments.nb02_sharing.sharing.memory_saving` rows (Fig. 15).
        engine: :func:`paged.experiments.nb02_sharing.sharing.engine_memory_saving` rows, or None.
        prefix_rates: :func:`paged.experiments.nb02_sharing.sharing.shared_prefix_rates` rows, or None
            (the Fig. 16 rows then say they were not run).
        demo: :func:`paged.experiments.nb02_sharing.sharing.demo_summary`, or None.
        sweep: Fig. 14's runs (:func:`paged.experiments.nb02_sharing.sharing.latency_sweep` rows and the
            searches' points): the batches, preemptions and run lengths of paged and Orca (Oracle),
            each at its own sustained rate, go into the Fig. 14 causes.
        rates: :func:`paged.experiments.nb02_sharing.sharing.sustained_rates` rows (``at_throughput``).
        lengths: :func:`paged.experiments.nb02_sharing.sharing.length_summary` rows (prompt shares).
        trace: the Fig. 14 trace (its Fig. 15 saving is quoted in the Fig. 14 causes).
        prefix_lens: Fig. 16 trace name -> (prefix tokens, mean prompt tokens) of the trace run
            (default: read from each trace of ``prefix_rates`` with GPT-2's counts, as the simulations).
        bounds: :func:`paged.experiments.nb02_sharing.decode_bounds.decode_bounds` rows: the measured
            mechanism of the Fig. 14 settings they cover.
        prefix_sensitivity: :func:`paged.experiments.nb02_sharing.sharing.shared_prefix_rates` rows on
            :data:`~paged.experiments.nb02_sharing.sharing.FIG16_PAPER_PREFIX_TRACES`: Fig. 16 with the paper's
            prefix lengths (an assumption about its prompts).
        block_size: the paged block size (tokens), for whether a prefix fills whole blocks.

    Returns:
        A DataFrame with :data:`COLUMNS`, one row per number (text cells).
    """
    rows = []
    by_setting = gains.set_index(["decoding", "width"])
    paged_rate = by_setting["paged"] if "paged" in gains else None
    oracle_rate = by_setting["orca-oracle"] if "orca-oracle" in gains else None
    for r in gains.itertuples():
        d, w, v = r.decoding, r.width, r.improvement
        if d == "basic":
            paper = f"{FIG14_GAIN_OVER_ORACLE['basic sampling']}× — {TEXT['fig14']}"
        elif (d, w) == ("beam", 6):
            paper = f"{FIG14_GAIN_OVER_ORACLE['beam width 6']}× — {TEXT['fig14']}"
        else:
            paper = (f"not stated (grows from {FIG14_GAIN_OVER_ORACLE['basic sampling']}× to "
                     f"{FIG14_GAIN_OVER_ORACLE['beam width 6']}×)")
        ours = f"{v:.2f}×"
        if paged_rate is not None and oracle_rate is not None:
            ours += f" ({float(paged_rate[d, w]):.3g} vs {float(oracle_rate[d, w]):.3g} req/s)"
        parts = [_mechanism(bounds, d, w), _runs(sweep, rates, d, w),
                 _peak_note(rates, d, w), _sharing_note(saving, trace, d, w)]
        rows.append({"figure": "Fig. 14", "claim": f"paged ÷ Orca (Oracle) sustained rate, {_LABELS[d].format(w)}",
                     "paper": paper, "this run": ours,
                     "measured cause of the difference": "; ".join(p for p in parts if p)})
    for (tr, d), part in saving.groupby(["trace", "decoding"], sort=False):
        rows.append(_fig15_row(tr, d, part, lengths, engine))
    if engine is not None and len(engine):
        for d, part in engine.groupby("decoding", sort=False):
            sim = saving[(saving["decoding"] == d) & (saving["trace"] == part["trace"].iloc[0])]
            sim_text = (", ".join(f"{w}: {p:.1f}%" for w, p in zip(sim["width"], sim["saving_percent"]))
                        if len(sim) else "not run on this trace")
            steps = int(part["decode_steps"].sum()) if "decode_steps" in part else None
            rows.append({"figure": "Fig. 15 (real engine)",
                         "claim": f"KV blocks saved by sharing on the real engine, {d}, {part['trace'].iloc[0]} lengths",
                         "paper": "(the paper's Fig. 15 is measured on its engine; numbers above)",
                         "this run": ", ".join(f"{w}: {p:.1f}%" for w, p in zip(part["width"], part["saving_percent"])),
                         "measured cause of the difference":
                             f"the simulator on the same trace: {sim_text}; the engine serves a few requests at "
                             f"{len(part)} width{'s' if len(part) > 1 else ''}"
                             + (f" over {steps} decode steps" if steps is not None else "")
                             + (", with its own beams" if d == "beam" else ", prompt blocks shared as in the simulator")})
    if prefix_lens is None and prefix_rates is not None:
        prefix_lens = {t: _prefix_lens(t) for t in prefix_rates["trace"].unique()}
    rows += _fig16_rows(prefix_rates, prefix_lens, prefix_sensitivity, block_size)
    if demo is not None:
        wall, prefill = demo["time_saved"], demo["prefill_time_saved"]
        cause = (f"caching shortens only the prefill; wall time −{wall:.0%} against prefill time −{prefill:.0%}: "
                 "the decode steps, which caching does not touch, take the rest" if round(100 * wall) < round(100 * prefill) else
                 f"wall time −{wall:.0%}, prefill time −{prefill:.0%}")
        rows.append({"figure": "prefix caching (real engine)", "claim": "automatic prefix caching, shared system prompt",
                     "paper": "no number (the paper reserves predefined prefixes, §4.4; automatic caching is later vLLM)",
                     "this run": (f"hit rate {demo['hit_rate']:.0%}, prefill tokens −{demo['prefill_tokens_saved']:.0%}, "
                                  f"prefill time −{prefill:.0%}, wall time −{wall:.0%}"),
                     "measured cause of the difference": cause})
    return pd.DataFrame(rows, columns=COLUMNS)
