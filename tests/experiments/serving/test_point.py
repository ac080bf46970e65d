"""One simulated point (paged.experiments.serving.point): paper-length runs, early stop, saturated and
fixed-count points, bad input named."""

import math

import pytest

from paged.experiments import serving


def test_paper_length_point():
    row = serving.simulate_point("opt-13b", "sharegpt", "paged", 2.0, duration_scale=0.02)
    assert row["min_duration"] == pytest.approx(72.0)
    assert row["arrival_seconds"] in (250.0, 500.0)  # 72 s would hold ~144 requests: lengthened to ~MIN_REQUESTS
    assert row["num_requests"] > 100 and isinstance(row["converged"], bool)
    assert row["avg_decode_batched_requests"] >= row["avg_batched_requests"] > 0
    assert 0 <= row["first_half_latency"] and row["normalized_latency"] > 0
    assert serving.simulate_point("opt-175b", "sharegpt", "paged", 2.0, duration_scale=0.02)["min_duration"] == 18.0


def test_a_low_rate_run_holds_enough_requests():
    from paged.experiments.serving.run_length import MIN_REQUESTS, run_duration

    assert run_duration(3600.0, 10.0) == 3600.0 and run_duration(900.0, 0.002) == MIN_REQUESTS / 0.002
    row = serving.simulate_point("opt-175b", "sharegpt", "fastertransformer", 0.01, duration_scale=0.02)
    assert row["num_requests"] >= 0.8 * MIN_REQUESTS  # the paper's 15 minutes would hold ~9


def test_a_point_past_its_cap_stops_early():
    row = serving.simulate_point("opt-13b", "sharegpt", "orca-max", 3.0, duration_scale=0.1, latency_cap=0.5)
    assert row["stopped_early"] and not row["converged"] and row["normalized_latency"] > 0.5


def test_saturated_point_and_fixed_count_point():
    peak = serving.simulate_point("opt-13b", "sharegpt", "paged", math.inf, num_requests=200)
    assert peak["num_requests"] == 200 and peak["arrival_seconds"] == 0.0 and peak["throughput_rps"] > 0
    fixed = serving.simulate_point("opt-13b", "sharegpt", "paged", 2.0, num_requests=50, seed=4)
    assert fixed["num_requests"] == 50 and math.isnan(fixed["converged"])


def test_fastertransformer_has_no_host_costs():
    from paged.sim.config import ServingConfig

    assert ServingConfig(system="fastertransformer", cpu_scale=2.0).cost_model().cpu_scale == 0.0
    assert ServingConfig(system="paged", cpu_scale=2.0).cost_model().cpu_scale == 2.0


@pytest.mark.parametrize("kwargs,match", [(dict(num_requests=0), "num_requests"), (dict(num_requests=2.5), "num_requests"),
                                          (dict(rate=math.nan), "rate must be a number > 0"),
                                          (dict(rate=-1.0), "rate must be a number > 0"), (dict(rate="2"), "rate must be a number"),
                                          (dict(block_size=0, num_requests=5), "block_size must be an integer"),
                                          (dict(duration_scale=-1.0), "duration_scale must be a number > 0"),
                                          (dict(system="hf-generate"), "for the simulator"),
                                          (dict(latency_cap=-1, num_requests=20), "latency_cap must be a number > 0"),
                                          (dict(latency_cap=0.0, num_requests=20), "latency_cap must be a number > 0")])
def test_simulate_point_refuses_bad_input_naming_it(kwargs, match):
    with pytest.raises(ValueError, match=match):
        serving.simulate_point(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(prefix_caching="no"), dict(record_sharing="yes")])
def test_simulate_point_refuses_a_flag_that_is_not_a_bool(kwargs):
    with pytest.raises(ValueError, match=f"{next(iter(kwargs))} must be True"):
        serving.simulate_point(num_requests=5, **kwargs)


def test_every_system_refuses_a_request_longer_than_the_server_in_the_same_words():
    """A server whose longest sequence is 256 tokens: a 200 + 100-token request can never be served, and
    paged and Oracle (which reserve by need) refuse it as Max, Pow2 and FasterTransformer do, word for word;
    the same trace within the limit is served by all five."""
    from paged.core.kv_cache_manager import RequestTooLargeError
    from paged.sim.config import ServingConfig
    from paged.workloads import Trace

    model = "opt-13b@1xa100-40gb:256"
    too_long = Trace.from_lengths([20, 200, 30], [10, 100, 20])
    messages = set()
    for system in serving.SYSTEMS:
        with pytest.raises(RequestTooLargeError) as err:
            ServingConfig(model=model, system=system).serve(too_long)
        messages.add(str(err.value))
    assert messages == {"request 1 needs 200 prompt + 100 output = 300 tokens, more than the server's maximum "
                        "sequence length max_seq_len=256: it can never be served"}
    fits = Trace.from_lengths([20, 200, 30], [10, 56, 20])
    for system in serving.SYSTEMS:
        assert all(g.finished_time is not None for g in ServingConfig(model=model, system=system).serve(fits).groups)
