"""Beam search on the paged cache (paper §4.4, Fig. 9): equal to Hugging Face's, forks share, drops free."""

from __future__ import annotations

import pytest
import torch

from paged.engine import LLM, SamplingParams
from paged.engine.beam_search import BeamSearchState, beam_search_step


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
