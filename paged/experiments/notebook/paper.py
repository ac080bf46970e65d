"""Every number of the paper that a notebook puts beside ours, in one place.

Source: Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023 (arXiv 2309.06180); section, figure and table numbers are the paper's.
These are the paper's figures, typed in for comparison only: nothing in the package computes with
them, and no constant of a model is tuned toward them.
"""

from __future__ import annotations

__all__ = ["FIG2_MEMORY_PERCENT", "SHAREGPT_MEAN_LENS", "ALPACA_MEAN_LENS", "FIG11_MEAN_LENS", "FIG12_SUSTAINED_RATIOS",
           "FIG12_ALPACA_RATIOS", "FIG12_RATE_AXES", "FIG13_BATCHED_REQUESTS", "FIG14_GAIN_OVER_ORACLE",
           "FIG15_SHARING_SAVED_PERCENT",
           "SHAREGPT_SHARING_RANGES", "FIG16_SHARED_PREFIX", "FIG17_CHATBOT_RATIO", "FIG18A_PAGED_OVER_CONTIGUOUS",
           "TABLE1", "LAUNCH_BLOG", "TEXT", "FIGURE_READINGS", "FIGURE_READING_METHOD"]

#: Fig. 2: average share of KV cache memory during the §6.2 run (%). vLLM's bar shows token
#: states only; the rest (≈3.7%) is not broken down.
FIG2_MEMORY_PERCENT = {
    "orca-max": {"token_states": 20.4, "reservation": 13.3, "internal": 57.3, "external": 8.9},
    "orca-pow2": {"token_states": 26.8, "reservation": 17.9, "internal": 13.6, "external": 41.6},
    "orca-oracle": {"token_states": 38.2, "reservation": 25.2, "internal": 0.0, "external": 36.6},
    "paged": {"token_states": 96.3, "reservation": None, "internal": None, "external": None},
}

#: Fig. 11: mean (prompt, output) tokens of the datasets (OPT's tokenizer).
SHAREGPT_MEAN_LENS = (161.31, 337.99)
ALPACA_MEAN_LENS = (19.31, 58.45)
#: Fig. 11 by trace name; the paper's filters and Alpaca prompt format are not stated.
FIG11_MEAN_LENS = {"sharegpt": SHAREGPT_MEAN_LENS, "alpaca": ALPACA_MEAN_LENS}

#: §6.2, Fig. 12 (ShareGPT): sustained request rate of paged ÷ each baseline, as the text states it.
FIG12_SUSTAINED_RATIOS = {"orca-oracle": "1.7–2.7×", "orca-max": "2.7–8×", "fastertransformer": "up to 22×",
                          "orca-pow2": "not stated"}
#: §6.2, Fig. 12 (Alpaca): "a similar trend", a smaller gap; the one ratio stated: (model, system) -> ratio.
FIG12_ALPACA_RATIOS = {("opt-13b", "orca-oracle"): "1.3×"}
#: Fig. 12: the rate axes (req/s) of each panel, (trace, model) -> (low, high).
FIG12_RATE_AXES = {
    ("sharegpt", "opt-13b"): (0.0, 2.0), ("sharegpt", "opt-66b"): (0.0, 1.0), ("sharegpt", "opt-175b"): (0.0, 2.5),
    ("alpaca", "opt-13b"): (0.0, 30.0), ("alpaca", "opt-66b"): (0.0, 20.0), ("alpaca", "opt-175b"): (0.0, 20.0),
}

#: Fig. 13: average batched requests on OPT-13B.
FIG13_BATCHED_REQUESTS = {
    "sharegpt@2": {"orca-max": 7.00, "orca-pow2": 9.81, "orca-oracle": 13.62, "paged": 30.42},
    "alpaca@30": {"orca-max": 7.00, "orca-pow2": 43.24, "orca-oracle": 72.75, "paged": 132.44},
}

#: §6.3, Fig. 14 (OPT-13B, Alpaca): paged's throughput gain over Orca (Oracle), from one sample to beam width 6.
FIG14_GAIN_OVER_ORACLE = {"basic sampling": 1.3, "beam width 6": 2.3}

#: Fig. 15 (Alpaca): memory saved by sharing (%), by number of outputs / beam width.
FIG15_SHARING_SAVED_PERCENT = {
    "parallel": {2: 6.09, 4: 8.53, 6: 9.79},
    "beam": {2: 37.56, 4: 53.13, 6: 55.16},
}
#: Fig. 15 (ShareGPT): memory saved by sharing (%), the range over widths 2-6 (per-width values not stated).
SHAREGPT_SHARING_RANGES = {"parallel": (16.2, 30.5), "beam": (44.3, 66.3)}

#: §6.4, Fig. 16 (LLaMA-13B, WMT16 en→de): prefix lengths (tokens) and paged's throughput ÷ Orca (Oracle).
FIG16_SHARED_PREFIX = {"1-shot": {"prefix_tokens": 80, "gain_over_oracle": 1.67},
                       "5-shot": {"prefix_tokens": 341, "gain_over_oracle": 3.58}}

#: §6.5, Fig. 17 (chatbot, OPT-13B): paged sustains this many times the rate of every Orca variant.
FIG17_CHATBOT_RATIO = 2.0

#: §7.1, Fig. 18a: paged kernel latency ÷ FasterTransformer's contiguous kernel (context 64–256, batch 8, 32).
FIG18A_PAGED_OVER_CONTIGUOUS = (1.20, 1.26)

#: Table 1: servers. KV cache memory in GB, maximum KV slots in tokens.
TABLE1 = {
    "opt-13b": {"gpus": "1×A100-40GB", "kv_cache_gb": 12, "max_slots": 15_700},
    "opt-66b": {"gpus": "4×A100-40GB", "kv_cache_gb": 21, "max_slots": 9_700},
    "opt-175b": {"gpus": "8×A100-80GB", "kv_cache_gb": 264, "max_slots": 60_100},
}

#: The vLLM launch blog (June 2023): throughput over Hugging Face Transformers and TGI.
LAUNCH_BLOG = {"over_hf_transformers": "up to 24×", "over_hf_tgi": "up to 3.5×"}

#: The paper's own sentences behind the claims compared here, quoted (section given). Where a sentence
#: and the paper's figure disagree, :data:`FIGURE_READINGS` says what the figure shows.
TEXT = {
    "fig12": "§6.2: “vLLM can sustain 1.7×–2.7× higher request rates compared to Orca (Oracle) and 2.7×–8× "
             "compared to Orca (Max), while maintaining similar latencies”; “up to 22× higher request rates” than "
             "FasterTransformer",
    "fig12_alpaca": "§6.2: Alpaca “follows a similar trend”, except on OPT-175B, “where vLLM's advantage over Orca "
                    "(Oracle) and Orca (Pow2) is less pronounced”",
    "fig13": "§6.2: for OPT-13B vLLM “processes 2.2× more requests at the same time than Orca (Oracle) and 4.3× more "
             "requests than Orca (Max)”",
    "fig14": "§6.3: the improvement over Orca (Oracle) “goes from 1.3× in basic sampling to 2.3× in beam search with a "
             "width of 6”",
    "fig16": "§6.4: “1.67× higher throughput than Orca (Oracle) when the one-shot prefix is shared”; 3.58× with five "
             "examples",
    "fig17": "§6.5: “vLLM can sustain 2× higher request rates compared to the three Orca baselines”",
    "fig19": "§7.3: “recomputation overhead is never higher than 20% of swapping's latency. For medium block sizes from "
             "16 to 64, the two methods exhibit comparable end-to-end performance”",
}
#: How :data:`FIGURE_READINGS` were read: by eye, off the published curves, as the rate at which each system's
#: normalized latency turns upward, by an outside review of this reproduction (not digitised here; a
#: reading is good to about ±10 %). The paper prints no table of these rates.
FIGURE_READING_METHOD = "read by eye off its curves (where each turns up) by an outside review, ±10 %"
#: What the paper's figures show where its text says otherwise: claim -> reading of the figure (paged ÷ baseline).
FIGURE_READINGS = {
    ("fig12", "opt-175b", "orca-oracle"): "≈1.33×",
    ("fig17", "opt-13b", "orca-*"): "1.25–1.45×",
}
