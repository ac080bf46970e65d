"""The launch-parameter table (paper §4.1): its rule, its autotuning neighbours, tuned entries."""

from __future__ import annotations

import json

import pytest

from paged.kernels import launch_config as lc


@pytest.mark.parametrize("head_size", [32, 64, 80, 96, 128, 256])
@pytest.mark.parametrize("element_size", [2, 4])
def test_a_tile_holds_at_most_8192_values_and_4_warps_at_most_4096(head_size, element_size):
    values = lc.next_pow2(head_size) * element_size // 2
    for group in (1, 4):
        config = lc.decode_config(head_size, group, element_size)
        assert config.padded_dot == (group > 1)
        assert config.tile * values <= (lc.TILE_VALUES_DOT if config.padded_dot else lc.WARP4_VALUES) or config.tile == 16
        assert config.num_warps == 4 or config.tile * values > lc.WARP4_VALUES
        assert config.tile >= (16 if config.padded_dot else 8)  # tl.dot's smallest tile is 16
        assert config.padded_dot or config.tile <= 32


def test_sm90_takes_two_stages_where_three_spilled():
    assert lc.decode_config(128, 4, 2, 80).num_stages == 3
    assert lc.decode_config(128, 4, 2, 90).num_stages == 2
    assert lc.decode_config(256, 4, 2, 90).num_stages == 3


def test_candidates_start_with_the_table_entry_and_keep_its_path():
    candidates = lc.candidate_configs(128, 1, 2)
    assert candidates[0] == lc.decode_config(128, 1, 2)
    assert len(set(candidates)) == len(candidates) > 10
    assert not any(c.padded_dot for c in candidates) and min(c.tile for c in candidates) >= 8
    assert all(c.padded_dot and c.tile >= 16 for c in lc.candidate_configs(128, 8, 2))


def test_tuned_entries_are_preferred_until_forgotten(tmp_path):
    best = lc.LaunchConfig(tile=16, num_warps=2, num_stages=1, padded_dot=False)
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"entries": [{"key": lc.tuned_key(90, 128, 1, 2), "best": best.as_dict()},
                                            {"key": lc.tuned_key(90, 64, 1, 2), "best": None}]}))
    try:
        assert lc.use_tuned_configs(path) == {lc.tuned_key(90, 128, 1, 2): best}
        assert lc.decode_config(128, 1, 2, 90) == best
        assert lc.decode_config(128, 1, 2, 80) != best  # another arch keeps the table
    finally:
        lc.use_tuned_configs(None)
    assert lc.decode_config(128, 1, 2, 90) != best
    path.write_text("{}")
    with pytest.raises(ValueError, match="not an autotune result"):
        lc.use_tuned_configs(path)
    assert lc.tuned_key(80, 128, 5, 2) == lc.tuned_key(80, 128, 8, 2) != lc.tuned_key(80, 128, 1, 2)
