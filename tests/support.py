"""Helpers shared by test modules (importable as ``support``: ``tests/conftest.py`` puts this folder on the path)."""

from __future__ import annotations

import os
import random

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from paged.workloads import Request


def tiny_llama(seed: int = 0, vocab: int = 256, head_dim: int = 64) -> LlamaForCausalLM:
    """A 2-layer random Llama with GQA (4 query heads, 2 KV heads), fp32."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=4 * head_dim, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=head_dim, max_position_embeddings=256,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None  # random models: stop on length unless a test sets EOS
    return model


#: Where kernel tests put their tensors: CUDA when Triton runs compiled, the CPU under its interpreter.
KERNEL_DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
#: Kernel test context lengths (tokens): inside, at and across block boundaries, and long.
CONTEXT_LENS = (1, 15, 16, 17, 33, 1000)
#: (atol, rtol) of a kernel's output against the fp32 reference, per dtype.
TOLERANCE = {torch.float32: (1e-5, 1e-4), torch.float16: (2e-3, 1e-2), torch.bfloat16: (1.6e-2, 1.6e-2)}
FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16


def make_case(context_lens, block_size, head_size, num_heads, num_kv_heads, dtype, seed=0, device=None):
    """Random query and paged caches; everything a sequence does not own is NaN.

    Returns ``(query, key_cache, value_cache, block_tables, context_lens)`` with int32 tables, on
    ``device`` (default: CUDA when the Triton kernels run compiled, else the CPU).
    """
    device = device or KERNEL_DEVICE
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-n // block_size) for n in context_lens]
    num_blocks = 4 * sum(blocks_per_seq) + 16  # a pool much larger than needed
    max_blocks = max(blocks_per_seq) + 2  # at least two padding entries per row
    shape = (num_blocks, block_size, num_kv_heads, head_size)
    key_cache = torch.full(shape, float("nan"), dtype=dtype)
    value_cache = torch.full(shape, float("nan"), dtype=dtype)
    perm = torch.randperm(num_blocks, generator=gen)
    used, spare = perm[: sum(blocks_per_seq)], perm[sum(blocks_per_seq):]
    block_tables = torch.empty(len(context_lens), max_blocks, dtype=torch.int32)
    start = 0
    for seq, (n_tokens, n_blocks) in enumerate(zip(context_lens, blocks_per_seq)):
        blocks = used[start:start + n_blocks]
        start += n_blocks
        # Padding: NaN-filled spare blocks on even columns, far out-of-range ids on odd ones.
        pad = torch.where(torch.arange(max_blocks) % 2 == 0, spare[torch.arange(max_blocks) % len(spare)],
                          torch.tensor(2**30))
        block_tables[seq] = pad.to(torch.int32)
        block_tables[seq, :n_blocks] = blocks.to(torch.int32)
        slots = blocks.repeat_interleave(block_size) * block_size + torch.arange(block_size).repeat(n_blocks)
        slots = slots[:n_tokens]
        for cache in (key_cache, value_cache):
            flat = cache.view(-1, num_kv_heads, head_size)
            flat[slots] = torch.randn(n_tokens, num_kv_heads, head_size, generator=gen).to(dtype)
    query = torch.randn(len(context_lens), num_heads, head_size, generator=gen).to(dtype)
    lens = torch.tensor(context_lens, dtype=torch.int32)
    return tuple(t.to(device) for t in (query, key_cache, value_cache, block_tables, lens))


def assert_close(out, ref, dtype):
    atol, rtol = TOLERANCE[dtype]
    assert out.dtype == dtype and not torch.isnan(out).any()
    torch.testing.assert_close(out.float().cpu(), ref.float().cpu(), atol=atol, rtol=rtol)


def synthetic_trace(n: int = 120, rate: float = 8.0, seed: int = 1, max_prompt: int = 300,
                    max_output: int = 400) -> list[Request]:
    """``n`` requests with uniform prompt (1-``max_prompt``) and output (1-``max_output``) lengths (tokens)
    and Poisson arrivals at ``rate``/s."""
    rng = random.Random(seed)
    t, reqs = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        reqs.append(Request(i, rng.randint(1, max_prompt), rng.randint(1, max_output), t))
    return reqs


#: Result fields left out of the summaries compared exactly: the groups (summarised apart) and the sums of
#: busy seconds (compared to 1e-12).
SUMMED = ("groups", "busy_seconds", "batched_requests_seconds")


def served_both(trace, make_manager, cost, **kw):
    """Serve ``trace`` twice with :func:`paged.sim.simulator.simulate` (keywords ``kw``) on fresh managers from
    ``make_manager()`` (which builds through :func:`paged.sim.fast.make_kv_manager`): with the fast path on
    (the loop the simulator picks: a calendar where one applies) and switched off (the reference).
    Returns ``(fast, reference)``, each ``(summary, calendar class names used, manager)``: the summary holds
    every :class:`ServingResult` field but the groups and the busy-time sums (checked here to 1e-12: the
    fast path adds a run of decode iterations' seconds at once, the reference one iteration at a time), and
    per request its times, preemptions, cached tokens and its sequences' generated tokens."""
    import dataclasses

    import pytest

    from paged.sim import fast
    from paged.sim.simulator import simulate

    def summary(result):
        fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result) if f.name not in SUMMED}
        groups = [(g.request_id, g.arrival_time, g.first_scheduled_time, g.first_token_time, g.finished_time,
                   g.num_preemptions, g.num_cached_tokens, len(g.seqs), sorted(s.num_generated for s in g.seqs))
                  for g in result.groups]
        return fields, groups

    def spy(cls, used):
        class Spy(cls):
            __slots__ = ()

            def __init__(self, *args, **kwargs):
                used.append(cls.__name__)
                super().__init__(*args, **kwargs)
        return Spy

    out, sums = [], []
    for reference in (False, True):
        used = []
        with pytest.MonkeyPatch.context() as patch:
            for name in ("CalendarServingLoop", "BeamCalendarServingLoop"):
                patch.setattr(fast, name, spy(getattr(fast, name), used))
            if reference:
                patch.setattr(fast, "_ENABLED", False)
            manager = make_manager()
            assert fast.is_fast(manager) != reference
            result = simulate(trace, manager, cost, record_memory=False, **kw)
        manager.check_invariants()
        out.append((summary(result), used, manager))
        sums.append([getattr(result, name) for name in SUMMED[1:]])
    assert sums[0] == pytest.approx(sums[1], rel=1e-12)
    return tuple(out)


def managed(system: str, num_blocks: int, block_size: int, **kwargs):
    """A fresh KV cache manager as the simulator builds one (:func:`paged.sim.fast.make_kv_manager`: the
    fast one while the switch is on)."""
    from paged.sim import fast

    return fast.make_kv_manager(system, num_blocks, block_size, **kwargs)


def sharing_case(system: str, block_size: int, load: str, *, requests: tuple[int, int], rates: tuple[float, float],
                 seed: int, paged_slots_16: int):
    """A Fig. 15 recording case for the calendars' equality tests: ``(trace, KV slots, cost model)``.

    ``load`` "light" (``requests[0]`` at ``rates[0]`` req/s, room for everything) or "overloaded"
    (``requests[1]`` at ``rates[1]``, slots that make the scheduler preempt: ``paged_slots_16`` at blocks of
    16 tokens, 1,024 at 1, 4,096 at 64; 16,384 for a contiguous system). Prompts ≤ 150, outputs ≤ 100 tokens.
    """
    from paged.sim.cost_model import get_cost_model

    light = load == "light"
    trace = synthetic_trace(requests[0] if light else requests[1], rates[0] if light else rates[1], seed=seed,
                            max_prompt=150, max_output=100)
    if light:
        slots = 1 << 16
    elif system == "paged":
        slots = 1024 if block_size == 1 else paged_slots_16 if block_size == 16 else 4096
    else:
        slots = 1 << 14
    cost = get_cost_model("opt-13b", block_size=block_size, paged_kernel=system == "paged")
    return trace, slots, cost


class LineInterrupt(KeyboardInterrupt):
    """The Ctrl-C that :func:`step_until_interrupted` injects."""


def step_until_interrupted(loop, scheduler, k: int, folders: tuple[str, ...]) -> bool:
    """Step ``loop`` until ``scheduler`` has nothing left, raising :class:`LineInterrupt` at the ``k``-th line
    executed in a file under one of ``folders`` (e.g. ``"/paged/block/"``) below the loop's ``step`` (its own
    clean-up runs, as for a real Ctrl-C). True if interrupted, False if the run ended first."""
    import sys

    lines, stepping = 0, False

    def trace(frame, event, arg):
        if not any(folder in frame.f_code.co_filename for folder in folders):
            return None

        def on_line(frame, event, arg):
            nonlocal lines
            if event == "line" and stepping and frame.f_code.co_name != "step":  # below the loop's handler
                lines += 1
                if lines == k:
                    raise LineInterrupt  # sys.settrace(None) follows by itself: one interrupt per run
            return on_line
        return on_line(frame, event, arg)

    sys.settrace(trace)
    try:
        while scheduler.has_unfinished_seqs():
            stepping = True
            loop.step()
            stepping = False
    except LineInterrupt:
        return True
    finally:
        sys.settrace(None)
    return False


class TokenExecutor:
    """Runs an iteration without a model: each running sequence of a scheduled group gains the token
    ``(sum of its last 3 tokens) % vocab`` and finishes at its group's output length."""

    def __init__(self, vocab: int = 50) -> None:
        self.now = 0.0
        self.vocab = vocab

    def wait_until(self, time: float) -> None:
        self.now = max(self.now, time)

    def execute_run(self, scheduler, outputs, next_arrival_time, memory) -> int:
        return 0

    def execute(self, scheduler, outputs) -> bool:
        from paged.core.sequence import SequenceStatus

        self.now += 1.0
        for group in outputs.scheduled_seq_groups:
            for seq in group.seqs:
                if seq.status is SequenceStatus.RUNNING:
                    seq.append_token(sum(seq.token_ids[-3:]) % self.vocab)
                    if seq.num_generated >= group.output_len:
                        seq.finish_reason = "length"
                        scheduler.finish_seq(seq)
        return True
