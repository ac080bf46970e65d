"""Record the beam-search traces the simulator replays (:mod:`paged.sim.beam_replay`, §4.4).

The real engine runs beam search (its step follows Hugging Face's, :mod:`paged.engine.beam_search`)
with the shipped model on :data:`PROMPTS`, EOS ignored so every search runs ``steps`` steps, and
keeps from each step's ``beam_history`` which candidate each new candidate continues (parent
indices, best first). The result, with its provenance, is written as JSON; the committed
``data/beam_traces.json`` came from the default command (5 minutes on the 2 shared cores of the
dev machine; the same file again with the same torch on the same CPU, floating-point ties aside):

    python -m paged.tools.beam_traces --out data/beam_traces.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["PROMPTS", "record_beam_traces", "main"]

#: Prompts written for this recording (instruction-like, as in Alpaca; in the shipped model's
#: "User: ... Assistant:" format of its ShareGPT training text).
PROMPTS = (
    "How do I bake bread at home?",
    "Write a short poem about the sea.",
    "Explain what a hash table is.",
    "Give me three tips for learning a new language.",
    "What is the difference between a list and a tuple in Python?",
    "Summarize the plot of a detective story in two sentences.",
    "How can I improve my sleep?",
    "Translate 'good morning' into French and Spanish.",
    "Why is the sky blue?",
    "Suggest a name for a small coffee shop.",
    "What should I pack for a weekend hiking trip?",
    "Describe how a bicycle works.",
)


def record_beam_traces(model_path, widths=(2, 4, 6), steps: int = 128, num_gpu_blocks: int = 4096) -> dict:
    """Run the engine's beam search on :data:`PROMPTS` for each width; the JSON-ready recording.

    Returns:
        ``{"description", "provenance", "traces": {str(width): [trace, ...]}}``; a trace is a list of
        ``steps - 1`` steps (the last step only finishes the hypotheses), each the parent index of
        every new candidate, the first step's all 0.
    """
    from paged.engine import LLM, SamplingParams

    llm = LLM(model_path, num_gpu_blocks=num_gpu_blocks)
    prompts = [f"User: {p}\nAssistant:" for p in PROMPTS]
    traces: dict[str, list] = {}
    for width in widths:
        outs = llm.generate(prompts, SamplingParams(beam_width=width, max_tokens=steps, ignore_eos=True),
                            use_tqdm=False)
        recorded = []
        for out in outs:
            history = [h for h in out.metrics["beam_history"] if h["parents"]]
            recorded.append([[h["seq_ids"].index(p) for p in h["parents"]] for h in history])
        traces[str(width)] = recorded
    return {
        "description": "Beam-search parent pointers recorded from the project's engine, replayed by "
                       "paged.sim.beam_replay: traces[width][request][step][candidate] = index of the "
                       "candidate's parent among the previous step's candidates (best first).",
        "provenance": {"model": "data/models/sharegpt-llama-tiny (the shipped model)",
                       "engine": "paged.engine.LLM, beam search as Hugging Face transformers 5.x",
                       "sampling": {"max_tokens": steps, "ignore_eos": True, "length_penalty": 1.0,
                                    "early_stopping": False},
                       "prompts": "paged.tools.beam_traces.PROMPTS in 'User: ...\\nAssistant:' format",
                       "rebuild": "python -m paged.tools.beam_traces --out data/beam_traces.json"},
        "traces": traces,
    }


def main(argv: list[str] | None = None) -> None:
    """``python -m paged.tools.beam_traces --out FILE [--model DIR] [--steps N]``."""
    from paged.workloads import data_path

    parser = argparse.ArgumentParser(prog="python -m paged.tools.beam_traces", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write (e.g. data/beam_traces.json)")
    parser.add_argument("--model", default=None, help="model directory (default: the shipped model)")
    parser.add_argument("--steps", type=int, default=128, help="beam-search steps per request")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be ≥ 2")
    data = record_beam_traces(args.model or data_path("models/sharegpt-llama-tiny"), steps=args.steps)
    Path(args.out).write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: " + ", ".join(f"width {w}: {len(t)} traces" for w, t in data["traces"].items()))


if __name__ == "__main__":
    main()
