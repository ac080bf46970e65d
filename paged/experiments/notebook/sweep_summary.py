"""A notebook sweep's summary: one row per run, with the notebook's headline numbers, and their figure.

``summary.csv`` beside the runs has, per parameter set of the grid: ``folder`` (relative to the
sweep's folder), the parameters, ``status`` (finished, failed, interrupted, running, pending: not
started, outdated: finished by other code or another version of the notebook, rerun by the next
sweep), ``seconds``, ``ended``, ``error`` (the error's last line), and one column per claim of
the notebook in README.md's claims table (:data:`paged.experiments.notebook.claims.CLAIMS`): this
run's text of that claim, read from the run's figure CSVs as ``python -m paged claims`` reads
``figures/``. ``summary.png`` (and ``.pdf``) plots the numbers each claim quotes against the first
parameter that varies over the grid (lines for the other varying ones), when a parameter varies
and some run has headline numbers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from paged.experiments.notebook.run_folder import PARTIAL, read_record, sweep_identity

__all__ = ["summarize", "headlines", "quoted_numbers", "interrupted_message", "SUMMARY_COLUMNS"]

#: The columns every summary has, after ``folder`` and the parameters.
SUMMARY_COLUMNS = ("status", "seconds", "ended", "error")


def headlines(notebook: str | Path, figures: str | Path) -> dict[str, str | None]:
    """The notebook's claims (README.md's rows for it) as this run's figures in ``figures`` give them:
    ``{"Fig. 12: <claim>": text}``; None for a claim whose CSV is missing or lacks its rows.
    {} for a notebook without claims (the tour, a notebook of one's own)."""
    from paged.experiments.notebook import claims

    number = Path(notebook).name[:2]
    folder = Path(figures)
    cache: dict = {}

    def read(name):
        if name not in cache:
            cache[name] = pd.read_csv(folder / f"{name}.csv")
        return cache[name]

    out = {}
    for claim in claims.CLAIMS:
        if claim.notebook != number:
            continue
        match = re.match(r"fig(\d+[a-z]?)_", claim.figure)
        label = f"Fig. {match.group(1).lstrip('0')}" if match else claim.figure.replace("_", " ")
        try:
            out[f"{label}: {claim.claim}"] = claim.ours(read)
        except (OSError, KeyError, ValueError, IndexError, ZeroDivisionError):
            out[f"{label}: {claim.claim}"] = None
    return out


_NUMBER = re.compile(r"(?<![\w.\-–])(?<!= )(\d+(?:\.\d+)?)([×%])?(?![\w.×]|\s*(?:s/token|req/s|threads?|requests|rounds)\b)")


def quoted_numbers(text: str | None) -> dict[str, float]:
    """The numbers a claim's text quotes, by label: the text is cut at ``,``, ``;``, ``→`` and an
    opening parenthesis before words, and each piece gives its first number (``n = 6``, a count of requests, rounds or threads, a rate in req/s or
    s/token, or a number inside a name such as ``13B`` or ``A100`` is a setting, skipped), labelled
    by the words before it (``"13B 1.78×, 66B 2.21×"`` → ``{"13B": 1.78, "66B": 2.21}``; a piece
    with no words before its number is ``#k``, its position)."""
    out: dict[str, float] = {}
    for k, piece in enumerate(re.split(r"[,;]\s+|\s*→\s*|\s+\((?=[A-Za-z])", text or ""), start=1):
        match = _NUMBER.search(piece)
        if match is None:
            continue
        label = piece[: match.start()].strip(" (:÷") or f"#{k}"
        while label in out:
            label += f" #{k}"
        out[label] = float(match.group(1))
    return out


def _run_state(out: Path, name: str, code: str, nb_hash: str) -> tuple[str, dict]:
    """``(folder, record)`` of run ``name``: its newest unfinished attempt if one is newer than its
    run (a sweep rerunning it was interrupted), else its run, else ``(name, {})``."""
    final = read_record(out / name)
    partials = sorted((p for p in out.glob(f"{name}{PARTIAL}*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    if partials:
        record = read_record(partials[-1])
        if record and (not final or str(record.get("started", "")) >= str(final.get("ended", ""))):
            return partials[-1].name, record
    if final and final.get("status") == "finished" and (final.get("code"), final.get("notebook_hash")) != (code, nb_hash):
        return name, {**final, "status": "outdated"}
    return name, final


def summarize(out: str | Path, notebook: str | Path, names: list[str], parameter_sets: list[dict], *,
              figure: bool = True) -> pd.DataFrame:
    """The sweep's summary table (module docstring), written to ``out/summary.csv`` (atomically);
    with ``figure``, ``out/summary.png`` and ``.pdf`` too, where there is something to plot."""
    from paged.atomic import atomic_path

    out, notebook = Path(out), Path(notebook)
    code, nb_hash = sweep_identity(notebook)
    rows = []
    for name, params in zip(names, parameter_sets):
        folder, record = _run_state(out, name, code, nb_hash)
        figures = Path(params.get("output_dir") or out / folder / "figures")
        heads = headlines(notebook, figures) if record.get("status") in ("finished", "outdated") else \
            dict.fromkeys(headlines(notebook, out / ".none"))
        rows.append({"folder": folder, **{k: _cell(v) for k, v in params.items()},
                     "status": record.get("status", "pending"), "seconds": record.get("seconds"),
                     "ended": record.get("ended"), "error": record.get("error"), **heads})
    table = pd.DataFrame(rows)
    with atomic_path(out / "summary.csv") as tmp:
        table.to_csv(tmp, index=False, lineterminator="\n")
    if figure:
        _plot(out, table, parameter_sets)
    return table


def _cell(value):
    """A parameter value for one CSV cell (lists and dicts as JSON)."""
    return json.dumps(value) if isinstance(value, (list, dict, tuple)) else value


def _plot(out: Path, table: pd.DataFrame, parameter_sets: list[dict]) -> None:
    """``summary.png``/``.pdf``: each claim's quoted numbers against the first varying parameter."""
    varying = [k for k in dict.fromkeys(k for p in parameter_sets for k in p)
               if len({json.dumps(p.get(k), sort_keys=True, default=str) for p in parameter_sets}) > 1]
    claims = [c for c in table.columns if c.startswith(("Fig. ", "engine ", "today ")) and table[c].notna().any()]
    if not varying or not claims:
        for ext in ("png", "pdf"):  # an earlier grid's figure would not be this sweep's
            (out / f"summary.{ext}").unlink(missing_ok=True)
        return
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from paged.atomic import atomic_path

    x_name, others = varying[0], varying[1:]
    xs = table[x_name]
    numeric = pd.api.types.is_numeric_dtype(xs)
    positions = xs if numeric else pd.Series(pd.factorize(xs)[0], index=xs.index)
    cols = min(len(claims), 3)
    rows = -(-len(claims) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, claim in zip(axes.flat, claims):
        numbers = pd.DataFrame([quoted_numbers(t) if isinstance(t, str) else {} for t in table[claim]], index=table.index)
        groups = table.groupby([table[o].astype(str) for o in others], sort=False) if others else [((), table)]
        for key, part in groups:
            suffix = ", ".join(f"{o}={v}" for o, v in zip(others, key if isinstance(key, tuple) else (key,)))
            for label in numbers.columns:
                ys = numbers.loc[part.index, label]
                if ys.notna().any():
                    order = positions.loc[part.index].sort_values().index
                    ax.plot(positions.loc[order], ys.loc[order], marker="o", label=f"{label}{' · ' + suffix if suffix else ''}")
        ax.set_title(_wrap(claim), fontsize=8)
        ax.set_xlabel(x_name)
        units = {m.group(2) for t in table[claim] if isinstance(t, str) for m in _NUMBER.finditer(t)}
        ax.set_ylabel({frozenset({"%"}): "percent, as the claim quotes it",
                       frozenset({"×"}): "ratio (×), as the claim quotes it"}.get(frozenset(units),
                                                                                  "as the claim quotes it"), fontsize=8)
        values = sorted(pd.unique(xs)) if numeric else list(pd.unique(xs))
        if numeric and min(values) > 0 and max(values) >= 8 * min(values):
            ax.set_xscale("log", base=2)  # block sizes, request counts: doublings equally spaced
        if len(values) <= 10:  # ticks at the swept values only (no 12.5 between 8 and 16)
            ax.set_xticks(values if numeric else range(len(values)), [f"{v:g}" if numeric else str(v) for v in values])
            ax.minorticks_off()
        if ax.lines and len(ax.lines) <= 8:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(claims):]:
        ax.set_visible(False)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        with atomic_path(out / f"summary.{ext}") as tmp:
            fig.savefig(tmp, format=ext, metadata={"Software": None} if ext == "png" else
                        {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None})
    plt.close(fig)


def _wrap(text: str, width: int = 48) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)[:3])


def interrupted_message(out: Path, summary: pd.DataFrame) -> str:
    """One line: what an interrupted sweep finished, what it left, how to resume."""
    counts = summary["status"].value_counts()
    done = int(counts.get("finished", 0))
    unfinished = summary.loc[summary["status"].isin(["interrupted", "running"]), "folder"].tolist()
    left = int(counts.get("pending", 0)) + int(counts.get("outdated", 0))
    parts = [f"{done} of {len(summary)} runs finished"]
    if int(counts.get("failed", 0)):
        parts.append(f"{int(counts['failed'])} failed")
    if unfinished:
        parts.append(f"{len(unfinished)} marked interrupted ({', '.join(unfinished[:3])}{', ...' if len(unfinished) > 3 else ''})")
    if left:
        parts.append(f"{left} not started")
    return f"interrupted: {', '.join(parts)}; the same command resumes (summary: {out / 'summary.csv'})"


def print_summary(summary: pd.DataFrame, out: str | Path) -> None:
    """Print the summary: one line per run (folder, parameters, status, seconds, error), each run's
    headline claims under it, where the table and figure are, and on stderr one line per failed run
    naming its executed notebook."""
    import sys

    out = Path(out)
    heads = [c for c in summary.columns if c.startswith(("Fig. ", "engine ", "today "))]
    main = summary.drop(columns=heads + ["ended"]).copy()
    main["seconds"] = main["seconds"].map(lambda s: "" if pd.isna(s) else f"{s:.1f}")
    main["error"] = main["error"].map(lambda e: "" if not isinstance(e, str) else e if len(e) <= 70 else e[:67] + "...")
    if "output_dir" in main and main["output_dir"].isna().all():
        main = main.drop(columns=["output_dir"])
    print(main.to_string(index=False))
    for _, row in summary.iterrows():
        lines = [f"  {h.split(':')[0]}: {row[h]}" for h in heads if isinstance(row[h], str)]
        if lines:
            print(row["folder"], *lines, sep="\n")
    figure = out / "summary.png"
    print(f"summary: {out / 'summary.csv'}" + (f", figure: {figure}" if figure.exists() else ""))
    for _, row in summary[summary["status"] == "failed"].iterrows():
        notebooks = sorted((out / row["folder"]).glob("*.ipynb"))
        where = notebooks[0] if notebooks else out / row["folder"]
        print(f"error: {where}: {row['error']}", file=sys.stderr)
