"""README.md's claims table: generated from the committed figures' CSV files, one line per claim."""

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from paged.experiments.notebook import claims
from paged.experiments.serving.sustained import _sustained

ROOT = Path(__file__).resolve().parents[3]


def test_the_readme_table_is_the_one_the_committed_figures_give():
    assert not claims.update_readme(ROOT / "README.md", ROOT / "figures", check=True), \
        "README.md's claims table differs from figures/*.csv: run `python -m paged claims`"


def test_the_readme_is_short_and_has_one_line_per_claim():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text) <= 10_000, f"README.md is {len(text)} characters"
    table = text[text.index(claims.BEGIN) + len(claims.BEGIN): text.index(claims.END)].strip().splitlines()
    assert len(table) == 2 + len(claims.CLAIMS)
    for line, claim in zip(table[2:], claims.CLAIMS):
        assert line.startswith(f"| {claim.claim} |") and f"(figures/{claim.figure}.png)" in line
        assert (ROOT / "figures" / f"{claim.figure}.png").is_file() and "nan" not in line.lower()


def test_a_rewrite_puts_the_table_between_the_markers_and_keeps_the_rest(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\n{claims.BEGIN}\nstale\n{claims.END}\n\nafter\n", encoding="utf-8")
    assert claims.update_readme(readme, ROOT / "figures")
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# title\n\n") and text.endswith(f"{claims.END}\n\nafter\n") and "stale" not in text
    assert not claims.update_readme(readme, ROOT / "figures")  # a second run changes nothing


def test_a_changed_csv_changes_the_table(tmp_path):
    figures = tmp_path / "figures"
    shutil.copytree(ROOT / "figures", figures, ignore=shutil.ignore_patterns("*.png", "*.pdf"))
    frame = pd.read_csv(figures / "fig02_memory_waste.csv")
    frame.loc[frame["system"] == "paged", "token_states"] = 0.5
    frame.to_csv(figures / "fig02_memory_waste.csv", index=False)
    assert "paged 50.0%" in claims.claims_table(figures)


def test_no_markers_or_a_missing_csv_is_named(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# no table\n", encoding="utf-8")
    with pytest.raises(ValueError, match="markers"):
        claims.update_readme(readme, ROOT / "figures")
    with pytest.raises(FileNotFoundError, match="fig02_memory_waste.csv"):
        claims.claims_table(tmp_path)


def test_the_sustained_rate_from_points_ends_as_the_bisection_does():
    """The table's rate from a curve's points equals sustained_rate's with those points known."""
    rates = [1.0, 2.0, 3.0, 3.5, 3.7, 4.0]
    latency = [0.05, 0.08, 0.15, 0.19, 0.31, 0.6]
    points = pd.DataFrame({"rate": rates + [math.inf], "normalized_latency": latency + [math.nan],
                           "throughput_rps": [math.nan] * len(rates) + [4.2]})
    ours, peak = claims._sustained(points, 0.2)
    settings = dict(model="opt-13b", trace="sharegpt", seed=0, block_size=16, preemption="recompute", cpu_scale=1.0,
                    min_duration=60.0, num_requests=None, n=1, beam_width=1, prefix_caching=False, tokenizer="gpt2")
    known = pd.DataFrame([{**settings, "system": "paged", "rate": r, "normalized_latency": lat,
                           "throughput_rps": 4.2 if r == math.inf else r}
                          for r, lat in zip(points["rate"], points["normalized_latency"])])
    known.loc[known["rate"] == math.inf, "min_duration"] = math.nan
    rows, simulated = _sustained("paged", settings, (0.2,), 0.1, 1e-3, known, 100)
    assert not simulated and (ours, peak) == (rows[0]["sustained_rate"], rows[0]["throughput_rps"]) == (3.5, 4.2)


def test_fig13_leads_with_the_fig11_trace_and_fig17_gives_the_memory_bound_when_the_figures_hold_them(tmp_path):
    figures = tmp_path / "figures"
    shutil.copytree(ROOT / "figures", figures, ignore=shutil.ignore_patterns("*.png", "*.pdf"))
    fig13 = pd.read_csv(figures / "fig13_batched_requests.csv")
    fig13 = fig13[fig13["cpu_scale"] == 1]

    def batches(trace: str, load: str) -> tuple[float, str]:
        rows = fig13[(fig13["trace"] == trace) & (fig13["load"] == load)].set_index("system")
        text = ", ".join(f"{rows.loc[s, 'avg_decode_batched_requests']:.1f}"
                         for s in ("paged", "orca-oracle", "orca-pow2", "orca-max"))
        return float(rows["rate"].iloc[0]), text

    _, at_paper = batches("sharegpt-fig11", "paper (Fig. 11 means)")
    knee, at_knee = batches("sharegpt-fig11", "paged's knee (Fig. 11 means)")
    ours_knee, ours = batches("sharegpt", "paged's knee")
    pd.DataFrame({"system": ["paged", "orca-oracle", "orca-pow2", "orca-max"],
                  "requests_that_fit": [14.2, 8.7, 8.35, 7.68]}).to_csv(figures / "fig17_kv_footprint.csv", index=False)
    table = claims.claims_table(figures)
    line13 = next(line for line in table.splitlines() if "(figures/fig13_batched_requests.png)" in line)
    assert (f"| Fig. 11 lengths: {at_paper} (knee {knee:.2f}: {at_knee}); ours at knee {ours_knee:.2f}: {ours} |"
            in line13), line13
    line17 = next(line for line in table.splitlines() if "(figures/fig17_chatbot.png)" in line)
    assert line17.endswith("; memory allows ≤ 1.63, 1.70, 1.85× |")
    assert "| 2×; curves 1.25–1.45× (by eye) |" in line17

    full = pd.read_csv(figures / "fig13_batched_requests.csv")  # a run without the Fig. 11 trace's rows
    full[full["trace"] != "sharegpt-fig11"].to_csv(figures / "fig13_batched_requests.csv", index=False)
    line13 = next(line for line in claims.claims_table(figures).splitlines()
                  if "(figures/fig13_batched_requests.png)" in line)
    assert "Fig. 11 lengths" not in line13 and f"at paged's knee ({ours_knee:.2f} req/s) {ours}" in line13, line13
