"""The length filters every real trace goes through (vLLM's benchmark defaults; §6.1 states none).

A request is dropped when its prompt or output is shorter than 4 tokens, its prompt longer than
1024, or prompt + output longer than 2048 (the models' context). Each dropped request is counted
under the FIRST filter it fails, in that order.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DEFAULT_LIMITS", "FILTER_ORDER", "length_filter"]

#: The defaults (tokens); None disables a maximum.
DEFAULT_LIMITS = {"min_prompt_len": 4, "min_output_len": 4, "max_prompt_len": 1024, "max_total_len": 2048}
#: Filter names, in the order a dropped request is counted.
FILTER_ORDER = ("prompt_too_short", "output_too_short", "prompt_too_long", "total_too_long")


def length_filter(prompt_lens: np.ndarray, output_lens: np.ndarray, limits: dict[str, int | None]
                  ) -> tuple[np.ndarray, dict[str, int]]:
    """Which requests pass the filters, and how many each filter dropped.

    Args:
        prompt_lens, output_lens: int64 arrays of shape ``[n]`` (tokens).
        limits: the four keys of :data:`DEFAULT_LIMITS` (tokens; a None maximum is no limit).

    Returns:
        ``(keep, dropped)``: a bool array ``[n]``, and filter name -> count (every name of
        :data:`FILTER_ORDER`, zeros included). O(n).
    """
    p, o = np.asarray(prompt_lens, dtype=np.int64), np.asarray(output_lens, dtype=np.int64)
    big = np.iinfo(np.int64).max
    lim = {k: big if limits[k] is None else limits[k] for k in DEFAULT_LIMITS}
    fails = (p < lim["min_prompt_len"], o < lim["min_output_len"], p > lim["max_prompt_len"],
             p + o > lim["max_total_len"])
    keep = np.ones(len(p), dtype=bool)
    dropped = {}
    for label, bad in zip(FILTER_ORDER, fails):
        dropped[label] = int((bad & keep).sum())
        keep &= ~bad
    return keep, dropped
