"""``python -m paged``: JSON output contracts and clear one-line errors."""

import json
import os
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "paged", *args], capture_output=True, text=True, timeout=300)


def test_fragmentation_json_is_one_object_with_four_systems():
    out = run("fragmentation", "--num-requests", "60", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert list(data) == ["orca-max", "orca-pow2", "orca-oracle", "paged"]
    for fractions in data.values():
        assert set(fractions) == {"token_states", "reservation", "internal", "external"}
        assert abs(sum(fractions.values()) - 1) < 1e-9


def test_simulate_json_has_the_documented_keys():
    out = run("simulate", "--num-requests", "50", "--rate", "1.0", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in ("normalized_latency", "throughput_rps", "throughput_tps", "avg_batched_requests",
                "num_preemptions", "sim_wall_seconds"):
        assert key in data


def test_simulate_a_config_json_on_named_gpus():
    from paged.workloads import data_path

    config = str(data_path("configs/llama-3.1-8b.json"))
    out = run("simulate", "--model", config, "--gpu", "h100-sxm", "--tp", "2", "--max-seq-len", "4096",
              "--num-requests", "40", "--rate", "4.0", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["model"] == f"{config}@2xh100-sxm:4096"


def test_simulate_refuses_a_model_that_does_not_fit_naming_its_bytes():
    out = run("simulate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--num-requests", "10")
    assert out.returncode == 2 and out.stdout == ""
    assert "llama-3.1-70b does not fit on 1x H100 SXM 80GB: its weights take 141,107,412,992 bytes" in out.stderr


@pytest.mark.parametrize("flags", [("--n", "4"), ("--beam-width", "4")])
def test_simulate_groups_print_the_blocks_saved_by_sharing(flags):
    out = run("simulate", "--trace", "alpaca", "--num-requests", "40", "--rate", "4.0", "--json", *flags)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {"normalized_latency", "throughput_rps", "num_preemptions", "sim_wall_seconds"} <= set(data)
    assert data["n" if flags[0] == "--n" else "beam_width"] == 4
    assert 0 < data["kv_sharing_saving"] < 1
    assert data["kv_blocks_in_use_mean"] < data["kv_blocks_without_sharing_mean"]
    plain = json.loads(run("simulate", "--trace", "alpaca", "--num-requests", "40", "--rate", "4.0", "--json",
                           "--system", "orca-oracle", *flags).stdout)
    assert plain["kv_sharing_saving"] == 0  # Orca cannot share


@pytest.mark.parametrize("args, message", [
    (("simulate", "--n", "2", "--beam-width", "2"), "cannot both be above 1"),
    (("simulate", "--beam-width", "3"), "no recorded beam-search trace of width 3"),
    (("simulate", "--system", "orca-max", "--prefix-caching"), "no prefix caching"),
    (("fragmentation", "--trace", "missing.csv"), "neither a file"),
    (("fragmentation", "--num-requests", "0"), "must be ≥ 1"),
    (("simulate", "--rate", "-1"), "rate"),
    (("simulate", "--num-requests", "999999"), "999999"),
    (("simulate", "--seed", "-1"), "--seed"),
    (("simulate", "--rate", "1e-16"), "below 1e-06"),
    (("fragmentation", "--kv-cache-gib", "0"), "--kv-cache-gib"),
    (("fragmentation", "--num-requests", "2"), "no iteration had a waiting request"),
    (("fragmentation", "--max-seq-len", "10"), "max_seq_len=10"),
    (("simulate", "--num-requests", "al"), "must be an integer ≥ 1 or 'all', got 'al'"),
    (("report", "--notebooks", "build/none"), "no executed notebooks in 'build/none'"),
    (("simulate", "--gpu", "a100-40gb", "--max-seq-len", "10"),
     "more than the server's maximum sequence length max_seq_len=10: it can never be served"),
    (("simulate", "--gpu", "a100-80gb", "--max-seq-len", "4096"), "max_seq_len=4096 is longer than opt-13b's 2048"),
    (("simulate", "--allow-long-max-seq-len"), "--allow-long-max-seq-len needs --max-seq-len"),
    (("simulate", "--max-seq-len", "4096"), "--max-seq-len sets up a server of your own: give --gpu too"),
    (("simulate", "--tp", "2"), "--tp sets up a server of your own: give --gpu too"),
    (("simulate", "--trace", "alpaca-synthetic", "--tokenizer", "cl100k"), "alpaca-synthetic draws its lengths"),
    (("fragmentation", "--trace", "data/traces/x.csv", "--tokenizer", "cl100k"), "x.csv is counted already"),
    (("fragmentation", "--max-seq-len", "4096"), "max_seq_len=4096 is longer than opt-13b's 2048 positions"),
    (("simulate", "--block-size", "0"), "error: argument --block-size: must be ≥ 1, got 0 (see python -m paged simulate"),
])
def test_bad_input_is_one_clear_error(args, message):
    out = run(*args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1 and out.stdout == ""


def test_a_length_beyond_the_models_positions_is_recorded_when_allowed(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_len,output_len\n" + "".join(f"{2000 + i},{100 + i}\n" for i in range(10)))
    out = run("simulate", "--trace", str(trace), "--num-requests", "all", "--gpu", "a100-80gb", "--max-seq-len", "4096",
              "--allow-long-max-seq-len", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["model"] == "opt-13b@1xa100-80gb:4096!"
    assert out.stderr.startswith("warning: --max-seq-len 4096 is beyond the model's 2048 positions")


def test_json_stays_valid_with_an_infinite_rate(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_len,output_len\n" + "".join(f"{10 + i},{20 + i}\n" for i in range(20)))
    out = run("simulate", "--trace", str(trace), "--num-requests", "20", "--rate", "inf", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)  # strict JSON: no Infinity
    assert data["rate"] == "inf" and data["num_requests"] == 20


@pytest.mark.parametrize("module, args, message", [
    ("paged.bench.engine", ("--num-requests", "0"), "argument --num-requests: must be ≥ 1"),
    ("paged.bench.engine", ("--model", "/nonexistent/model"), "does not exist"),
    ("paged.bench.engine_profile", ("--threads", "-1"), "argument --threads: must be ≥ 0"),
    ("paged.bench.kernel", ("--num-kv-heads", "3", "--context-lens", "16", "--batch-sizes", "1"),
     "must be a multiple of num_kv_heads=3"),
    ("paged.bench.kernel", ("--block-size", "0"), "argument --block-size: must be ≥ 1"),
    ("paged.bench.sim", ("--rate", "0"), "argument --rate: must be a finite number > 0"),
    ("paged.bench.allocator", ("--number", "0"), "argument --number: must be ≥ 1"),
    ("paged.bench.engine", ("--model", "README.md"), "not a transformers model directory"),
    ("paged.bench.engine", ("--kv-cache-tokens", "1"), "kv_cache_tokens=1 is less than one block"),
    ("paged.bench.kernel", ("--context-lens", "1000000000", "--batch-sizes", "1000"), "nothing to measure"),
    ("paged", ("traces", "--out-dir", "build/never", "--path", "README.md"), "not a JSON list"),
])
def test_benchmarks_refuse_bad_arguments_in_one_line(module, args, message):
    out = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def _custom_trace(tmp_path, n=30):
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_len,output_len\n" + "".join(f"{10 + i},{20 + i}\n" for i in range(n)))
    return trace


def test_all_requests_of_a_custom_trace(tmp_path):
    trace = _custom_trace(tmp_path)
    out = run("simulate", "--trace", str(trace), "--num-requests", "all", "--rate", "inf", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["num_requests"] == 30
    out = run("fragmentation", "--trace", str(trace), "--num-requests", "ALL", "--kv-cache-gib", "0.1",
              "--max-seq-len", "128", "--json")
    assert out.returncode == 0, out.stderr
    assert "30 requests (all of" in out.stderr and set(json.loads(out.stdout)) >= {"paged", "orca-max"}
    # without "all" the default of 1,000 cannot be drawn from 30 requests
    assert "cannot sample 1000" in run("simulate", "--trace", str(trace)).stderr


@pytest.mark.parametrize("backend, module", [("ray", "ray"), ("dask", "distributed")])
def test_a_backend_that_is_not_installed_is_one_line(tmp_path, backend, module):
    import importlib.util
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here, so the --backend {backend} error cannot be provoked")
    out = run("sweep-notebook", "notebooks/01_fragmentation.ipynb", "--grid", "{block_size: [8]}",
              "--out", str(tmp_path), "--backend", backend)
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: --backend {backend}: ") and "pip install" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())  # nothing ran


def test_help_builds_its_choices_without_pandas_numpy_or_torch():
    """The parser's choices come from light modules; the heavy ones load only when a command runs."""
    code = ("import sys; from paged.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('pandas', 'numpy', 'torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_help_starts_within_half_a_second_of_a_bare_interpreter():
    """`python -m paged --help` against `python -c pass`, five interleaved rounds, medians: within
    0.5 s of it, or (on a loaded machine, where both slow down alike) within 8× its time. Building
    the choices from pandas took 20× a bare interpreter; the light modules take about 3×."""
    import statistics
    import time

    def seconds(*args):
        start = time.perf_counter()
        subprocess.run([sys.executable, *args], capture_output=True, check=True, timeout=120)
        return time.perf_counter() - start

    bare, helped = [], []
    for _ in range(5):
        bare.append(seconds("-c", "pass"))
        helped.append(seconds("-m", "paged", "--help"))
    overhead = statistics.median(h - b for h, b in zip(helped, bare))
    ratio = statistics.median(helped) / statistics.median(bare)
    assert overhead <= 0.5 or ratio <= 8, f"--help: {overhead:.2f} s over a bare interpreter, {ratio:.1f}× its time"


def test_claims_check_names_a_stale_table(tmp_path):
    from paged.experiments.notebook.claims import BEGIN, END

    readme = tmp_path / "README.md"
    readme.write_text(f"{BEGIN}\nold\n{END}\n", encoding="utf-8")
    out = run("claims", "--readme", str(readme), "--check")
    assert out.returncode == 1 and "differs" in out.stderr
    assert run("claims", "--readme", str(readme)).returncode == 0
    assert run("claims", "--readme", str(readme), "--check").returncode == 0


def test_ctrl_c_ends_in_one_line_and_status_130(capsys):
    """Ctrl-C during a command: one ``interrupted`` line (no traceback) and the shell's 128 + SIGINT."""
    import argparse

    from paged.cli import run_command

    def body(args):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exit_info:
        run_command(argparse.ArgumentParser(prog="paged"), body, [])
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """``python -m paged ... | head``: a closed pipe is not an error (exit 0, nothing on stderr)."""
    # 300 requests: the cache binds, so no note on stderr either
    cmd = [sys.executable, "-m", "paged", "fragmentation", "--json", "--num-requests", "300"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader leaves before the command writes (as `head` does once it has its lines)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == "", err


def test_block_manager_refuses_a_watermark_that_is_not_a_number():
    from paged import PagedKVCacheManager

    for bad in ("x", None, True, float("nan"), 1.0):
        with pytest.raises(ValueError, match="watermark must be a number in"):
            PagedKVCacheManager(16, 4, watermark=bad)


def test_simulate_says_the_sharing_line_only_where_something_can_be_shared():
    alone = run("simulate", "--num-requests", "30")
    assert alone.returncode == 0, alone.stderr
    assert "KV blocks saved by sharing" not in alone.stdout  # one sequence a request, no shared prefix
    samples = run("simulate", "--num-requests", "30", "--n", "2", "--system", "orca-oracle")
    assert "KV blocks saved by sharing: 0.0% of" in samples.stdout  # could share; Orca does not


def test_fragmentation_warns_when_the_cache_did_not_bind_the_run():
    small = run("fragmentation", "--num-requests", "50")
    assert small.returncode == 0, small.stderr
    assert small.stderr.startswith("warning: The cache did NOT bind this run: paged left")
    assert "token states" in small.stdout
    bound = run("fragmentation", "--num-requests", "300")
    assert bound.returncode == 0 and "did NOT bind" not in bound.stderr


def test_a_sweep_refuses_an_empty_address_and_more_local_workers_than_the_machine_can_run(tmp_path):
    common = ("sweep-notebook", "notebooks/01_fragmentation.ipynb", "--grid", "{block_size: [8]}", "--out",
              str(tmp_path / "out"))
    out = run(*common, "--backend", "dask", "--address", "")
    assert out.returncode == 2 and "--address: must be a cluster address, got an empty string" in out.stderr
    many = 4 * (os.cpu_count() or 1) + 1
    out = run(*common, "--workers", str(many))
    assert out.returncode == 2 and f"--workers {many}: more than 4 × this machine's" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "out").exists()  # nothing started
