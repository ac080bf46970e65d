"""``python -m paged.bench.engine_step``: the engine's decode and prefill step against a dense forward.

What paging costs per step (paper §4.1, §6.2: the paged kernel is slower than a contiguous one in
isolation; the engine wins by batching more). At each batch size ``B`` the same ``B`` random prompts
of ``prompt_len`` tokens go through:

* **paged**: the engine (:class:`paged.engine.LLM`: scheduler, block manager, model runner on the
  paged KV cache, greedy sampling), one :meth:`~paged.core.serving_loop.ServingLoop.step` at a time;
  each step's CPU time (``time.thread_time``, torch on one thread) is recorded as prefill or decode.
* **dense**: the same model object run by Hugging Face directly, ``attn_implementation="sdpa"``,
  one batched prefill ``[B, prompt_len]`` into a ``DynamicCache`` and then one ``[B, 1]`` forward per
  decode step (greedy argmax, as the engine samples), no padding (all prompts have one length).

Every round runs paged then dense for each batch size (interleaved, so a busy machine slows both
alike). Figures: the median per-step decode time over the round's ``decode_steps`` steps, the whole
prefill's time (the engine may split it into several steps by its token budget), and the ratios
``dense ÷ paged`` (≥ 1: paging costs nothing), each as the median over rounds with the min–max
spread; the load average (``os.getloadavg``) before and after. CPU time, not wall time, so time the
process waited for a core does not count.
"""

from __future__ import annotations

import inspect
import os
import statistics
import time

import numpy as np
import torch

from paged.bench import bench_parser
from paged.block.allocator import DEFAULT_BLOCK_SIZE
from paged.cli import positive_int, run_command
from paged.engine import LLM, SamplingParams

__all__ = ["measure"]


def _paged_round(llm: LLM, prompts: list[list[int]], decode_steps: int) -> tuple[float, float]:
    """``(prefill CPU seconds summed over prefill steps, median decode-step CPU seconds)``."""
    params = SamplingParams(temperature=0, max_tokens=decode_steps + 1, ignore_eos=True)
    loop, _ = llm.serving_loop(prompts, params)
    steps = loop.executor.stats.steps
    prefill, decode = 0.0, []
    while loop.has_work:
        start = time.thread_time()
        loop.step()
        elapsed = time.thread_time() - start
        if steps[-1].is_prefill:
            prefill += elapsed
        else:
            decode.append(elapsed)
    return prefill, statistics.median(decode)


def _cache_argument(model) -> str:
    """The forward's name for its KV cache: ``cache`` where transformers has it (5.x, which warns
    that ``past_key_values`` is deprecated), else ``past_key_values``; either gets the same cache."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.inference_mode()
def _dense_round(model, prompts: list[list[int]], decode_steps: int) -> tuple[float, float]:
    """The same as :func:`_paged_round` for the dense Hugging Face forward with a ``DynamicCache``.

    Raises:
        RuntimeError: the cache did not grow by one token per step (the forward ignored it).
    """
    from transformers import DynamicCache

    ids = torch.tensor(prompts, dtype=torch.int64)
    cache = DynamicCache(config=model.config)
    with_cache = {_cache_argument(model): cache, "use_cache": True}
    start = time.thread_time()
    out = model(input_ids=ids, logits_to_keep=1, **with_cache)
    token = out.logits[:, -1].argmax(dim=-1, keepdim=True)
    prefill = time.thread_time() - start
    decode = []
    for _ in range(decode_steps):
        start = time.thread_time()
        out = model(input_ids=token, **with_cache)
        token = out.logits[:, -1].argmax(dim=-1, keepdim=True)
        token.tolist()  # the engine reads its tokens back to Python every step
        decode.append(time.thread_time() - start)
    if cache.get_seq_length() != len(prompts[0]) + decode_steps:
        raise RuntimeError(f"the dense cache holds {cache.get_seq_length()} tokens, not "
                           f"{len(prompts[0]) + decode_steps}: the forward did not use it")
    return prefill, statistics.median(decode)


def measure(model_path=None, *, batch_sizes=(8, 32, 64), prompt_len: int = 128, decode_steps: int = 14,
            rounds: int = 5, block_size: int = DEFAULT_BLOCK_SIZE, seed: int = 0) -> dict:
    """Interleaved rounds of paged and dense prefill and decode at each batch size (module docstring).

    Args:
        model_path: a local model directory (default: the shipped tiny Llama).
        batch_sizes: sequences per step.
        prompt_len, decode_steps: tokens per prompt; decode steps timed per round (the contexts run
            from ``prompt_len + 1`` to ``prompt_len + decode_steps``).
        rounds: interleaved rounds (≥ 1).

    Returns:
        ``{"rows": [{batch_size, kind ("decode" / "prefill"), paged_s, dense_s, ratio}, ...]``
        where each value is ``(median, min, max)`` over rounds (seconds of CPU time; ratio = dense ÷
        paged per round), ``"load": (before, after)``}.

    Raises:
        ValueError: a batch size, ``prompt_len``, ``decode_steps`` or ``rounds`` < 1.
    """
    if not batch_sizes or min(batch_sizes) < 1 or prompt_len < 1 or decode_steps < 1 or rounds < 1:
        raise ValueError(f"need batch sizes, prompt_len, decode_steps and rounds ≥ 1; got {batch_sizes}, "
                         f"{prompt_len}, {decode_steps}, {rounds}")
    if model_path is None:
        from paged.experiments.nb05_engine.engine import DEFAULT_MODEL as model_path
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tokens = prompt_len + decode_steps + 1
        blocks = max(batch_sizes) * -(-tokens // block_size)
        llm = LLM(model_path, block_size=block_size, num_gpu_blocks=blocks, max_num_seqs=max(batch_sizes),
                  max_num_batched_tokens=max(batch_sizes) * prompt_len)
        model = llm.model
        model.config._attn_implementation = "sdpa"
        rng = np.random.default_rng(seed)
        vocab = model.config.vocab_size
        prompts = {b: rng.integers(3, vocab, size=(b, prompt_len)).tolist() for b in batch_sizes}
        _paged_round(llm, prompts[min(batch_sizes)][:2], 2)  # warm-up
        _dense_round(model, prompts[min(batch_sizes)][:2], 2)
        samples = {(b, kind): {"paged_s": [], "dense_s": [], "ratio": []}
                   for b in batch_sizes for kind in ("decode", "prefill")}
        load_before = os.getloadavg()[0]
        for _ in range(rounds):
            for b in batch_sizes:
                paged = _paged_round(llm, prompts[b], decode_steps)
                dense = _dense_round(model, prompts[b], decode_steps)
                for i, kind in enumerate(("prefill", "decode")):
                    s = samples[(b, kind)]
                    s["paged_s"].append(paged[i])
                    s["dense_s"].append(dense[i])
                    s["ratio"].append(dense[i] / paged[i])
        load_after = os.getloadavg()[0]
    finally:
        torch.set_num_threads(previous_threads)
    rows = [{"batch_size": b, "kind": kind, **{k: (statistics.median(v), min(v), max(v)) for k, v in s.items()}}
            for (b, kind), s in samples.items()]
    return {"rows": rows, "load": (load_before, load_after)}


def main(argv: list[str] | None = None) -> None:
    """CLI: print paged and dense step times and their ratios, with the targets."""
    parser = bench_parser("paged.bench.engine_step", __doc__)
    parser.add_argument("--model", default=None, help="model directory (default: the shipped tiny Llama)")
    parser.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--prompt-len", type=positive_int, default=128)
    parser.add_argument("--decode-steps", type=positive_int, default=14)
    parser.add_argument("--rounds", type=positive_int, default=5)
    run_command(parser, _report, argv)


def _report(args) -> None:
    r = measure(args.model, batch_sizes=tuple(args.batch_sizes), prompt_len=args.prompt_len,
                decode_steps=args.decode_steps, rounds=args.rounds)
    load = r["load"]
    print(f"load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} CPUs; "
          f"CPU time, torch on 1 thread; median over {args.rounds} interleaved rounds [min - max]")
    print(f"prompts of {args.prompt_len} tokens, decode contexts {args.prompt_len + 1}-"
          f"{args.prompt_len + args.decode_steps}; ratio = dense / paged (targets: decode >= 0.95, "
          f"prefill >= 1 / 1.1 = 0.91)")
    for row in sorted(r["rows"], key=lambda row: (row["kind"] != "decode", row["batch_size"])):
        target = 0.95 if row["kind"] == "decode" else 1 / 1.1
        med, lo, hi = row["ratio"]
        unit = "ms/step" if row["kind"] == "decode" else "ms     "
        print(f"{row['kind']:<8} batch {row['batch_size']:>4}  paged {row['paged_s'][0] * 1e3:8.2f} {unit} "
              f"[{row['paged_s'][1] * 1e3:.2f} - {row['paged_s'][2] * 1e3:.2f}]  dense {row['dense_s'][0] * 1e3:8.2f} "
              f"[{row['dense_s'][1] * 1e3:.2f} - {row['dense_s'][2] * 1e3:.2f}]  dense/paged {med:5.3f} "
              f"[{lo:.3f} - {hi:.3f}] ({'met' if med >= target else 'NOT met'})")


if __name__ == "__main__":
    main()
