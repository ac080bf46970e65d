"""Tests for paged/training.py: the shipped model loads and generates; a tiny run works end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from paged.tools.training import (
    TrainingConfig,
    build_model,
    conversation_texts,
    lr_at,
    pack_chunks,
    run,
    train,
    train_step,
    train_tokenizer,
)

MODEL_DIR = Path(__file__).resolve().parents[2] / "data" / "models" / "sharegpt-llama-tiny"

TINY = dict(
    vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
    seq_len=32, batch_size=4, warmup_steps=2, eval_every=2, sample_new_tokens=4,
    max_chars=40_000, tokenizer_chars=20_000, val_chunks=4, bf16_autocast=False,
)


def _records(n: int) -> list[dict]:
    return [
        {"id": str(i), "conversations": [
            {"from": "human", "value": f"question {i}, with \"quotes\" and ] brackets ["},
            {"from": "gpt", "value": f"answer number {i} is here."},
        ]}
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def tiny_tokenizer():
    texts = conversation_texts(_records(200), max_chars=10**6)
    return train_tokenizer(texts, vocab_size=300, model_max_length=64)


# --- the shipped model -------------------------------------------------------------------------


@pytest.mark.skipif(not MODEL_DIR.is_dir(), reason="shipped model not built (make model)")
def test_shipped_model_loads_and_generates():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR)
    cfg = model.config
    assert cfg.model_type == "llama" and cfg.num_key_value_heads < cfg.num_attention_heads
    assert (cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id) == (
        tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    gen = model.generation_config
    assert (gen.bos_token_id, gen.eos_token_id, gen.pad_token_id) == (
        tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    enc = tok("User: What is the capital of France?\nAssistant:", return_tensors="pt")
    assert enc["input_ids"][0, 0].item() == tok.bos_token_id
    out = model.generate(**enc, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > enc["input_ids"].shape[1]
    assert isinstance(tok.decode(out[0], skip_special_tokens=True), str)


@pytest.mark.skipif(not MODEL_DIR.is_dir(), reason="shipped model not built (make model)")
def test_shipped_folder_is_small_and_complete():
    names = {f.name for f in MODEL_DIR.iterdir()}
    for name in ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "loss.csv", "loss.png", "README.md"]:
        assert name in names, name
    size = sum(f.stat().st_size for f in MODEL_DIR.rglob("*") if f.is_file())
    assert size <= 30 * 2**20, f"{size / 2**20:.1f} MiB"
    curve = pd.read_csv(MODEL_DIR / "loss.csv")
    assert curve["train_loss"].tail(25).mean() < curve["train_loss"].head(5).mean()


def test_conversation_texts_pairs_and_filters():
    records = [{"conversations": [
        {"from": "human", "value": " hi "}, {"from": "gpt", "value": "hello"},
        {"from": "human", "value": "안녕하세요 안녕하세요"}, {"from": "gpt", "value": "네"},
        {"from": "gpt", "value": "orphan"}, {"from": "human", "value": ""}, {"from": "gpt", "value": "x"},
    ]}]
    assert conversation_texts(records, max_chars=1000) == ["User: hi\nAssistant: hello"]
    assert len(conversation_texts(_records(100), max_chars=10)) == 1
    with pytest.raises(ValueError):
        conversation_texts(records, max_chars=0)


# --- tokenizer, packing, schedule ---------------------------------------------------------------


def test_tokenizer_roundtrip_and_specials(tiny_tokenizer):
    tok = tiny_tokenizer
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert len(tok) == 300
    s = "User: café ☕ answer 12\nAssistant: ok"
    ids = tok(s)["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert tok.decode(ids, skip_special_tokens=True) == s
    with pytest.raises(ValueError):
        train_tokenizer(["x"], vocab_size=100)


def test_pack_chunks_shape(tiny_tokenizer):
    texts = conversation_texts(_records(50), max_chars=10**6)
    chunks = pack_chunks(tiny_tokenizer, texts, seq_len=16)
    assert chunks.dtype == torch.int64 and chunks.shape[1] == 16
    assert chunks[0, 0].item() == tiny_tokenizer.bos_token_id
    assert (chunks == tiny_tokenizer.eos_token_id).any()
    with pytest.raises(ValueError):
        pack_chunks(tiny_tokenizer, ["a"], seq_len=10_000)


def test_lr_schedule():
    cfg = TrainingConfig(steps=100, lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(1e-4)
    assert lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(99, cfg) == pytest.approx(1e-4, rel=0.05)
    lrs = [lr_at(s, cfg) for s in range(10, 100)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


# --- training ----------------------------------------------------------------------------------


def test_loss_goes_down_on_a_repeated_batch(tiny_tokenizer):
    cfg = TrainingConfig(**TINY)
    model = build_model(cfg, tiny_tokenizer)
    chunks = pack_chunks(tiny_tokenizer, conversation_texts(_records(50), 10**6), cfg.seq_len)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = [train_step(model, opt, chunks[:4], 3e-3, cfg) for _ in range(20)]
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.8 * losses[0]


def test_training_is_deterministic(tiny_tokenizer):
    cfg = TrainingConfig(steps=4, **TINY)
    chunks = pack_chunks(tiny_tokenizer, conversation_texts(_records(50), 10**6), cfg.seq_len)
    a = train(build_model(cfg, tiny_tokenizer), chunks[:-2], chunks[-2:], cfg)
    b = train(build_model(cfg, tiny_tokenizer), chunks[:-2], chunks[-2:], cfg)
    pd.testing.assert_frame_equal(a, b)


def test_tiny_run_end_to_end(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    info = run(TrainingConfig(steps=3, **TINY), tmp_path / "m")
    out = tmp_path / "m"
    curve = pd.read_csv(out / "loss.csv")
    assert list(curve["step"]) == [1, 2, 3] and curve["train_loss"].map(math.isfinite).all()
    assert math.isfinite(info["final_val_loss"]) and info["params"] > 0
    assert (out / "loss.png").stat().st_size > 0 and "Sample generations" in (out / "README.md").read_text()
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert len(tok) == 300 and model.config.eos_token_id == tok.eos_token_id
    enc = tok("User: hi\nAssistant:", return_tensors="pt")
    assert model.generate(**enc, max_new_tokens=3, do_sample=False).shape[1] >= enc["input_ids"].shape[1] + 1


def test_run_rejects_zero_steps(tmp_path):
    with pytest.raises(ValueError, match="steps"):
        run(TrainingConfig(steps=0), tmp_path)
