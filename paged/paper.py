"""The paper's reported numbers that the notebooks put beside ours.

Source: Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023 (arXiv 2309.06180). These are the paper's figures, typed in for
comparison only; nothing in the package computes with them.
"""

from __future__ import annotations

__all__ = ["FIG2_MEMORY_PERCENT", "SHAREGPT_MEAN_LENS", "ALPACA_MEAN_LENS", "FIG13_BATCHED_REQUESTS",
           "FIG15_SHARING_SAVED_PERCENT", "TABLE1"]

#: Fig. 2: average share of KV cache memory during the §6.2 run (%). vLLM's bar shows token
#: states only; the rest (≈3.7%) is not broken down.
FIG2_MEMORY_PERCENT = {
    "orca-max": {"token_states": 20.4, "reservation": 13.3, "internal": 57.3, "external": 8.9},
    "orca-pow2": {"token_states": 26.8, "reservation": 17.9, "internal": 13.6, "external": 41.6},
    "orca-oracle": {"token_states": 38.2, "reservation": 25.2, "internal": 0.0, "external": 36.6},
    "paged": {"token_states": 96.3, "reservation": None, "internal": None, "external": None},
}

#: Fig. 11: mean (prompt, output) tokens of the datasets.
SHAREGPT_MEAN_LENS = (161.31, 337.99)
ALPACA_MEAN_LENS = (19.31, 58.45)

#: Fig. 13: average batched requests on OPT-13B.
FIG13_BATCHED_REQUESTS = {
    "sharegpt@2": {"orca-max": 7.00, "orca-pow2": 9.81, "orca-oracle": 13.62, "paged": 30.42},
    "alpaca@30": {"orca-max": 7.00, "orca-pow2": 43.24, "orca-oracle": 72.75, "paged": 132.44},
}

#: Fig. 15 (Alpaca): memory saved by sharing (%), by number of outputs / beam width.
FIG15_SHARING_SAVED_PERCENT = {
    "parallel": {2: 6.09, 4: 8.53, 6: 9.79},
    "beam": {2: 37.56, 4: 53.13, 6: 55.16},
}

#: Table 1: servers. KV cache memory in GB, maximum KV slots in tokens.
TABLE1 = {
    "opt-13b": {"gpus": "1×A100-40GB", "kv_cache_gb": 12, "max_slots": 15_700},
    "opt-66b": {"gpus": "4×A100-40GB", "kv_cache_gb": 21, "max_slots": 9_700},
    "opt-175b": {"gpus": "8×A100-80GB", "kv_cache_gb": 264, "max_slots": 60_100},
}
