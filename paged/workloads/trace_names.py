"""The names of the committed traces (§6.1, §6.4, §6.5), importable without pandas or numpy.

:func:`paged.workloads.get_trace` accepts each name; the command line lists them in its help, so
they live here, apart from the loaders, to keep ``python -m paged --help`` fast.
"""

from __future__ import annotations

__all__ = ["NAMED_TRACES"]

#: Names accepted by :func:`~paged.workloads.get_trace` -> the stem of their committed files (None: synthetic).
NAMED_TRACES: dict[str, str | None] = {
    "sharegpt": "sharegpt_lengths",  # first-turn pairs (§6.1)
    "sharegpt-chat": "sharegpt_chat_lengths",  # chatbot rounds (§6.5)
    "sharegpt-8k": "sharegpt_sessions_8k_lengths",  # whole conversations, history up to 8K tokens
    "sharegpt-32k": "sharegpt_sessions_32k_lengths",  # the same, up to 32K tokens
    "alpaca": "alpaca_lengths",  # real Alpaca sample, Stanford Alpaca's prompt template (§6.1)
    "alpaca-bare": "alpaca_bare_lengths",  # the same records, instruction (+ input) without the template
    "wmt16-1shot": "wmt16_1shot_lengths",  # WMT16 en->de, 1-shot shared prefix (§6.4)
    "wmt16-5shot": "wmt16_5shot_lengths",  # WMT16 en->de, 5-shot shared prefix (§6.4)
    "alpaca-synthetic": None,  # lognormal lengths with the paper's Alpaca means: alpaca_like
    "sharegpt-fig11": None,  # sensitivity: the sharegpt pairs resampled by length to Fig. 11's means
    "wmt16-1shot-paper-prefix": None,  # sensitivity: wmt16-1shot with the paper's prefix length (80 tokens)
    "wmt16-5shot-paper-prefix": None,  # sensitivity: wmt16-5shot with the paper's prefix length (341 tokens)
}
