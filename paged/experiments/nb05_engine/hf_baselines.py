"""Hugging Face baselines at a fixed KV memory budget (the engine's baseline, §6.2): static ``generate`` and ``generate_batch``.

* :func:`run_hf_static`: ``model.generate`` over static batches (FasterTransformer-style, §6.1): requests
  are taken in order into a batch while ``batch_size × (longest prompt + longest output)`` — the dense
  cache HF allocates for a left-padded batch — fits in the budget; the batch runs until its longest
  request is done.
* :func:`run_hf_generate_batch`: transformers' own continuous batching with its paged cache
  (``GenerationMixin.generate_batch``), its cache sized to the same budget (``num_blocks × page_size``
  slots).

Each returns a :class:`BaselineResult` with wall time, useful tokens (each request's own output
length), measured batch sizes and peak KV slots.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

__all__ = ["BaselineResult", "run_hf_static", "run_hf_generate_batch"]


@dataclass(slots=True)
class BaselineResult:
    """One baseline run.

    Attributes:
        seconds: wall time (seconds).
        output_tokens: tokens the requests asked for (tokens; padding and over-generation excluded).
        max_batch_size: most requests in one batch (static) or one forward (continuous batching).
        mean_batch_size: mean sequences per decode step (static: each batch weighted by the steps
            it runs, padding rows included), or (continuous batching) mean decoding requests per
            forward that decodes: the counterpart of the engine's mean decode batch.
        peak_kv_slots: most KV slots allocated at once (tokens); continuous batching: its whole cache.
        mean_forward_requests: continuous batching: mean requests per forward (prefill chunks
            included); static: the mean over batches.
    """

    seconds: float
    output_tokens: int
    max_batch_size: int
    mean_batch_size: float
    peak_kv_slots: int
    mean_forward_requests: float = float("nan")


@torch.inference_mode()
def run_hf_static(model, prompts: list[list[int]], output_lens: list[int], kv_slots: int,
                  pad_token_id: int = 0) -> BaselineResult:
    """Static batches of ``model.generate`` (greedy, no EOS) under a budget of ``kv_slots`` tokens.

    Raises:
        ValueError: if a single request does not fit in the budget.
    """
    batches, current = [], []
    for i in range(len(prompts)):
        trial = current + [i]
        need = len(trial) * (max(len(prompts[j]) for j in trial) + max(output_lens[j] for j in trial))
        if need <= kv_slots:
            current = trial
            continue
        if not current:
            raise ValueError(f"request {i} needs {need} KV slots alone, more than the budget of {kv_slots}")
        batches.append(current)
        current = [i]
    if current:
        batches.append(current)
    eos = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = None
    start = time.perf_counter()
    peak = 0
    try:
        for batch in batches:
            width = max(len(prompts[j]) for j in batch)
            ids = torch.full((len(batch), width), pad_token_id, dtype=torch.int64)
            mask = torch.zeros((len(batch), width), dtype=torch.int64)
            for row, j in enumerate(batch):  # left padding
                ids[row, width - len(prompts[j]):] = torch.tensor(prompts[j])
                mask[row, width - len(prompts[j]):] = 1
            new = max(output_lens[j] for j in batch)
            model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device), max_new_tokens=new,
                           min_new_tokens=new, do_sample=False, pad_token_id=pad_token_id)
            peak = max(peak, len(batch) * (width + new))
    finally:
        model.generation_config.eos_token_id = eos
    seconds = time.perf_counter() - start
    sizes = [len(b) for b in batches]
    steps = [max(output_lens[j] for j in b) for b in batches]  # decode steps each batch runs
    per_step = sum(n * k for n, k in zip(sizes, steps)) / sum(steps)
    return BaselineResult(seconds, sum(output_lens), max(sizes), per_step, peak, sum(sizes) / len(sizes))


class _ForwardBatches:
    """Counts the requests in every forward of transformers' continuous batching (a forward pre-hook).

    Its packed forward receives ``cu_seq_lens_q`` (cumulative query lengths, one entry per request
    plus a leading 0): requests = ``len - 1``; those with one query token are decoding.
    """

    def __init__(self) -> None:
        self.requests: list[int] = []
        self.decoding: list[int] = []

    def __call__(self, module, args, kwargs) -> None:
        cu = kwargs.get("cu_seq_lens_q")
        if cu is None:
            return
        lens = (cu[1:] - cu[:-1]).tolist()
        self.requests.append(len(lens))
        self.decoding.append(sum(1 for n in lens if n == 1))


@torch.inference_mode()
def run_hf_generate_batch(model, prompts: list[list[int]], output_lens: list[int], kv_slots: int,
                          page_size: int = 16, max_batch_tokens: int = 1024) -> BaselineResult:
    """transformers' continuous batching (``generate_batch``) with a paged cache of ``kv_slots`` slots.

    Requests go through ``continuous_batching_context_manager`` with ``add_request(max_new_tokens=...)``,
    so each stops at its own output length (``generate_batch`` itself takes one ``max_new_tokens`` for
    all). The timed region ends when the last result arrives; the manager's teardown (stopping and
    joining its thread) is outside it. Batch sizes are measured: requests per forward, counted by a
    forward pre-hook (:class:`_ForwardBatches`); a forward mixes prefill chunks and decodes.
    """
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    config = GenerationConfig(max_new_tokens=max(output_lens), do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = ContinuousBatchingConfig(page_size=page_size, num_blocks=max(kv_slots // page_size, 1),
                                  max_batch_tokens=max_batch_tokens, allow_block_sharing=False)
    attn = model.config._attn_implementation
    generated = 0
    batches = _ForwardBatches()
    hook = model.register_forward_pre_hook(batches, with_kwargs=True)
    try:
        with model.continuous_batching_context_manager(generation_config=config, continuous_batching_config=cb,
                                                       warmup=False) as manager:
            start = time.perf_counter()
            ids = [manager.add_request(p, max_new_tokens=n) for p, n in zip(prompts, output_lens)]
            pending = set(ids)
            while pending:
                result = manager.get_result(timeout=1)
                if result is None:
                    if not manager.is_running():
                        raise RuntimeError("transformers' continuous batching thread stopped early")
                    continue
                if result.is_finished() and result.request_id in pending:
                    pending.discard(result.request_id)
                    generated += len(result.generated_tokens)
            seconds = time.perf_counter() - start  # teardown (leaving the context) is not timed
    finally:
        hook.remove()
        if model.config._attn_implementation != attn:
            model.set_attn_implementation(attn)
    sizes = batches.requests or [0]
    decoding = [d for d in batches.decoding if d] or [0]
    return BaselineResult(seconds, generated or sum(output_lens), max(sizes), sum(decoding) / len(decoding),
                          kv_slots, mean_forward_requests=sum(sizes) / len(sizes))
