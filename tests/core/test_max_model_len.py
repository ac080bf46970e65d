"""The longest sequence a server serves: derived from a config as vLLM derives it, verified against a
requested length, and one refusal for a request that can never fit it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from paged.core.kv_cache_manager import RequestTooLargeError
from paged.core.max_model_len import check_request_len, derived_max_model_len, verify_max_model_len


@pytest.mark.parametrize("fields, expected", [
    (dict(max_position_embeddings=2048), (2048, "max_position_embeddings=2048")),
    (dict(n_positions=1024), (1024, "n_positions=1024")),  # GPT-2's name
    (dict(max_position_embeddings=8192, seq_length=4096), (4096, "seq_length=4096")),  # the smallest wins
    (dict(max_position_embeddings=4096, rope_scaling={"type": "linear", "factor": 2.0}),
     (8192, "max_position_embeddings=4096 × linear RoPE scaling factor 2")),
    (dict(max_position_embeddings=32768,
          rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
     (131072, "original_max_position_embeddings=32768 × yarn RoPE scaling factor 4")),
    (dict(max_position_embeddings=131072, rope_scaling={"rope_type": "llama3", "factor": 8.0}),
     (131072, "max_position_embeddings=131072")),  # llama3 / longrope configs state the extended length
    (dict(max_position_embeddings=4096, rope_parameters={"rope_type": "default", "rope_theta": 1e4}),
     (4096, "max_position_embeddings=4096")),
    (dict(max_position_embeddings=32768, rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0},
                                                          "sliding_attention": {"rope_type": "default"}}),
     (262144, "max_position_embeddings=32768 × linear RoPE scaling factor 8")),  # Gemma 3's per-layer-type form
    (dict(max_position_embeddings=True), (None, "no max_position_embeddings / n_positions field")),
    (dict(), (None, "no max_position_embeddings / n_positions field")),
])
def test_derived_max_model_len(fields, expected):
    assert derived_max_model_len(SimpleNamespace(**fields)) == expected


def test_verify_refuses_a_longer_length_unless_allowed():
    assert verify_max_model_len(2048, None) == 2048
    assert verify_max_model_len(2048, 1024) == 1024
    with pytest.raises(ValueError, match=r"max_seq_len=4096 is longer than m's 2048 positions \(how\): it was not "
                                         r"trained for longer sequences; allow it explicitly"):
        verify_max_model_len(2048, 4096, model="m", how="how")
    assert verify_max_model_len(2048, 4096, allow_long=True) == 4096
    with pytest.raises(ValueError, match=r"^max_model_len=9 is longer than x's 8 positions \(\): it was not trained "
                                         r"for longer sequences$"):
        verify_max_model_len(8, 9, model="x", what="max_model_len", hint="")
    with pytest.raises(ValueError, match="states no maximum sequence length"):
        verify_max_model_len(None, None)
    assert verify_max_model_len(None, 512) == 512
    for bad in (0, -1, 1.5, True, "8"):
        with pytest.raises(ValueError, match="must be an integer ≥ 1"):
            verify_max_model_len(2048, bad)


def test_a_request_longer_than_the_server_is_refused_in_one_wording():
    check_request_len(0, 200, 56, 256)  # exactly the limit fits
    with pytest.raises(RequestTooLargeError) as err:
        check_request_len(7, 200, 57, 256)
    assert str(err.value) == ("request 7 needs 200 prompt + 57 output = 257 tokens, more than the server's maximum "
                              "sequence length max_seq_len=256: it can never be served")
    assert isinstance(err.value, ValueError)
