"""Workloads of the paper's evaluation (§6.1, §6.5): traces of (prompt, output) lengths.

The bottom layer of the package, with :mod:`paged.core`; it imports nothing else of ``paged``.

* :mod:`~paged.workloads.trace`: :class:`Request`, :class:`Trace`, :func:`load_trace` (length CSVs);
* :mod:`~paged.workloads.arrivals`: :func:`poisson_arrivals`;
* :mod:`~paged.workloads.sharegpt`: real ShareGPT conversations (§6.1) and the chatbot rounds (§6.5);
* :mod:`~paged.workloads.tokenizers`: offline token counts;
* :mod:`~paged.workloads.synthetic`: Alpaca-like synthetic lengths (the paper's means only);
* :mod:`~paged.workloads.named`: :func:`get_trace` by name or path, the committed traces;
* :mod:`~paged.workloads.build`: rebuilds the committed traces (``python -m paged traces``).
"""

from paged.workloads.arrivals import MIN_RATE, poisson_arrivals
from paged.workloads.named import NAMED_TRACES, data_path, get_trace
from paged.workloads.sharegpt import (ShareGPTFormatError, ShareGPTLoadReport, ShareGPTTruncatedWarning,
                                      default_sharegpt_path, load_sharegpt, load_sharegpt_chat,
                                      read_sharegpt_records)
from paged.workloads.synthetic import ALPACA_MEAN_OUTPUT_LEN, ALPACA_MEAN_PROMPT_LEN, alpaca_like
from paged.workloads.tokenizers import count_tokens
from paged.workloads.trace import Request, Trace, TraceFormatError, load_trace

__all__ = ["MIN_RATE", "NAMED_TRACES", "ALPACA_MEAN_OUTPUT_LEN", "ALPACA_MEAN_PROMPT_LEN", "Request",
           "ShareGPTFormatError", "ShareGPTLoadReport", "ShareGPTTruncatedWarning", "Trace", "TraceFormatError",
           "alpaca_like", "count_tokens", "data_path", "default_sharegpt_path", "get_trace", "load_sharegpt",
           "load_sharegpt_chat", "load_trace", "poisson_arrivals", "read_sharegpt_records"]
