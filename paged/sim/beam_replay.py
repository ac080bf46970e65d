"""Beam search in the simulator: recorded parent pointers of real beam-search runs, replayed (§4.4, Fig. 9).

Which beam candidates survive a step decides how many KV blocks a beam-search request holds: a
candidate that continues shares its parent's blocks, a dropped one frees those only it held, and the
copy-on-write of a shared last block allocates one block per extra writer. The simulator has no model
to decide this, so it replays what the project's engine decided: ``data/beam_traces.json`` holds, for
widths 2, 4 and 6, the parent index of every candidate at every step of beam searches the real engine
ran (:mod:`paged.tools.beam_traces` records them; the file says how).

Replay, and what it assumes:

* a request replays one recorded search (request ``i`` takes trace ``i mod count``); at step ``j`` the
  new candidate ``c`` continues the candidate ``parents[j][c]`` of the step before (best first);
* a request longer than its recording repeats the recorded steps after the first (step ``j ≥ L`` uses
  step ``1 + (j - 1) mod (L - 1)``): the survival pattern is taken to be stationary;
* every candidate generates the trace's output length (no hypothesis ends early: the recording ran
  with EOS ignored), so the request ends with ``width`` candidates after ``output_len`` steps;
* the pattern of a 3.8M-parameter model on short English prompts stands for OPT-13B's on Alpaca;
  it does not depend on the prompt or the output length.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from paged.workloads import data_path

__all__ = ["BEAM_TRACES_FILE", "BeamTrace", "load_beam_traces", "beam_trace"]

#: The recorded traces, in the package data (the repository's ``data/``).
BEAM_TRACES_FILE = "beam_traces.json"


@dataclass(frozen=True, slots=True)
class BeamTrace:
    """One recorded beam search: ``steps[j][c]`` is the parent (index among the previous step's
    candidates, best first) of candidate ``c`` after step ``j``; ``steps[0]`` has one parent, 0."""

    width: int
    steps: tuple[tuple[int, ...], ...]

    def parents(self, step: int) -> tuple[int, ...]:
        """The parents of step ``step`` (≥ 0), repeating the recording past its end (module docstring). O(1)."""
        steps = self.steps
        if step < len(steps):
            return steps[step]
        return steps[1 + (step - 1) % (len(steps) - 1)]


@lru_cache(maxsize=2)
def load_beam_traces(name: str = BEAM_TRACES_FILE) -> dict[int, tuple[BeamTrace, ...]]:
    """``{width: traces}`` from the package data file ``name``.

    Raises:
        FileNotFoundError: if the file is missing; ValueError: if a trace is malformed (names it).
    """
    data = json.loads(data_path(name).read_text(encoding="utf-8"))
    out: dict[int, tuple[BeamTrace, ...]] = {}
    for key, traces in data["traces"].items():
        width = int(key)
        parsed = []
        for t, steps in enumerate(traces):
            if len(steps) < 2 or any(len(s) != width or not all(0 <= p < (1 if j == 0 else width) for p in s)
                                     for j, s in enumerate(steps)):
                raise ValueError(f"{name}: trace {t} of width {width} is malformed (needs ≥ 2 steps of {width} "
                                 "parent indices, the first all 0)")
            parsed.append(BeamTrace(width, tuple(tuple(s) for s in steps)))
        out[width] = tuple(parsed)
    return out


def beam_trace(width: int, index: int) -> BeamTrace:
    """The recorded trace request ``index`` replays at beam width ``width``.

    Raises:
        ValueError: if no search of that width was recorded (lists the widths that were).
    """
    traces = load_beam_traces()
    if width not in traces:
        raise ValueError(f"no recorded beam-search trace of width {width}; recorded widths: {sorted(traces)} "
                         f"(record more with python -m paged.tools.beam_traces)")
    chosen = traces[width]
    return chosen[index % len(chosen)]
