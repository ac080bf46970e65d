"""Model presets come from the published configurations; transformers' config classes agree (§3, Table 1)."""

from __future__ import annotations

import pytest

from paged.sim.model_spec import GiB, PUBLISHED_CONFIGS, get_model, kv_cache_slots, spec_from_config


@pytest.mark.parametrize("name", sorted(PUBLISHED_CONFIGS))
def test_presets_equal_what_transformers_configs_give(name):
    transformers = pytest.importorskip("transformers")
    values = dict(PUBLISHED_CONFIGS[name])
    cls = {"opt": transformers.OPTConfig, "llama": transformers.LlamaConfig}[values.pop("model_type")]
    assert spec_from_config(name, cls(**values)) == get_model(name)


def test_table1_kv_bytes_and_slots():
    opt13 = get_model("opt-13b")
    assert opt13.kv_bytes_per_token == 2 * 40 * 5120 * 2  # 800 KiB (§3)
    assert kv_cache_slots(opt13, 12 * GiB, 16) == 15_728  # Table 1: 15.7K
    assert 12.5e9 < opt13.num_params < 13.5e9


def test_unknown_model_names_the_choices():
    with pytest.raises(ValueError, match="unknown model 'gpt-5'.*opt-13b"):
        get_model("gpt-5")


def test_a_model_that_is_not_a_name_is_refused_by_type():
    from paged.sim.cost_model import get_cost_model

    with pytest.raises(TypeError, match="model must be a preset name"):
        get_model(13)
    with pytest.raises(TypeError, match="opt-13b"):
        get_cost_model(13, block_size=16)
    with pytest.raises(ValueError, match="unknown model 'opt-14b'"):
        get_model("opt-14b")


@pytest.mark.parametrize("kw, match", [({"block_size": 0}, "block_size must be an integer ≥ 1"),
                                       ({"block_size": "16"}, "block_size must be an integer ≥ 1"),
                                       ({"block_size": True}, "block_size must be an integer ≥ 1"),
                                       ({"cpu_scale": "1"}, "cpu_scale must be a finite number ≥ 0"),
                                       ({"cpu_scale": None}, "cpu_scale must be a finite number ≥ 0"),
                                       ({"cpu_scale": -1.0}, "cpu_scale must be a finite number ≥ 0")])
def test_get_cost_model_refuses_bad_numbers(kw, match):
    from paged.sim.cost_model import get_cost_model

    with pytest.raises(ValueError, match=match):
        get_cost_model("opt-13b", **{"block_size": 16, **kw})
