"""What bounds a run's iterations (notebook 06): the recording cost model returns the cost model's times
unchanged, and its shares follow the roofline."""

from __future__ import annotations

import math

import pytest

from paged.experiments.nb06_today.iteration_bounds import BoundRecorder, bound_profile
from paged.experiments.serving import simulate_point
from paged.sim.cost_model import get_cost_model

pytest.importorskip("transformers")


def test_recorder_returns_the_cost_models_times_and_tallies_them():
    cost = get_cost_model("llama-3.1-8b@1xh100-sxm:2048", block_size=16)
    rec = BoundRecorder.of(cost)
    assert rec.decode_time(4, 4000) == cost.decode_time(4, 4000)
    assert rec.decode_time(512, 512 * 300) == cost.decode_time(512, 512 * 300)
    assert rec.prefill_time([1000, 24]) == cost.prefill_time([1000, 24])
    t = rec.tally
    assert t["seconds"] == pytest.approx(cost.decode_time(4, 4000) + cost.decode_time(512, 512 * 300)
                                         + cost.prefill_time([1000, 24]))
    # a 4-sequence decode streams the weights (memory bound); 512 sequences and a 1,024-token prefill are compute bound
    assert t["compute_bound_seconds"] == pytest.approx(cost.decode_time(512, 512 * 300) + cost.prefill_time([1000, 24]))
    assert t["context_seconds"] == pytest.approx(cost.decode_time(4, 4000) - cost.decode_time(4, 0)
                                                 + cost.decode_time(512, 512 * 300) - cost.decode_time(512, 0))
    assert t["max_decode_batch"] == 512 and t["decode_iterations"] == 2
    assert rec == BoundRecorder.of(cost)  # the tally does not take part in equality


def test_bound_profile_is_the_saturated_run_of_simulate_point():
    prof = bound_profile("gemma-2b@1xl4:2048", "sharegpt", "orca-max", 80)
    row = simulate_point(model="gemma-2b@1xl4:2048", trace="sharegpt", system="orca-max", rate=math.inf,
                         num_requests=80, tokenizer="cl100k", record_sharing=False)
    assert prof["throughput_rps"] == pytest.approx(row["throughput_rps"])
    cap = get_cost_model("gemma-2b@1xl4:2048", paged_kernel=False, block_size=16)
    assert prof["max_decode_batch"] <= cap.num_kv_slots // cap.model.max_seq_len  # Orca (Max)'s reservations
    for key in ("prefill_share", "compute_bound_share", "context_share", "host_share"):
        assert 0 <= prof[key] <= 1


@pytest.mark.parametrize("system", ["paged", "orca-oracle"])
def test_recorder_prices_every_iteration_of_a_run(system):
    # the simulator's fast-forwarded decode runs price each iteration through decode_time: the tally is the run's
    # busy time (this run has no swaps or copies, which the tally leaves out)
    from paged.sim.config import ServingConfig
    from paged.experiments.serving.run_length import long_trace

    config = ServingConfig(model="opt-13b", system=system)
    rec = BoundRecorder.of(config.cost_model())
    result = config.replace(model=rec).serve(long_trace("sharegpt", math.inf, 120, 0, tokenizer="cl100k"))
    assert result.cow_blocks == 0 and result.kv_copy_tokens == 0
    assert rec.tally["seconds"] == pytest.approx(result.busy_seconds, rel=1e-9)
    assert rec.tally["decode_iterations"] == result.num_iterations - result.num_prefill_iterations
