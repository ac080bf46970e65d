"""Nothing lost when a run is interrupted or a request goes away (the engine, end to end).

Fault injection the way storage engines test recovery: a small run is interrupted at every step
boundary in turn (the model's forward, the sampler, a copy-on-write, a swap out, a swap in), for
both preemption modes, with and without prefix caching, with parallel samples and beam search.
After each interruption every block is free, the manager's invariants hold, and the retry on the
same LLM returns exactly what a fresh LLM returns.
"""

from __future__ import annotations

import pytest
import torch
from support import tiny_llama

from paged.engine import LLM, SamplingParams
from paged.engine.executor import ModelExecutor

GREEDY = SamplingParams(max_tokens=6, temperature=0.0)


class Boom(KeyboardInterrupt):
    """The injected interrupt (a KeyboardInterrupt, as from a notebook's Interrupt)."""


def _shared_prompts(prompts):
    """The fixture's prompts, the last two starting with the first's tokens (prefix-cache hits)."""
    head = prompts[2][:16]
    return [prompts[0], prompts[1], head + prompts[3], head + [7, 8, 9]]


# name -> (LLM keyword arguments, sampling params, prompts transform)
CONFIGS = {  # each cache is small enough that the run preempts (and so swaps, in "swap" mode)
    "recompute": (dict(block_size=4, num_gpu_blocks=16, watermark=0.0), GREEDY, list),
    "swap": (dict(block_size=4, num_gpu_blocks=16, watermark=0.0, preemption="swap"), GREEDY, list),
    "prefix-caching": (dict(block_size=4, num_gpu_blocks=16, watermark=0.0, enable_prefix_caching=True), GREEDY,
                       _shared_prompts),
    "prefix-caching-swap": (dict(block_size=4, num_gpu_blocks=16, watermark=0.0, enable_prefix_caching=True,
                                 preemption="swap"), GREEDY, _shared_prompts),
    "parallel-n2-swap": (dict(block_size=4, num_gpu_blocks=20, watermark=0.0, preemption="swap"),
                         SamplingParams(n=2, max_tokens=5, temperature=1.0, seed=3), list),
    "beam-2": (dict(block_size=4, num_gpu_blocks=40, watermark=0.0), SamplingParams(beam_width=2, max_tokens=4), list),
}


def _tokens(outputs):
    return [[c.token_ids for c in o.outputs] for o in outputs]


def _assert_all_free(llm: LLM) -> None:
    manager = llm.kv_manager
    manager.check_invariants()
    assert manager.get_num_free_gpu_blocks() == manager.gpu_allocator.num_blocks
    assert not manager.block_tables
    if manager.cpu_allocator is not None:
        assert manager.cpu_allocator.num_free_blocks == manager.cpu_allocator.num_blocks


class _Counter:
    """Wraps ``owner.name`` to count calls and raise :class:`Boom` on call number ``fail_at``."""

    def __init__(self, monkeypatch, owner, name):
        self.calls = 0
        self.fail_at = None
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            self.calls += 1
            if self.calls == self.fail_at:
                raise Boom(f"{name} #{self.calls}")
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)


POINTS = {  # where to interrupt: (object to patch, attribute)
    "forward": lambda llm: (llm.runner, "execute"),
    "sampler": lambda llm: (ModelExecutor, "_process_sampling"),
    "copy-on-write": lambda llm: (type(llm.kv_cache), "copy_blocks"),
    "swap-out": lambda llm: (type(llm.kv_cache), "swap_out"),
    "swap-in": lambda llm: (type(llm.kv_cache), "swap_in"),
}


@pytest.fixture(scope="module")
def references(model, prompts):
    """Each configuration's outputs from a fresh LLM."""
    out = {}
    for name, (kwargs, params, transform) in CONFIGS.items():
        out[name] = _tokens(LLM(model, **kwargs).generate(transform(prompts), params))
    return out


SWAPPING = ("swap", "prefix-caching-swap", "parallel-n2-swap")
CASES = ([("forward", c) for c in CONFIGS] + [("sampler", c) for c in CONFIGS if c != "beam-2"]
         + [("copy-on-write", c) for c in ("parallel-n2-swap", "beam-2")]
         + [(p, c) for p in ("swap-out", "swap-in") for c in SWAPPING])


@pytest.mark.parametrize("point, config", CASES)
def test_interrupt_at_every_step_boundary(model, prompts, references, monkeypatch, config, point):
    kwargs, params, transform = CONFIGS[config]
    batch = transform(prompts)
    llm = LLM(model, **kwargs)
    counter = _Counter(monkeypatch, *POINTS[point](llm))
    assert _tokens(llm.generate(batch, params)) == references[config]
    total = counter.calls
    assert total > 0, f"{config} never reaches {point}: the case tests nothing"
    for k in range(1, total + 1):
        counter.calls, counter.fail_at = 0, k
        with pytest.raises(Boom):
            llm.generate(batch, params)
        _assert_all_free(llm)
        counter.fail_at = None
        assert _tokens(llm.generate(batch, params)) == references[config], f"retry after {point} #{k}"
        _assert_all_free(llm)


def test_interrupted_prefill_leaves_no_cache_entry(model, prompts):
    llm = LLM(model, block_size=4, num_gpu_blocks=32, enable_prefix_caching=True)
    fresh = LLM(model, block_size=4, num_gpu_blocks=32, enable_prefix_caching=True).generate(prompts[2:3], GREEDY)
    original = llm.runner.execute

    def interrupted(*args, **kwargs):
        raise Boom("during the prefill")

    llm.runner.execute = interrupted
    with pytest.raises(Boom):
        llm.generate(prompts[2:3], GREEDY)
    llm.runner.execute = original
    assert llm.kv_manager.gpu_allocator.num_cached_blocks == 0  # nothing was computed, nothing is cached
    again = llm.generate(prompts[2:3], GREEDY)
    assert again[0].num_cached_tokens == 0
    assert _tokens(again) == _tokens(fresh)
    # A completed run's blocks are cached and hit by the next one.
    assert llm.generate(prompts[2:3], GREEDY)[0].num_cached_tokens > 0


def test_exception_from_a_callback_gives_everything_back(model, prompts):
    llm = LLM(model, block_size=4, num_gpu_blocks=40)
    loop, _ = llm.serving_loop(prompts, GREEDY)

    def callback(groups):
        raise RuntimeError("a progress callback failed")

    loop.on_finish = callback
    with pytest.raises(RuntimeError, match="callback failed"):
        loop.run()
    _assert_all_free(llm)
    assert all(g.aborted or g.is_finished() for g in loop.groups) and not loop.has_work


# -- abort -----------------------------------------------------------------------------------
def _step_until(loop, predicate, limit=200):
    for _ in range(limit):
        if predicate():
            return
        loop.step()
    raise AssertionError("the state was never reached")


@pytest.mark.parametrize("where", ["waiting", "running", "swapped", "not-arrived"])
def test_abort_one_request(model, prompts, where):
    kwargs = dict(block_size=4, num_gpu_blocks=12, watermark=0.0, preemption="swap")
    llm = LLM(model, **kwargs)
    times = [0.0, 0.0, 0.0, 1e6] if where == "not-arrived" else None
    loop, texts = llm.serving_loop(prompts, GREEDY, arrival_times=times)
    sched = loop.scheduler
    if where == "waiting":
        _step_until(loop, lambda: sched.running and sched.waiting)
        group = sched.waiting[-1]
    elif where == "running":
        _step_until(loop, lambda: sched.running and sched.running[-1].seqs[0].num_generated >= 2)
        group = sched.running[-1]
    elif where == "swapped":
        _step_until(loop, lambda: sched.swapped)
        group = sched.swapped[0]
    else:
        group = loop.groups[3]
    victim = loop.groups.index(group)
    generated = list(group.seqs[0].output_token_ids)
    assert loop.abort_request(group.request_id) is True
    assert loop.abort_request(group.request_id) is False  # already aborted: a no-op
    assert loop.abort_request("no such request") is False
    llm.kv_manager.check_invariants()
    loop.run()
    outs = llm.request_outputs(loop, texts)
    assert outs[victim].outputs[0].finish_reason == "abort"
    assert outs[victim].outputs[0].token_ids == generated
    others = [p for i, p in enumerate(prompts) if i != victim]
    alone = _tokens(LLM(model, **kwargs).generate(others, GREEDY))
    assert [t for i, t in enumerate(_tokens(outs)) if i != victim] == alone
    _assert_all_free(llm)


def test_abort_a_parallel_sampling_request_frees_shared_blocks_last(model, prompts):
    llm = LLM(model, block_size=4, num_gpu_blocks=40)
    params = SamplingParams(n=3, max_tokens=6, temperature=1.0, seed=1)
    loop, texts = llm.serving_loop(prompts[:2], params)
    loop.step()  # the prefill: both requests' samples share their prompt blocks
    loop.step()
    held = llm.kv_manager.get_num_free_gpu_blocks()
    assert loop.abort_request(0)
    assert llm.kv_manager.get_num_free_gpu_blocks() > held
    llm.kv_manager.check_invariants()
    loop.run()
    assert all(c.finish_reason == "abort" for c in llm.request_outputs(loop, texts)[0].outputs)
    _assert_all_free(llm)


def test_beam_search_aborted_mid_search_ends_with_its_best_n_beams_and_scores(model, prompts):
    """Aborted after 3 of 8 tokens, a width-4 search returns its best 2 beams with their scores, best first:
    the beams and scores a search of 3 tokens ends with (all its candidates finish at max_tokens, scored
    alike), said "abort" instead of "length"."""
    params = SamplingParams(beam_width=4, n=2, max_tokens=8)
    llm = LLM(model, block_size=4, num_gpu_blocks=40)
    loop, texts = llm.serving_loop(prompts[1:3], params)
    group = loop.groups[0]
    _step_until(loop, lambda: group.seqs[0].num_generated == 3)
    assert loop.abort_request(group.request_id)
    loop.run()
    aborted = llm.request_outputs(loop, texts)[0]
    assert aborted.finished and len(aborted.outputs) == 2
    assert [c.finish_reason for c in aborted.outputs] == ["abort", "abort"]
    scores = [c.cumulative_logprob for c in aborted.outputs]
    assert all(isinstance(s, float) for s in scores) and scores == sorted(scores, reverse=True)
    assert all(len(c.token_ids) == 3 for c in aborted.outputs)
    ended = LLM(model, block_size=4, num_gpu_blocks=40).generate(prompts[1:2], SamplingParams(beam_width=4, n=2,
                                                                                              max_tokens=3))[0]
    assert [c.token_ids for c in aborted.outputs] == [c.token_ids for c in ended.outputs]
    assert scores == pytest.approx([c.cumulative_logprob for c in ended.outputs], rel=1e-5)
    assert [c.finish_reason for c in ended.outputs] == ["length", "length"]
    _assert_all_free(llm)


def test_a_finished_hypothesis_keeps_its_reason_when_the_search_is_aborted(model, prompts):
    """A hypothesis that ended on a stop token before the abort competes with the live candidates by its
    score and keeps "stop"; the others say "abort"."""
    llm = LLM(model, block_size=4, num_gpu_blocks=40)
    first = llm.generate(prompts[1:2], SamplingParams(max_tokens=1, temperature=0.0))[0].outputs[0].token_ids[0]
    params = SamplingParams(beam_width=3, n=3, max_tokens=8, stop_token_ids=(first,))  # the greedy first token stops
    loop, texts = llm.serving_loop(prompts[1:2], params)
    group = loop.groups[0]
    _step_until(loop, lambda: group.beam is not None and group.beam.finished and group.seqs[0].num_generated >= 2)
    loop.abort_request(group.request_id)
    outputs = llm.request_outputs(loop, texts)[0].outputs
    assert len(outputs) == 3 and [c.cumulative_logprob for c in outputs] == sorted(
        (c.cumulative_logprob for c in outputs), reverse=True)
    reasons = {c.finish_reason for c in outputs}
    stopped = [c for c in outputs if c.finish_reason == "stop"]
    assert reasons == {"stop", "abort"} and stopped
    assert all(c.token_ids[-1] == first for c in stopped)
    _assert_all_free(llm)


@pytest.mark.parametrize("params", [SamplingParams(n=2, max_tokens=4, temperature=1.0, seed=0),
                                    SamplingParams(beam_width=2, n=2, max_tokens=4)], ids=["samples", "beams"])
def test_a_request_that_produced_nothing_has_empty_unfinished_outputs(model, prompts, params):
    llm = LLM(model, block_size=4, num_gpu_blocks=40)
    loop, texts = llm.serving_loop(prompts[:2], params)
    before = llm.request_outputs(loop, texts)  # nothing scheduled yet
    for out in before:
        assert not out.finished
        assert [(c.index, c.token_ids, c.text, c.cumulative_logprob, c.finish_reason) for c in out.outputs] == \
            [(0, [], "", None, None), (1, [], "", None, None)]
    loop.abort_request(1)  # aborted before its first token: finished, still empty
    loop.run()
    after = llm.request_outputs(loop, texts)
    assert after[1].finished and [(c.token_ids, c.finish_reason) for c in after[1].outputs] == [([], "abort")] * 2
    assert after[0].finished and all(len(c.token_ids) == 4 for c in after[0].outputs)
    _assert_all_free(llm)


# -- refusals at the door ------------------------------------------------------------------------
def test_exact_fit_request_is_served(model):
    """prompt + max_tokens − 1 slots: the last token's KV is never written, so the cache is enough."""
    prompt, max_tokens = list(range(3, 13)), 7  # 10 + 7 − 1 = 16 slots = 4 blocks of 4
    llm = LLM(model, block_size=4, num_gpu_blocks=4, watermark=0.0)
    out = llm.generate([prompt], SamplingParams(max_tokens=max_tokens, temperature=0.0))
    assert len(out[0].outputs[0].token_ids) == max_tokens
    ref = LLM(model, block_size=4, num_gpu_blocks=64).generate([prompt], SamplingParams(max_tokens=max_tokens, temperature=0.0))
    assert _tokens(out) == _tokens(ref)


# -- prefix cache reset ------------------------------------------------------------------------
def test_reset_prefix_cache_refused_while_in_use(model, prompts):
    llm = LLM(model, block_size=4, num_gpu_blocks=32, enable_prefix_caching=True)
    llm.generate(prompts[2:3], GREEDY)
    assert llm.kv_manager.gpu_allocator.num_cached_blocks > 0
    loop, _ = llm.serving_loop(prompts[:1], GREEDY)
    loop.step()
    assert llm.reset_prefix_cache() is False  # a request holds blocks: refused, as in vLLM
    assert llm.kv_manager.gpu_allocator.num_cached_blocks > 0
    loop.run()
    assert llm.reset_prefix_cache() is True
    assert llm.kv_manager.gpu_allocator.num_cached_blocks == 0
    assert llm.generate(prompts[2:3], GREEDY)[0].num_cached_tokens == 0
    llm.kv_manager.check_invariants()


def test_load_weights_drops_the_stale_cache(model, prompts):
    other = tiny_llama(seed=5, vocab=64)
    llm = LLM(tiny_llama(vocab=64), block_size=4, num_gpu_blocks=32, enable_prefix_caching=True)
    llm.generate(prompts[2:3], GREEDY)
    llm.load_weights(other.state_dict())
    served = llm.generate(prompts[2:3], GREEDY)
    assert served[0].num_cached_tokens == 0
    assert _tokens(served) == _tokens(LLM(other, block_size=4, num_gpu_blocks=32).generate(prompts[2:3], GREEDY))
    loop, _ = llm.serving_loop(prompts[:1], GREEDY)
    loop.step()
    with pytest.raises(RuntimeError, match="hold .* KV slots"):
        llm.load_weights(other.state_dict())
    loop.abandon()
    _assert_all_free(llm)


def _cached_then(llm, prompts):
    llm.generate(prompts[2:3], GREEDY)
    assert llm.kv_manager.gpu_allocator.num_cached_blocks > 0


def test_a_load_that_fails_part_way_drops_the_cache(model, prompts, monkeypatch):
    """torch copies module by module: a failure in the LM head leaves the layers new and the head old. The
    next call must compute with those weights, not serve KV the old ones computed."""
    other = tiny_llama(seed=5, vocab=64)
    llm = LLM(tiny_llama(vocab=64), block_size=4, num_gpu_blocks=32, enable_prefix_caching=True)
    _cached_then(llm, prompts)

    def fail(*args, **kwargs):
        raise RuntimeError("disk read failed")

    monkeypatch.setattr(llm.model.lm_head, "_load_from_state_dict", fail)
    with pytest.raises(RuntimeError, match="disk read failed"):
        llm.load_weights(other.state_dict())
    assert torch.equal(llm.model.model.embed_tokens.weight, other.model.embed_tokens.weight)  # copied before it failed
    assert llm.kv_manager.gpu_allocator.num_cached_blocks == 0
    served = llm.generate(prompts[2:3], GREEDY)
    assert served[0].num_cached_tokens == 0
    assert _tokens(served) == _tokens(LLM(llm.model, block_size=4, num_gpu_blocks=32).generate(prompts[2:3], GREEDY))


@pytest.mark.parametrize("change, message", [
    (lambda sd: sd.pop("lm_head.weight"), r"missing keys \['lm_head.weight'\]"),
    (lambda sd: sd.update(extra=torch.zeros(1)), r"unexpected keys \['extra'\]"),
    (lambda sd: sd.update({"lm_head.weight": torch.zeros(3, 3)}), r"size mismatch for 'lm_head.weight': \(3, 3\)"),
    (lambda sd: sd.update({"lm_head.weight": [0.0]}), "'lm_head.weight' is a list, not a tensor"),
])
def test_a_refused_load_changes_nothing_and_keeps_the_cache(model, prompts, change, message):
    """Refused before any tensor is copied (torch itself would copy the matching ones first): the weights
    are known unchanged, so the cache stays and keeps serving what a fresh LLM computes."""
    llm = LLM(tiny_llama(vocab=64), block_size=4, num_gpu_blocks=32, enable_prefix_caching=True)
    _cached_then(llm, prompts)
    before = {k: v.clone() for k, v in llm.model.state_dict().items()}
    state = dict(tiny_llama(seed=5, vocab=64).state_dict())
    change(state)
    with pytest.raises(RuntimeError, match=message):
        llm.load_weights(state)
    assert all(torch.equal(v, before[k]) for k, v in llm.model.state_dict().items())
    assert llm.kv_manager.gpu_allocator.num_cached_blocks > 0
    served = llm.generate(prompts[2:3], GREEDY)
    assert served[0].num_cached_tokens > 0
    assert _tokens(served) == _tokens(LLM(tiny_llama(vocab=64), block_size=4, num_gpu_blocks=32).generate(prompts[2:3], GREEDY))
    with pytest.raises(TypeError, match="must be a mapping"):
        llm.load_weights([("lm_head.weight", torch.zeros(1))])


def test_loading_the_models_own_tensors_keeps_the_cache(model, prompts):
    llm = LLM(tiny_llama(vocab=64), block_size=4, num_gpu_blocks=32, enable_prefix_caching=True)
    _cached_then(llm, prompts)
    llm.load_weights(llm.model.state_dict())
    assert llm.kv_manager.gpu_allocator.num_cached_blocks > 0
    copy = {k: v.clone() for k, v in llm.model.state_dict().items()}  # equal values, other tensors: not known
    llm.load_weights(copy)
    assert llm.kv_manager.gpu_allocator.num_cached_blocks == 0
