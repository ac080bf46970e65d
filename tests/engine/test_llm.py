"""The engine on a tiny random Llama (GQA) against Hugging Face ``generate`` (paper §4.5; issue 5 §3).

Greedy tokens must equal HF's dense-cache greedy search token for token: several block sizes,
preemption forced by a tiny cache (swap and recompute), and the contiguous Orca (Max) manager.
"""

from __future__ import annotations

import pytest
from support import tiny_llama
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from paged.engine import LLM, SamplingParams
from paged.core.kv_cache_manager import RequestTooLargeError
from paged.engine.model_runner import ModelRunner

MAX_TOKENS = 12
PROMPT_LENS = (5, 17, 33, 1, 40, 9, 16)


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


@pytest.fixture(scope="module")
def prompts():
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(3, 256, (n,), generator=gen).tolist() for n in PROMPT_LENS]


@pytest.fixture(scope="module")
def hf_greedy(model, prompts):
    """HF greedy search, one prompt at a time (no padding), dense DynamicCache."""
    out = []
    for p in prompts:
        seq = model.generate(torch.tensor([p]), max_new_tokens=MAX_TOKENS, do_sample=False, pad_token_id=0)
        out.append(seq[0, len(p):].tolist())
    return out


GREEDY = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)


@pytest.mark.parametrize("block_size", [1, 16, 64])
def test_greedy_equals_hf(model, prompts, hf_greedy, block_size):
    llm = LLM(model, block_size=block_size, num_gpu_blocks=4096 // block_size)
    outs = llm.generate(prompts, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == hf_greedy
    assert all(o.outputs[0].finish_reason == "length" for o in outs)
    assert llm.kv_manager.get_num_free_gpu_blocks() == 4096 // block_size  # memory falls to zero
    assert llm.last_stats.max_batch_size == len(prompts)


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("block_size", [1, 16])
def test_greedy_equals_hf_under_preemption(model, prompts, hf_greedy, preemption, block_size):
    num_blocks = -(-(max(PROMPT_LENS) + MAX_TOKENS) // block_size) + 2  # barely one long request
    llm = LLM(model, block_size=block_size, num_gpu_blocks=num_blocks, preemption=preemption, watermark=0.0)
    outs = llm.generate(prompts, GREEDY)
    assert llm.last_stats.num_preemptions > 0
    assert [o.outputs[0].token_ids for o in outs] == hf_greedy
    assert llm.kv_manager.get_num_free_gpu_blocks() == num_blocks
    if preemption == "swap":
        assert llm.kv_manager.cpu_allocator.num_free_blocks == llm.kv_manager.cpu_allocator.num_blocks


def test_contiguous_max_equals_hf(model, prompts, hf_greedy):
    llm = LLM(model, block_size=16, num_gpu_blocks=64, kv_manager="orca-max")  # 4 × 256-slot reservations
    outs = llm.generate(prompts, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == hf_greedy
    assert llm.last_stats.max_batch_size == 4  # the reservation, not the tokens, limits the batch
    assert llm.kv_manager.buddy.num_free_slots == 64 * 16


def test_stops_at_eos_like_hf(prompts):
    model = tiny_llama()
    ref = LLM(model, block_size=16).generate(prompts[:3], GREEDY)
    eos = ref[1].outputs[0].token_ids[4]  # a token the greedy output really produces
    model.generation_config.eos_token_id = eos
    llm = LLM(model, block_size=16)
    outs = llm.generate(prompts[:3], GREEDY)
    for p, o in zip(prompts[:3], outs):
        seq = model.generate(torch.tensor([p]), max_new_tokens=MAX_TOKENS, do_sample=False, pad_token_id=0)
        assert o.outputs[0].token_ids == seq[0, len(p):].tolist()
    assert outs[1].outputs[0].finish_reason == "stop" and outs[1].outputs[0].token_ids[-1] == eos
    ignored = llm.generate(prompts[1], SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True))
    assert len(ignored[0].outputs[0].token_ids) == MAX_TOKENS


def test_mixed_modes_in_one_batch(model, prompts, hf_greedy):
    llm = LLM(model, block_size=16, num_gpu_blocks=128)
    params = [GREEDY, SamplingParams(n=3, temperature=1.0, seed=5, max_tokens=MAX_TOKENS),
              SamplingParams(beam_width=3, max_tokens=MAX_TOKENS), GREEDY]
    outs = llm.generate(prompts[:4], params)
    assert outs[0].outputs[0].token_ids == hf_greedy[0]
    assert outs[3].outputs[0].token_ids == hf_greedy[3]
    assert len(outs[1].outputs) == 3 and len(outs[2].outputs) == 1
    assert llm.kv_manager.get_num_free_gpu_blocks() == 128


def test_decode_reads_paged_attention_kernel_path(model):
    llm = LLM(model, block_size=16, num_gpu_blocks=8)
    assert isinstance(llm.runner, ModelRunner)
    # CUDA decodes through paged_attention's Triton kernel; a CPU through the torch path.
    assert llm.runner.use_reference == (llm.runner.device.type != "cuda")


def test_step_by_step_stats(model, prompts):
    llm = LLM(model, block_size=16, num_gpu_blocks=64)
    loop, _ = llm.serving_loop(prompts[:2], GREEDY)
    stats = loop.executor.stats
    loop.step()
    assert stats.steps[0].is_prefill and stats.steps[0].num_tokens == PROMPT_LENS[0] + PROMPT_LENS[1]
    loop.step()
    assert not stats.steps[1].is_prefill and stats.steps[1].num_tokens == 2


def test_bad_input(model):
    llm = LLM(model, block_size=16, num_gpu_blocks=4)
    with pytest.raises(ValueError, match="empty"):
        llm.generate([[]], GREEDY)
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=0)
    with pytest.raises(RequestTooLargeError, match="could never run"):
        llm.generate([[5] * 60], SamplingParams(temperature=0, max_tokens=10))  # 70 tokens > 64 slots
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate([[5] * 250], SamplingParams(temperature=0, max_tokens=10))
    with pytest.raises(ValueError, match="kv_manager"):
        LLM(model, kv_manager="contiguous-min")
    with pytest.raises(ValueError, match="preemption"):
        LLM(model, preemption="drop")
    with pytest.raises(ValueError, match="tokenizer"):
        llm.generate("hello", GREEDY)
    with pytest.raises(ValueError, match="vocabulary"):
        llm.generate([[300]], GREEDY)
    with pytest.raises(FileNotFoundError):
        LLM("/nonexistent/model/dir")
    with pytest.raises(ValueError, match="beam search"):
        LLM(model, kv_manager="orca-max").generate([[5, 6]], SamplingParams(beam_width=2, max_tokens=2))
    # Beam search: the width counts in the up-front check (4 beams × 3 final blocks > 4), before anything runs.
    with pytest.raises(RequestTooLargeError, match="4 sequence"):
        llm.generate([[5] * 10, [5] * 40], [GREEDY, SamplingParams(beam_width=4, max_tokens=20)])
    with pytest.raises(ValueError, match="max_position_embeddings=256"):
        LLM(model, max_model_len=512)
    for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "num_gpu_blocks"):
        with pytest.raises(ValueError, match=f"{name} must be a positive int"):
            LLM(model, **{name: 0})
    with pytest.raises(FileNotFoundError, match="tokenizer directory"):
        LLM(model, tokenizer="/nonexistent/tokenizer")
    with pytest.raises(TypeError, match="token ids must be integers"):
        llm.generate([[1.7, 2.2]], GREEDY)
    assert llm.kv_manager.get_num_free_gpu_blocks() == 4  # nothing was queued or allocated
