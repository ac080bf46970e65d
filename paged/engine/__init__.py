"""The real-model executor (§4, §5): a transformers model served on the paged KV cache.

* :mod:`~paged.engine.llm`: :class:`LLM`, vLLM's user API (``generate``), and its outputs;
* :mod:`~paged.engine.executor`: the engine's step (one iteration on the model: move blocks, run, sample,
  fork / free), run by the serving loop the simulator also uses (:mod:`paged.core.serving_loop`);
* :mod:`~paged.engine.model_runner`: the model's forward with the paged attention function;
* :mod:`~paged.engine.kv_cache`: :class:`PagedKVCache`, the K/V tensors, block copies and swaps;
* :mod:`~paged.engine.sampling`: :class:`SamplingParams`, greedy and temperature / top-p sampling;
* :mod:`~paged.engine.beam_search`: one beam-search step (which candidates fork, which are freed).

Importing this package imports torch (and transformers).
"""

from paged.engine.llm import LLM, CompletionOutput, RequestOutput
from paged.engine.sampling import SamplingParams

__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams"]
