"""Sampling, parallel sampling and beam search on the paged cache (paper §4.4; issue 5 §3)."""

from __future__ import annotations

import pytest
import torch

from paged.engine import LLM, SamplingParams
from paged.engine.beam_search import BeamSearchState, beam_search_step
from paged.engine.sampling import make_generator, sample
from paged.core.sequence import SequenceStatus
from support import tiny_llama


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab=64)


@pytest.fixture(scope="module")
def prompts():
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(3, 64, (n,), generator=gen).tolist() for n in (5, 17, 33, 9)]


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


# -- beam search -------------------------------------------------------------------------
def _hf_beams(model, prompt, k, lp, es, max_tokens, eos):
    model.generation_config.eos_token_id = eos
    try:
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_tokens, num_beams=k, num_return_sequences=k,
                             length_penalty=lp, early_stopping=es, do_sample=False, pad_token_id=0,
                             eos_token_id=eos, output_scores=True, return_dict_in_generate=True)
    finally:
        model.generation_config.eos_token_id = None
    return [s[len(prompt):].tolist() for s in out.sequences], out.sequences_scores.tolist()


@pytest.mark.parametrize("k, lp, es, eos", [(2, 1.0, False, None), (4, 1.0, False, 7), (4, 0.5, True, 11),
                                            (3, 2.0, "never", 7), (6, -1.0, False, 11)])
def test_beam_search_equals_hf(model, prompts, k, lp, es, eos):
    llm = LLM(model, block_size=4, num_gpu_blocks=512)
    llm.eos_token_ids = frozenset() if eos is None else frozenset([eos])
    params = SamplingParams(beam_width=k, n=k, max_tokens=10, length_penalty=lp, early_stopping=es)
    outs = llm.generate(prompts, params)
    for p, o in zip(prompts, outs):
        hf_ids, hf_scores = _hf_beams(model, p, k, lp, es, 10, eos)
        for c, ids, score in zip(o.outputs, hf_ids, hf_scores):
            # HF pads a hypothesis that finished early with `pad_token_id or eos` (here EOS).
            assert c.token_ids == ids[: len(c.token_ids)]
            assert all(t in (0, eos) for t in ids[len(c.token_ids):])
            assert c.cumulative_logprob == pytest.approx(score, rel=1e-4, abs=1e-4)
    assert llm.kv_manager.get_num_free_gpu_blocks() == 512


def test_beam_history_forks_and_frees(model, prompts):
    llm = LLM(model, block_size=4, num_gpu_blocks=512)
    outs = llm.generate([prompts[2]], SamplingParams(beam_width=4, max_tokens=10))
    history = outs[0].metrics["beam_history"]
    assert history[0]["seq_ids"] == [history[0]["parents"][0]]  # step 0: one candidate, forked 4 ways
    assert len(history[0]["children"]) == 4
    for step in history[:-1]:
        assert set(step["parents"]) <= set(step["seq_ids"])
        assert step["blocks_in_use"] < step["blocks_without_sharing"]  # the prompt stays shared
    assert history[-1]["parents"] == []  # the search ended
    stats = llm.last_stats
    assert all(s.num_copies <= 4 for s in stats.steps)  # copy-on-write copies at most the last block per beam
    assert llm.kv_manager.get_num_free_gpu_blocks() == 512


def test_beam_step_unit():
    state = BeamSearchState(2, 1.0, False, 5, frozenset([0]))
    logprobs = torch.log_softmax(torch.tensor([[0.0, 1.0, 2.0, 3.0]]), dim=-1)
    result = beam_search_step(state, logprobs, [[]])
    assert result.parents == [0, 0] and result.tokens == [3, 2]
    assert state.finished == [] and not result.done
    assert [s.status for s in []] == [] and SequenceStatus.FINISHED  # imported names used
