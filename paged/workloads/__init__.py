"""Workloads of the paper's evaluation (§6.1, §6.4, §6.5): traces of (prompt, output) lengths.

The bottom layer of the package, with :mod:`paged.core`; it imports nothing else of ``paged``.

* :mod:`~paged.workloads.trace`: :class:`Request` (with its shared-prefix length), :class:`Trace`;
* :mod:`~paged.workloads.trace_csv`: :func:`load_trace` (the length CSV format);
* :mod:`~paged.workloads.arrivals`: :func:`poisson_arrivals`;
* :mod:`~paged.workloads.json_records`: a JSON list read record by record (a cut file keeps its records);
* :mod:`~paged.workloads.sharegpt`: real ShareGPT conversations (§6.1) and the chatbot rounds (§6.5);
* :mod:`~paged.workloads.conversation_parts`: ShareGPT V3's parts joined into whole conversations;
* :mod:`~paged.workloads.sharegpt_sessions`: whole conversations with long histories (8K / 32K);
* :mod:`~paged.workloads.alpaca`: real Stanford Alpaca instructions (§6.1) and their prompt formats;
* :mod:`~paged.workloads.wmt16`: WMT16 en->de translation with a shared few-shot prefix (§6.4);
* :mod:`~paged.workloads.filters`: the length filters every real trace goes through;
* :mod:`~paged.workloads.tokenizers`: offline token counts (GPT-2's BPE for OPT, cl100k);
* :mod:`~paged.workloads.loader`: loading + tokenizing a dataset file through Hugging Face ``datasets``;
* :mod:`~paged.workloads.cache`: the fingerprinted trace cache behind it;
* :mod:`~paged.workloads.synthetic`: Alpaca-like synthetic lengths (the paper's means only);
* :mod:`~paged.workloads.reweight`: a real trace resampled by length to given means (a sensitivity input);
* :mod:`~paged.workloads.named`: :func:`get_trace` by name or path, the committed traces;
* :mod:`~paged.workloads.build`: rebuilds the committed traces (``python -m paged traces``).
"""

from __future__ import annotations

from importlib import import_module

#: Each public name -> the module that defines it, imported on first use (most pull in pandas), so
#: that importing one light submodule (:mod:`~paged.workloads.trace_names`) stays cheap.
_LAZY = {
    **dict.fromkeys(("AlpacaFormatError", "AlpacaLoadReport", "read_alpaca_records"), "paged.workloads.alpaca"),
    **dict.fromkeys(("MIN_RATE", "poisson_arrivals"), "paged.workloads.arrivals"),
    **dict.fromkeys(("load_alpaca", "load_json_trace", "load_sharegpt", "load_sharegpt_chat"), "paged.workloads.loader"),
    **dict.fromkeys(("data_path", "get_trace", "trace_file"), "paged.workloads.named"),
    "NAMED_TRACES": "paged.workloads.trace_names",
    **dict.fromkeys(("ShareGPTFormatError", "ShareGPTLoadReport", "ShareGPTTruncatedWarning", "default_sharegpt_path",
                     "read_sharegpt_records"), "paged.workloads.sharegpt"),
    **dict.fromkeys(("ALPACA_MEAN_OUTPUT_LEN", "ALPACA_MEAN_PROMPT_LEN", "alpaca_like"), "paged.workloads.synthetic"),
    **dict.fromkeys(("TOKENIZERS", "count_tokens"), "paged.workloads.tokenizers"),
    **dict.fromkeys(("Request", "Trace"), "paged.workloads.trace"),
    **dict.fromkeys(("TraceFormatError", "load_trace"), "paged.workloads.trace_csv"),
    **dict.fromkeys(("WMT16FormatError", "wmt16_examples", "wmt16_prefix"), "paged.workloads.wmt16"),
}

__all__ = ["MIN_RATE", "NAMED_TRACES", "ALPACA_MEAN_OUTPUT_LEN", "ALPACA_MEAN_PROMPT_LEN", "AlpacaFormatError",
           "AlpacaLoadReport", "Request", "ShareGPTFormatError", "ShareGPTLoadReport", "ShareGPTTruncatedWarning",
           "TOKENIZERS", "Trace", "TraceFormatError", "WMT16FormatError", "alpaca_like", "count_tokens", "data_path",
           "default_sharegpt_path", "get_trace", "load_alpaca", "load_json_trace", "load_sharegpt",
           "load_sharegpt_chat", "load_trace", "poisson_arrivals", "read_alpaca_records", "read_sharegpt_records",
           "trace_file", "wmt16_examples", "wmt16_prefix"]


def __getattr__(name: str):
    """Import a public name (:data:`_LAZY`) on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'paged.workloads' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
