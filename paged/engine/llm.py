"""The engine: a real transformers model served with the paged KV cache (paper §4, §5).

``LLM(model).generate(prompts, SamplingParams(...))`` runs the spine's iteration-level scheduler
(:class:`paged.core.scheduler.Scheduler`) over a KV cache manager and executes every iteration on the
model (:class:`paged.engine.model_runner.ModelRunner`): a **prefill** iteration computes the prompts of newly
admitted (or recomputed) requests, a **decode** iteration one token of every running sequence,
requests of every decoding mode batched together (continuous batching, §4.5).

* Parallel sampling (§4.4): a request with ``n`` samples is admitted with ``n`` sequences sharing the
  prompt's blocks; the prompt is computed once, each sequence samples its own next token, and the
  shared last block is copied on write when they diverge.
* Beam search (§4.4, Fig. 9): after every step the surviving candidates fork from their parents
  (sharing all blocks), dropped candidates free theirs, and copy-on-write copies at most the last
  block. ``RequestOutput.metrics["beam_history"]`` records each step's parents and blocks.
* Preemption (§4.5): by recomputation or by swapping whole sequence groups, as the scheduler decides.
* Automatic prefix caching (``enable_prefix_caching=True``, §4.4 "shared prefix"): full blocks of
  earlier prompts are found by their chained hash and reused; the model computes only the uncached
  tail of a prompt (its attention reads the cached prefix through the block table), and
  ``RequestOutput.num_cached_tokens`` says how many prompt tokens came from the cache.
* ``kv_manager="orca-max"`` (or ``"orca-pow2"``, ``"orca-oracle"``, the systems of
  :mod:`paged.systems`): the same engine with Orca reservations, one contiguous reservation per
  sequence; the attention kernel reads a reservation as consecutive blocks, so only memory
  management differs. Forked beams cannot share there (unsupported).

Whatever escapes :meth:`LLM.generate` (``KeyboardInterrupt``, an exception) leaves the LLM as usable as
before (its docstring says how); a loop driven by hand (:meth:`LLM.serving_loop`) can abort a request;
:meth:`LLM.reset_prefix_cache` drops the cache, and :meth:`LLM.load_weights` does so whenever the weights
may have changed (a load that fails part-way too).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from paged.block.allocator import DEFAULT_BLOCK_SIZE
from paged.core.checks import as_positive_int, as_token_ids
from paged.core.max_model_len import check_request_len, derived_max_model_len, verify_max_model_len
from paged.core.scheduler import PREEMPTION_MODES, Scheduler
from paged.core.sequence import Sequence, SequenceGroup
from paged.core.serving_loop import ServingLoop
from paged.engine.executor import EngineStats, ModelExecutor
from paged.engine.kv_cache import PagedKVCache
from paged.engine.model_runner import ModelRunner, model_kv_shape
from paged.engine.sampling import SamplingParams
from paged.engine.sequence_group import EngineSequenceGroup
from paged.engine.shipped_models import SHIPPED_MODELS, shipped_model_path
from paged.systems import get_system, make_kv_manager, system_names

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "KV_MANAGERS"]

#: Systems the engine serves with its own scheduler (:mod:`paged.systems`): paged and the Orca variants.
KV_MANAGERS = system_names(executor="engine", manager=True)
_DEFAULT_KV_CACHE_BYTES = 64 * 2**20


@dataclass(slots=True)
class CompletionOutput:
    """One completion of a request (vLLM's name).

    Attributes:
        index: its rank (beam search: best first) or sample number.
        token_ids: generated token ids (a stop token that ended it included).
        text: ``token_ids`` decoded ("" without a tokenizer).
        cumulative_logprob: beam search: the hypothesis' length-penalised score; else None (and None
            for a beam with no token yet).
        finish_reason: ``"stop"`` (a stop / EOS token), ``"length"`` (``max_tokens`` reached),
            ``"abort"`` (the request was aborted: the tokens generated until then), or None while the
            completion is still running.
    """

    index: int
    token_ids: list[int]
    text: str
    cumulative_logprob: float | None
    finish_reason: str


@dataclass(slots=True)
class RequestOutput:
    """What ``generate`` returns for one prompt (vLLM's name).

    Attributes:
        request_id: position of the prompt in the call (int).
        prompt: the prompt string (None when token ids were given).
        prompt_token_ids: the prompt's token ids.
        outputs: the completions.
        num_cached_tokens: prompt tokens whose KV came from the prefix cache at the request's first
            prefill (vLLM's name; 0 without prefix caching).
        metrics: times (seconds), ``num_preemptions`` and, for beam search, ``beam_history``.
    """

    request_id: int
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    num_cached_tokens: int = 0
    metrics: dict = field(default_factory=dict)


def _load(model, tokenizer, dtype):
    if isinstance(model, (str, Path)):
        path = Path(model)
        if isinstance(model, str) and model in SHIPPED_MODELS and not path.exists():
            path = shipped_model_path(model)
        if not path.exists():
            raise FileNotFoundError(f"model directory {str(path)!r} does not exist (no hub downloads: give a local path "
                                    f"or a shipped model's name: {', '.join(sorted(SHIPPED_MODELS))})")
        if not (path / "config.json").is_file():
            raise ValueError(f"{str(path)!r} is not a transformers model directory (no config.json in it)")
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        # A small local model loads in well under a second: no "Loading weights" bar in the cell.
        shown = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32)
        finally:
            if shown:
                hf_logging.enable_progress_bar()
        if tokenizer is None:
            tokenizer = path
    if isinstance(tokenizer, (str, Path)):
        from transformers import AutoTokenizer

        if not Path(tokenizer).is_dir():
            raise FileNotFoundError(f"tokenizer directory {str(tokenizer)!r} does not exist (give a local path)")
        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    if not hasattr(model, "config") or not callable(model):
        raise TypeError(f"model must be a path or a transformers causal LM, got {type(model).__name__}")
    return model.eval(), tokenizer


def _checked_state_dict(state_dict, current: dict, strict: bool):
    """``state_dict`` if ``model.load_state_dict`` would copy all of it without an error, judged
    against the model's ``current`` state dict (torch's rules: keys with ``strict``, shapes and tensor
    values always). Raises TypeError / RuntimeError naming the problems; copies nothing."""
    from collections.abc import Mapping

    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a mapping of names to tensors, got {type(state_dict).__name__}")
    problems = []
    if strict:
        missing = [k for k in current if k not in state_dict]
        unexpected = [k for k in state_dict if k not in current]
        if missing:
            problems.append(f"missing keys {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        if unexpected:
            problems.append(f"unexpected keys {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}")
    for key, value in state_dict.items():
        if key not in current:
            continue
        if not isinstance(value, torch.Tensor):
            problems.append(f"{key!r} is a {type(value).__name__}, not a tensor")
        elif value.shape != current[key].shape:
            problems.append(f"size mismatch for {key!r}: {tuple(value.shape)} given, {tuple(current[key].shape)} in "
                            f"the model")
    if problems:
        raise RuntimeError(f"load_weights refused, nothing changed (the prefix cache kept): {'; '.join(problems)}")
    return state_dict


def _same_tensors(state_dict, current: dict) -> bool:
    """Every tensor of ``state_dict`` is the model's own (same storage, same view): loading changes nothing."""
    return all(key in current and value.data_ptr() == current[key].data_ptr() and value.shape == current[key].shape
               and value.stride() == current[key].stride() and value.dtype == current[key].dtype
               for key, value in state_dict.items())


class LLM:
    """A causal LM served on a paged (or contiguous) KV cache.

    Args:
        model: a local model directory, the name of a shipped model (``"paged-tiny"``, the small
            ShareGPT-trained Llama of :mod:`paged.engine.shipped_models`, found in a checkout and a
            wheel alike), or a loaded transformers causal LM (Llama-like, attention through
            ``AttentionInterface``).
        tokenizer: tokenizer for string prompts and ``.text`` (loaded from the directory if None).
        block_size: tokens per KV block.
        num_gpu_blocks: KV blocks; else ``kv_cache_bytes`` decides (default 64 MiB).
        kv_cache_bytes: KV cache memory budget (bytes) when ``num_gpu_blocks`` is None.
        device: where the model and cache run (default: the model's device).
        dtype: model dtype when loading from a path (default float32).
        preemption: ``"recompute"`` or ``"swap"`` (§4.5).
        kv_manager: a system of :data:`KV_MANAGERS`: ``"paged"`` or an Orca variant (``"orca-max"``, §6.1).
        num_cpu_blocks: swap space (blocks); default as many as the GPU cache with ``"swap"``, else 0.
        max_num_seqs, max_num_batched_tokens: scheduler budgets (default 256 and the model length).
        max_model_len: longest sequence (tokens); default the model's ``max_position_embeddings`` (RoPE
            scaling taken into account, :mod:`paged.core.max_model_len`); longer is refused.
        watermark: fraction of blocks kept free at admission (paged).
        enable_prefix_caching: automatic prefix caching (paged only).

    Raises:
        ValueError: unknown ``kv_manager`` or ``preemption``, bad sizes, or ``max_model_len`` beyond the
            model's positions, prefix caching with a contiguous ``kv_manager``.
        FileNotFoundError: a model path that does not exist.
    """

    def __init__(self, model, *, tokenizer=None, block_size: int = DEFAULT_BLOCK_SIZE, num_gpu_blocks: int | None = None,
                 kv_cache_bytes: int | None = None, device=None, dtype=None, preemption: str = "recompute",
                 kv_manager: str = "paged", num_cpu_blocks: int | None = None, max_num_seqs: int = 256,
                 max_num_batched_tokens: int | None = None, max_model_len: int | None = None,
                 watermark: float = 0.01, enable_prefix_caching: bool = False) -> None:
        if kv_manager not in KV_MANAGERS:
            raise ValueError(f"unknown kv_manager {kv_manager!r}; choose one of {KV_MANAGERS}")
        if preemption not in PREEMPTION_MODES:
            raise ValueError(f"unknown preemption {preemption!r}; choose one of {PREEMPTION_MODES}")
        if not isinstance(enable_prefix_caching, bool):
            raise TypeError(f"enable_prefix_caching must be True or False, got {enable_prefix_caching!r}")
        if enable_prefix_caching and get_system(kv_manager).kv_cache != "paged":
            raise ValueError(f"enable_prefix_caching needs kv_manager='paged' ({kv_manager!r} cannot share blocks)")
        for name, value in (("block_size", block_size), ("max_num_seqs", max_num_seqs),
                            ("max_num_batched_tokens", max_num_batched_tokens), ("max_model_len", max_model_len),
                            ("num_gpu_blocks", num_gpu_blocks)):
            if value is not None:
                as_positive_int(value, name)
        self.model, self.tokenizer = _load(model, tokenizer, dtype)
        if device is not None:
            self.model.to(device)
        self.device = next(self.model.parameters()).device
        self.dtype = next(self.model.parameters()).dtype
        config = self.model.config
        model_len, how = derived_max_model_len(config)  # vLLM's _get_and_verify_max_len (RoPE scaling included)
        if max_model_len is None and model_len is None:
            model_len, how = 2048, "no max_position_embeddings: vLLM's default of 2048"
        self.max_model_len = verify_max_model_len(model_len, None if max_model_len is None else int(max_model_len),
                                                  model="the model", how=how, what="max_model_len", hint="")
        num_layers, num_kv_heads, head_size = model_kv_shape(config)
        if num_gpu_blocks is None:
            budget = _DEFAULT_KV_CACHE_BYTES if kv_cache_bytes is None else int(kv_cache_bytes)
            num_gpu_blocks = PagedKVCache.num_blocks_for_budget(budget, num_layers, block_size, num_kv_heads,
                                                                head_size, self.dtype)
        paged = get_system(kv_manager).kv_cache == "paged"
        if num_cpu_blocks is None:
            num_cpu_blocks = num_gpu_blocks if preemption == "swap" and paged else 0
        self.block_size = block_size
        self.kv_manager_name = kv_manager
        self.kv_cache = PagedKVCache(num_layers, num_gpu_blocks, block_size, num_kv_heads, head_size, self.dtype,
                                     self.device, num_cpu_blocks=num_cpu_blocks)
        self.bytes_per_slot = PagedKVCache.bytes_per_block(num_layers, 1, num_kv_heads, head_size, self.dtype)
        self.kv_manager = make_kv_manager(kv_manager, num_gpu_blocks, block_size,
                                          max_seq_len=self.max_model_len, num_cpu_blocks=num_cpu_blocks if paged else 0,
                                          watermark=watermark, contiguous_block_size=block_size,
                                          enable_prefix_caching=enable_prefix_caching)
        self.enable_prefix_caching = enable_prefix_caching
        self.runner = ModelRunner(self.model, self.kv_cache)
        self.preemption = preemption
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens or max(self.max_model_len, 2048)
        eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        self.eos_token_ids = frozenset([eos] if isinstance(eos, int) else (eos or []))
        self._next_seq_id = 0
        self.last_stats: EngineStats | None = None
        self.last_result = None

    # -- requests -------------------------------------------------------------------------
    def _tokenize(self, prompt, add_special_tokens: bool = True) -> tuple[str | None, list[int]]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("string prompts need a tokenizer; pass token-id lists or tokenizer=...")
            # verbose=False: a prompt past the model's length is refused by name below, not by transformers' warning
            ids = list(self.tokenizer(prompt, add_special_tokens=add_special_tokens, verbose=False)["input_ids"])
            bos, bos_text = getattr(self.tokenizer, "bos_token_id", None), getattr(self.tokenizer, "bos_token", None)
            if (add_special_tokens and bos is not None and bos_text and ids[:2] == [bos, bos]
                    and prompt.startswith(bos_text)):
                ids = ids[1:]  # the text brings its own BOS: do not add a second one
            return prompt, ids
        ids = as_token_ids(prompt, "token ids")
        vocab = self.model.config.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt token ids {bad[:5]} outside the vocabulary [0, {vocab})")
        return None, ids

    def _make_group(self, request_id: int, prompt_ids: list[int], params: SamplingParams,
                    arrival_time: float) -> SequenceGroup:
        if not prompt_ids:
            raise ValueError(f"prompt {request_id} is empty (0 tokens)")
        # max_tokens counts as the output: the request may run that long (vLLM's OpenAI server refuses the same)
        check_request_len(request_id, len(prompt_ids), params.max_tokens, self.max_model_len, what="max_model_len")
        if params.use_beam_search and get_system(self.kv_manager_name).kv_cache != "paged":
            raise ValueError("beam search needs kv_manager='paged' (contiguous reservations cannot be shared by forks)")
        num_seqs = 1 if params.use_beam_search else params.n
        seqs = []
        for _ in range(num_seqs):
            seqs.append(Sequence(self._next_seq_id, len(prompt_ids), token_ids=list(prompt_ids)))
            self._next_seq_id += 1
        return EngineSequenceGroup(request_id, arrival_time, seqs, params.max_tokens, sampling_params=params,
                                   max_num_seqs=params.beam_width if params.use_beam_search else 0)

    def new_seq_id(self) -> int:
        """A fresh sequence id (used by beam forks)."""
        self._next_seq_id += 1
        return self._next_seq_id - 1

    # -- the loop ---------------------------------------------------------------------------
    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None, *,
                 arrival_times: list[float] | None = None, use_tqdm: bool | None = None,
                 add_special_tokens: bool = True) -> list[RequestOutput]:
        """Generate completions for every prompt (continuous batching, §4.5).

        The requests are served by the serving loop the simulator also runs
        (:class:`paged.core.serving_loop.ServingLoop`) with this engine's :class:`ModelExecutor`.

        Args:
            prompts: a string, a list of strings, or a list of token-id lists.
            sampling_params: one for all prompts or one per prompt (default ``SamplingParams()``).
            arrival_times: when each request arrives (seconds after the call starts, non-decreasing);
                default: all at once (0.0). The engine sleeps while no request has arrived.
            use_tqdm: progress bar over requests (default: on for more than 32 prompts).
            add_special_tokens: string prompts get the tokenizer's special tokens (the BOS token of
                Llama-style tokenizers), as Hugging Face and vLLM tokenize them, once: a text that
                already starts with the BOS text does not get a second one. Token-id prompts are
                used as given.

        Returns:
            one :class:`RequestOutput` per prompt, in order (its ``metrics`` times in seconds since the
            call started). ``self.last_stats`` holds the run's per-step statistics
            (:class:`paged.engine.executor.EngineStats`), ``self.last_result`` the loop's
            :class:`~paged.core.serving_loop.ServingResult`.

        Raises:
            ValueError: empty prompt, ``max_tokens`` < 1, a request longer than ``max_model_len``, bad
                arrival times.
            TypeError: a token-id prompt with non-integer ids (e.g. floats).
            paged.core.kv_cache_manager.RequestTooLargeError: a request larger than the whole KV cache.

        Interrupting: whatever escapes this call (``KeyboardInterrupt``, an exception from the model
        or the sampler) leaves the LLM as usable as before: every block the call took (GPU
        and swap space) is back before the exception propagates, and the prefix cache keeps only
        blocks whose KV was written, so the next call returns what a fresh LLM returns
        (:class:`paged.core.serving_loop.ServingLoop`).
        """
        loop, texts = self.serving_loop(prompts, sampling_params, arrival_times=arrival_times,
                                        add_special_tokens=add_special_tokens)
        show = len(loop.groups) > 32 if use_tqdm is None else use_tqdm
        with tqdm(total=len(loop.groups), disable=not show, desc="generate", unit="req") as bar:
            loop.on_finish = lambda groups: bar.update(len(groups))
            result = loop.run()  # on any exception the loop has given every block back (ServingLoop.step)
        stats = loop.executor.stats
        stats.elapsed = result.duration
        stats.num_preemptions = result.num_preemptions
        self.last_stats, self.last_result = stats, result
        return self.request_outputs(loop, texts)

    def request_outputs(self, loop: ServingLoop, texts: list[str | None]) -> list[RequestOutput]:
        """One :class:`RequestOutput` per request of a loop from :meth:`serving_loop`, in prompt order:
        what :meth:`generate` returns, for a loop driven by hand. An aborted request gives the tokens
        it had generated with ``finish_reason="abort"`` (beam search: its best ``n`` beams and their
        scores, as a finished search gives them); one still running, those so far with
        ``finished=False``; one that has produced nothing yet, ``n`` empty completions (finish reason
        None, or ``"abort"`` if it was aborted)."""
        return [self._output(group, text) for group, text in zip(loop.groups, texts)]

    # -- the cache and the weights -----------------------------------------------------------
    def reset_prefix_cache(self) -> bool:
        """Drop every block of the prefix cache (vLLM's ``LLM.reset_prefix_cache``).

        Returns True when the cache is empty afterwards (always without prefix caching); False,
        changing nothing, while a request of a loop driven by hand still holds blocks: like vLLM, the
        reset is refused while blocks are in use. O(blocks).
        """
        return self.kv_manager.reset_prefix_cache()

    def load_weights(self, state_dict: dict[str, torch.Tensor], *, strict: bool = True) -> None:
        """Replace the model's weights (``model.load_state_dict``) and drop the prefix cache, whose KV
        the old weights computed.

        The cache is dropped whenever the weights may have changed, the load failing part-way
        included (torch copies every matching tensor before it reports missing keys or a shape
        mismatch); it is kept only when they are known unchanged: the load is refused before any
        tensor is copied (the checks below), or every tensor given is the model's own. Weights
        changed another way (``llm.model`` by hand) need :meth:`reset_prefix_cache`.

        Raises:
            RuntimeError: if requests still hold KV blocks (a loop driven by hand: finish or abort
                them first); for a ``strict`` load with missing or unexpected keys, or any load with a
                shape mismatch or a value that is not a tensor, naming them, before anything is copied
                (the cache kept); and ``load_state_dict``'s own errors (the cache dropped).
            TypeError: if ``state_dict`` is not a mapping (nothing changed).
        """
        held = self.kv_manager.num_used_slots
        if held:
            raise RuntimeError(f"cannot change the weights while requests hold {held} KV slots: finish or "
                               f"abort them first")
        current = self.model.state_dict()
        if _same_tensors(_checked_state_dict(state_dict, current, strict), current):
            return  # the model's own tensors: nothing changes, the cache stays valid
        try:
            self.model.load_state_dict(state_dict, strict=strict)
        finally:  # changed, or perhaps changed part-way: no cached KV of the old weights may be served
            self.kv_manager.reset_prefix_cache()

    def serving_loop(self, prompts, sampling_params=None, *,
                     arrival_times: list[float] | None = None,
                     add_special_tokens: bool = True) -> tuple[ServingLoop, list[str | None]]:
        """Tokenize and check every prompt, then set up the serving loop over a fresh scheduler.

        Used by :meth:`generate`; tests and notebooks call ``loop.step()`` to watch individual
        iterations (``loop.scheduler``, ``loop.executor.stats``). Nothing is queued if any request is
        bad (all or nothing). A request of such a loop is aborted with ``loop.abort_request(i)``; its
        output then says ``finish_reason="abort"`` (:meth:`request_outputs`). A loop stopped before it
        finishes (dropped, or interrupted between ``step()`` calls) still holds its requests' blocks:
        ``loop.abandon()`` gives every one back (an exception inside ``step()`` does that itself).

        Returns:
            ``(loop, prompt_texts)``; ``loop.groups`` are the requests' sequence groups, in prompt order.

        Raises:
            as :meth:`generate`.
        """
        if isinstance(prompts, str) or (isinstance(prompts, (list, tuple)) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        if isinstance(prompts, (bytes, dict)) or not isinstance(prompts, Iterable):  # a bare number, a mapping
            raise TypeError(f"prompts must be a string, a list of strings or a list of token-id lists, "
                            f"got {type(prompts).__name__}")
        prompts = list(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        params_list = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        if len(params_list) != len(prompts):
            raise ValueError(f"{len(params_list)} SamplingParams for {len(prompts)} prompts")
        times = [0.0] * len(prompts) if arrival_times is None else [float(t) for t in arrival_times]
        if len(times) != len(prompts):
            raise ValueError(f"{len(times)} arrival times for {len(prompts)} prompts")
        if any(not 0 <= t < float("inf") for t in times) or any(a > b for a, b in zip(times, times[1:])):
            raise ValueError("arrival_times must be finite, ≥ 0 seconds and non-decreasing")
        texts, groups = [], []
        for i, (prompt, params, arrival) in enumerate(zip(prompts, params_list, times)):
            if not isinstance(params, SamplingParams):
                raise TypeError(f"sampling_params must be SamplingParams, got {type(params).__name__}")
            text, ids = self._tokenize(prompt, add_special_tokens)
            groups.append(self._make_group(i, ids, params, arrival))
            texts.append(text)
        check = self._scheduler()
        for group in groups:  # validation only (add_seq_group allocates nothing): all or nothing
            check.add_seq_group(group)
        stats = EngineStats(self.kv_cache.num_blocks * self.block_size, self.bytes_per_slot)
        executor = ModelExecutor(self.runner, self.kv_cache, self.kv_manager, self.eos_token_ids, self.new_seq_id,
                                 stats)
        return ServingLoop(self._scheduler(), executor, groups), texts

    def _scheduler(self) -> Scheduler:
        return Scheduler(self.kv_manager, max_num_seqs=self.max_num_seqs,
                         max_num_batched_tokens=self.max_num_batched_tokens, preemption_mode=self.preemption)

    def _decode(self, ids: list[int]) -> str:
        return "" if self.tokenizer is None else self.tokenizer.decode(ids, skip_special_tokens=True)

    def _beam_outputs(self, group: SequenceGroup) -> list[CompletionOutput]:
        """The best ``n`` beams of a beam-search request, best first, with their scores.

        A finished search gives its finished hypotheses (Hugging Face's result). Before that (a request
        still running, or aborted mid-search) the finished hypotheses compete with the live candidates,
        each scored as the search would score it if it ended now (``logprob / len ** length_penalty``,
        Hugging Face's rule at ``max_tokens``), as vLLM's v0 engine ranks every beam of an unfinished
        request; the candidates an abort cut short say ``"abort"``, running ones None, and hypotheses that
        had ended keep ``"stop"`` or ``"length"``. Before its first token: ``n`` empty completions.
        """
        params: SamplingParams = group.sampling_params
        state = group.beam
        stop = params.stop_ids(self.eos_token_ids)
        live_reason = "abort" if group.aborted else None
        if state is None:  # nothing generated yet
            return [CompletionOutput(i, [], "", None, live_reason) for i in range(params.n)]
        beams = [(score, ids, "stop" if ids and ids[-1] in stop else "length") for score, ids in state.finished]
        if not state.done:
            for score, seq in zip(state.scores, group.seqs):  # the live candidates, in the order of their scores
                ids = seq.output_token_ids
                beams.append((score / (len(ids) ** params.length_penalty), ids, live_reason))
            beams.sort(key=lambda beam: -beam[0])  # stable: a finished hypothesis wins a tie
        return [CompletionOutput(i, ids, self._decode(ids), score, reason)
                for i, (score, ids, reason) in enumerate(beams[: params.n])]

    def _output(self, group: SequenceGroup, text: str | None) -> RequestOutput:
        params: SamplingParams = group.sampling_params
        if params.use_beam_search:
            outputs = self._beam_outputs(group)
        else:  # a sample that has produced nothing yet is an empty, unfinished completion
            outputs = [CompletionOutput(i, seq.output_token_ids, self._decode(seq.output_token_ids), None,
                                        seq.finish_reason) for i, seq in enumerate(group.seqs)]
        metrics: dict[str, Any] = {"first_scheduled_time": group.first_scheduled_time,
                                   "first_token_time": group.first_token_time,
                                   "finished_time": group.finished_time, "num_preemptions": group.num_preemptions}
        if params.use_beam_search:
            metrics["beam_history"] = group.beam_history
        return RequestOutput(group.request_id, text, group.seqs[0].token_ids[: group.prompt_len], outputs,
                             finished=group.aborted or group.is_finished(),
                             num_cached_tokens=group.num_cached_tokens, metrics=metrics)
