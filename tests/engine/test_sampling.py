"""Sampling and parallel sampling on the paged cache (paper §4.4)."""

from __future__ import annotations

import pytest
import torch

from paged.engine import LLM, SamplingParams
from paged.engine.sampling import make_generator, sample


# -- sample() ----------------------------------------------------------------------------
def test_greedy_and_top_p():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 0.0]])
    assert sample(logits, SamplingParams(temperature=0), None) == [1, 0]
    gen = make_generator(0)
    tiny_p = SamplingParams(temperature=1.0, top_p=1e-6)  # only the most likely token survives
    assert all(sample(logits, tiny_p, gen) == [1, 0] for _ in range(20))


def test_seeded_generator_reproducible():
    logits = torch.randn(4, 50)
    params = SamplingParams(temperature=0.8, top_p=0.9)
    assert sample(logits, params, make_generator(3)) == sample(logits, params, make_generator(3))


@pytest.mark.parametrize("kwargs, match", [({"n": 0}, "n"), ({"temperature": -1}, "temperature"),
                                           ({"top_p": 0}, "top_p"), ({"beam_width": 2, "n": 3}, "beam_width"),
                                           ({"early_stopping": "sometimes"}, "early_stopping"),
                                           ({"max_tokens": 1.5}, "max_tokens"),
                                           ({"temperature": float("inf")}, "temperature"),
                                           ({"seed": -1}, "seed"), ({"seed": 2**70}, "seed"),
                                           ({"seed": 1.5}, "seed"), ({"temperature": "0.5"}, "temperature"),
                                           ({"length_penalty": float("nan")}, "length_penalty"),
                                           ({"stop_token_ids": [-5]}, "stop_token_ids"),
                                           ({"stop_token_ids": [1.5]}, "stop_token_ids"),
                                           ({"ignore_eos": "no"}, "ignore_eos"),
                                           ({"stop_token_ids": 5}, "stop_token_ids")])
def test_params_validation(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        SamplingParams(**kwargs)


# -- parallel sampling -------------------------------------------------------------------
def test_parallel_sampling_reproducible_and_shared(model, prompts):
    params = SamplingParams(n=4, temperature=1.0, top_p=0.95, seed=7, max_tokens=10)
    llm = LLM(model, block_size=4, num_gpu_blocks=256)
    first = [[c.token_ids for c in o.outputs] for o in llm.generate(prompts, params)]
    second = [[c.token_ids for c in o.outputs] for o in llm.generate(prompts, params)]
    assert first == second
    assert all(len(o) == 4 and len({tuple(c) for c in o}) > 1 for o in first)  # samples differ
    other = [[c.token_ids for c in o.outputs] for o in llm.generate(prompts, SamplingParams(
        n=4, temperature=1.0, top_p=0.95, seed=8, max_tokens=10))]
    assert other != first
    alone = llm.generate([prompts[2]], params)  # batch composition does not change a seeded request
    assert [c.token_ids for c in alone[0].outputs] == first[2]
    assert llm.kv_manager.get_num_free_gpu_blocks() == 256


def test_prompt_blocks_shared_then_freed(model, prompts):
    llm = LLM(model, block_size=4, num_gpu_blocks=64)
    loop, _ = llm.serving_loop([prompts[1]], SamplingParams(n=3, temperature=1.0, seed=0, max_tokens=6))
    groups, stats = loop.groups, loop.executor.stats
    loop.step()  # prefill: the 17-token prompt once, in 5 blocks
    manager, alloc = llm.kv_manager, llm.kv_manager.gpu_allocator
    tables = [manager.get_block_table(s) for s in groups[0].seqs]
    assert tables[0] == tables[1] == tables[2] and len(tables[0]) == 5
    assert [alloc.ref_count(b) for b in tables[0]] == [3] * 5
    assert stats.steps[0].num_tokens == 17  # computed once, not 3 times
    loop.step()  # first decode: the partly filled last block is copied on write
    assert stats.steps[1].num_copies == 2
    tables = [manager.get_block_table(s) for s in groups[0].seqs]
    assert [alloc.ref_count(b) for b in tables[0][:4]] == [3] * 4  # full prompt blocks stay shared
    assert len({t[4] for t in tables}) == 3
    assert stats.steps[1].blocks_in_use == 4 + 3 < stats.steps[1].blocks_without_sharing == 15
    loop.run()
    assert alloc.num_free_blocks == 64 and not manager.block_tables
