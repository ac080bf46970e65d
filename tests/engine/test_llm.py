"""The engine on a tiny random Llama (GQA) against Hugging Face ``generate`` (paper §4.5).

Greedy tokens must equal HF's dense-cache greedy search token for token: several block sizes,
preemption forced by a tiny cache (swap and recompute), the contiguous Orca (Max) manager, and on a
CPU both decode paths (the C kernel, the bucketed torch path).
"""

from __future__ import annotations

import pytest
from support import tiny_llama
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from paged.engine import LLM, SamplingParams
from paged.core.kv_cache_manager import RequestTooLargeError
from paged.engine.model_runner import ModelRunner
from paged.kernels import cpu_kernel
from paged.kernels.cpu_kernel import load_kernel

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
    # CUDA decodes through paged_attention's Triton kernel; a CPU through the C kernel or the torch path.
    assert llm.runner.use_reference == (llm.runner.device.type != "cuda")
    kernel = load_kernel()
    fast = kernel is not None and kernel.fast(torch.float32, model.config.head_dim)
    assert (llm.runner.cpu_kernel is not None) == (llm.runner.use_reference and fast)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU decode paths")
def test_cpu_decode_paths_give_the_same_greedy_tokens(model, prompts, hf_greedy, monkeypatch):
    """The C kernel and the bucketed torch path (PAGED_CPU_KERNEL=0) both decode HF's greedy tokens."""
    with_kernel = LLM(model, block_size=16, num_gpu_blocks=128)
    monkeypatch.setenv(cpu_kernel.ENV_SWITCH, "0")
    without = LLM(model, block_size=16, num_gpu_blocks=128)
    assert without.runner.cpu_kernel is None
    for llm in (with_kernel, without):
        outs = llm.generate(prompts, GREEDY)
        assert [o.outputs[0].token_ids for o in outs] == hf_greedy


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
    for bare in (5, 2.5, {"prompt": [1, 2]}):  # a number or a mapping is not a prompt list
        with pytest.raises(TypeError, match="prompts must be a string, a list of strings or a list of token-id lists"):
            llm.generate(bare, GREEDY)
    assert llm.kv_manager.get_num_free_gpu_blocks() == 4  # nothing was queued or allocated


# -- sharing under memory pressure, prefix caching ---------------------------------------------------

SHARED = [7, 9, 11, 13] * 10  # a 40-token prefix shared by some prompts (2 full blocks of 16, and more)


@pytest.fixture(scope="module")
def mixed_requests(prompts):
    reqs = [
        (SHARED + prompts[0], GREEDY),
        (SHARED + prompts[1][:9], SamplingParams(n=3, temperature=0, max_tokens=MAX_TOKENS)),
        (prompts[2], SamplingParams(beam_width=3, max_tokens=MAX_TOKENS)),
        (SHARED + prompts[5], SamplingParams(beam_width=2, n=2, max_tokens=MAX_TOKENS)),
        (SHARED + prompts[0], GREEDY),  # the same prompt again: a full prefix-cache hit
        (prompts[4], SamplingParams(n=2, temperature=0, max_tokens=MAX_TOKENS)),
    ]
    return [p for p, _ in reqs], [s for _, s in reqs]


def _run(model, prompts, params, **kwargs):
    llm = LLM(model, block_size=16, **kwargs)
    outs = llm.generate(prompts, params)
    return llm, outs


def _tokens_and_scores(outs):
    return [[(c.token_ids, c.cumulative_logprob) for c in o.outputs] for o in outs]


@pytest.fixture(scope="module")
def unpreempted(model, mixed_requests):
    llm, outs = _run(model, *mixed_requests, num_gpu_blocks=256)
    assert llm.last_stats.num_preemptions == 0
    return outs


@pytest.mark.parametrize("caching", [False, True], ids=["no-cache", "prefix-cache"])
@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_groups_under_preemption_equal_an_unpreempted_run(model, mixed_requests, unpreempted, hf_greedy,
                                                          preemption, caching):
    """Greedy samples and beam groups (beams and scores) come out the same when a starved cache
    preempts them mid-run, by swapping or by recomputation, with prefix caching on or off."""
    llm, outs = _run(model, *mixed_requests, num_gpu_blocks=12, preemption=preemption, watermark=0.0,
                     enable_prefix_caching=caching)
    assert llm.last_stats.num_preemptions > 0
    got, want = _tokens_and_scores(outs), _tokens_and_scores(unpreempted)
    for g, w in zip(got, want):
        assert [ids for ids, _ in g] == [ids for ids, _ in w]
        # Beam scores: equal up to float rounding (6e-7 seen): a preempted run batches other sequences
        # with each step, and a matrix product's rounding depends on the batch (same runs alone: bit-equal).
        for (_, a), (_, b) in zip(g, w):
            assert (a is None and b is None) or a == pytest.approx(b, rel=1e-6, abs=1e-6)
    assert all(c.token_ids == outs[1].outputs[0].token_ids for c in outs[1].outputs)  # greedy samples agree
    seq = model.generate(torch.tensor([mixed_requests[0][0]]), max_new_tokens=MAX_TOKENS, do_sample=False,
                         pad_token_id=0)[0, len(mixed_requests[0][0]):].tolist()
    assert outs[0].outputs[0].token_ids == seq == outs[4].outputs[0].token_ids  # and equal HF's greedy search
    if caching:
        assert outs[4].num_cached_tokens >= 32  # the repeated prompt found its full blocks
    assert llm.kv_manager.get_num_free_gpu_blocks() == 12
    if preemption == "swap":
        assert llm.kv_manager.cpu_allocator.num_free_blocks == llm.kv_manager.cpu_allocator.num_blocks


def test_prefix_cache_reports_cached_tokens_and_equals_hf(model, prompts):
    llm = LLM(model, block_size=16, num_gpu_blocks=64, enable_prefix_caching=True)
    first = llm.generate([SHARED + prompts[1]], GREEDY)[0]
    assert first.num_cached_tokens == 0
    later = llm.generate([SHARED + prompts[1], SHARED + prompts[3], SHARED[:32]], GREEDY)
    assert [o.num_cached_tokens for o in later] == [48, 32, 16]  # full blocks; the last token always computed
    assert later[0].outputs[0].token_ids == first.outputs[0].token_ids
    for p, o in zip([SHARED + prompts[3], SHARED[:32]], later[1:]):
        seq = model.generate(torch.tensor([p]), max_new_tokens=MAX_TOKENS, do_sample=False, pad_token_id=0)
        assert o.outputs[0].token_ids == seq[0, len(p):].tolist()
    assert llm.last_stats.steps[0].num_tokens == (57 - 48) + (41 - 32) + (32 - 16)  # only uncached tokens ran


def test_group_wider_than_max_num_seqs_is_refused(model):
    llm = LLM(model, block_size=16, num_gpu_blocks=64, max_num_seqs=3)
    with pytest.raises(RequestTooLargeError, match="runs 4 sequences at once.*max_num_seqs=3"):
        llm.generate([[5, 6, 7]], SamplingParams(beam_width=4, max_tokens=4))
    with pytest.raises(ValueError, match="enable_prefix_caching needs kv_manager='paged'"):
        LLM(model, kv_manager="orca-max", enable_prefix_caching=True)


def test_string_prompts_get_special_tokens_like_hf():
    """The shipped model was trained on <s>…</s> documents: a string prompt gets its BOS, once, and the
    greedy output equals Hugging Face generate on the same string."""
    from transformers import AutoTokenizer

    from paged.workloads import data_path

    path = data_path("models/sharegpt-llama-tiny")
    llm = LLM(path, num_gpu_blocks=64)
    tok = AutoTokenizer.from_pretrained(path)
    prompts = ["How do I bake bread at home?", "Write a short poem about the sea."]
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    outs = llm.generate(prompts, params)
    for prompt, out in zip(prompts, outs):
        enc = tok(prompt, return_tensors="pt")
        assert out.prompt_token_ids == enc["input_ids"][0].tolist() and out.prompt_token_ids[0] == tok.bos_token_id
        ref = llm.model.generate(**enc, max_new_tokens=16, min_new_tokens=16, do_sample=False,
                                 pad_token_id=tok.eos_token_id)
        assert out.outputs[0].token_ids == ref[0, enc["input_ids"].shape[1]:].tolist()
    once = llm.generate(["<s>Hello there"], params)[0].prompt_token_ids
    assert once == tok("Hello there")["input_ids"]  # not two BOS
    assert llm.generate(["Hello there"], params, add_special_tokens=False)[0].prompt_token_ids[0] != tok.bos_token_id


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_beam_search_preempted_mid_search_returns_the_same_beams(model, prompts, preemption):
    params = SamplingParams(beam_width=3, max_tokens=MAX_TOKENS)
    ref = LLM(model, block_size=16, num_gpu_blocks=256).generate(prompts[:5], params)
    llm = LLM(model, block_size=16, num_gpu_blocks=10, preemption=preemption, watermark=0.0)
    outs = llm.generate(prompts[:5], params)
    assert llm.last_stats.num_preemptions > 0 and max(o.metrics["num_preemptions"] for o in outs) > 0
    for a, b in zip(ref, outs):
        assert [c.token_ids for c in a.outputs] == [c.token_ids for c in b.outputs]
        for c, d in zip(a.outputs, b.outputs):  # bit-equal on the dev machine; 1e-6 allows another BLAS
            assert d.cumulative_logprob == pytest.approx(c.cumulative_logprob, rel=1e-6)


def test_equal_length_prompts_prefill_in_one_call_and_equal_hf(model):
    """Neighbouring prompts of one length share a prefill attention call; their tokens still equal HF's."""
    gen = torch.Generator().manual_seed(3)
    lens = (17, 17, 17, 5, 9, 9)
    prompts = [torch.randint(3, 256, (n,), generator=gen).tolist() for n in lens]
    from paged.engine.model_runner import _prefill_runs
    assert _prefill_runs(list(lens), None) == [(0, 3, 17, None), (51, 1, 5, None), (56, 2, 9, None)]
    outs = LLM(model, block_size=16, num_gpu_blocks=64).generate(prompts, GREEDY)
    for p, out in zip(prompts, outs):
        ref = model.generate(torch.tensor([p]), max_new_tokens=MAX_TOKENS, do_sample=False, pad_token_id=0)
        assert out.outputs[0].token_ids == ref[0, len(p):].tolist()


def test_the_shipped_model_loads_by_name_from_any_directory(tmp_path, monkeypatch):
    """``LLM("paged-tiny")`` finds the package's model wherever the process runs (no checkout path)."""
    from paged import shipped_model_path

    monkeypatch.chdir(tmp_path)
    llm = LLM("paged-tiny", num_gpu_blocks=32)
    assert llm.model.config.name_or_path == str(shipped_model_path())
    out = llm.generate(["User: hello\nAssistant:"], SamplingParams(max_tokens=3))
    assert len(out[0].outputs[0].token_ids) == 3
    with pytest.raises(ValueError, match="no shipped model named 'paged-huge'.*paged-tiny"):
        shipped_model_path("paged-huge")
    with pytest.raises(FileNotFoundError, match="shipped model's name: paged-tiny"):
        LLM("no-such-model")


def test_attention_name_is_switched_for_the_forward_only(model, prompts, hf_greedy):
    """The runner's shortcut setter switches the name (tokens equal HF's) and restores it; a config with
    sub-configs gets transformers' own setter, which reaches them."""
    from transformers import LlavaConfig

    from paged.engine.model_runner import ATTN_IMPLEMENTATION, _attention_name_setter

    before = model.config._attn_implementation
    llm = LLM(model, block_size=16, num_gpu_blocks=64)
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY)] == hf_greedy
    assert model.config._attn_implementation == before != ATTN_IMPLEMENTATION
    set_name = _attention_name_setter(model.config)
    set_name(ATTN_IMPLEMENTATION)
    assert model.config._attn_implementation == ATTN_IMPLEMENTATION
    set_name(before)
    assert model.config._attn_implementation == before
    composite = LlavaConfig()
    _attention_name_setter(composite)("sdpa")
    assert composite._attn_implementation == composite.text_config._attn_implementation == "sdpa"


def test_a_tuple_of_token_ids_is_one_prompt_as_a_list_is(model):
    llm = LLM(model, block_size=16, num_gpu_blocks=16)
    as_tuple = llm.generate((5, 6, 7), SamplingParams(temperature=0, max_tokens=3))
    as_list = llm.generate([5, 6, 7], SamplingParams(temperature=0, max_tokens=3))
    assert len(as_tuple) == len(as_list) == 1
    assert as_tuple[0].outputs[0].token_ids == as_list[0].outputs[0].token_ids


def test_a_text_prompt_past_the_models_length_is_one_clear_error_without_a_tokenizer_warning():
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    library = logging.getLogger("transformers")  # where transformers' own handler prints its warnings
    library.addHandler(handler)
    try:
        llm = LLM("paged-tiny")
        with pytest.raises(RequestTooLargeError, match="max_model_len=1024: it can never be served"):
            llm.generate(["hello world " * 2000], SamplingParams(max_tokens=4))
    finally:
        library.removeHandler(handler)
    assert not [r for r in records if "Token indices sequence length" in r.getMessage()]
