"""A length-weighted resample of a real trace whose means hit given targets (a sensitivity check).

The paper's ShareGPT means (Fig. 11: 161.31 prompt / 337.99 output tokens) differ from this
project's (data/README.md says why: data, tokenizer, filters). To see how much that difference moves a
result, :func:`tilted_sample` draws real (prompt, output) pairs of a trace WITH replacement, pair
``i`` with probability ``∝ exp(a · prompt_i + b · output_i)``, the exponential tilt whose ``(a, b)``
make the weighted means equal the targets (the tilt is the distribution closest to the empirical one
in relative entropy among those with those means). Every drawn request is a real pair; only how
often each appears changes. Not the paper's trace: a labelled sensitivity input.
"""

from __future__ import annotations

import numpy as np

from paged.workloads.trace import Trace

__all__ = ["SHAREGPT_PAPER_MEANS", "tilt_weights", "tilted_sample"]

#: The paper's ShareGPT means (Fig. 11a, tokens): prompt 161.31, output 337.99.
SHAREGPT_PAPER_MEANS = (161.31, 337.99)


def tilt_weights(prompt_lens, output_lens, prompt_mean: float, output_mean: float, *, iterations: int = 100) -> np.ndarray:
    """Probabilities ``∝ exp(a·prompt + b·output)`` (float64, summing to 1) whose weighted means are
    ``prompt_mean`` and ``output_mean`` tokens (Newton's method on the convex dual, lengths scaled
    to unit variance). O(len · iterations).

    Raises:
        ValueError: if a target is not strictly inside the range of its lengths, or Newton's method
            does not reach the means within 1e-6 tokens.
    """
    x = np.column_stack([np.asarray(prompt_lens, dtype=np.float64), np.asarray(output_lens, dtype=np.float64)])
    target = np.array([prompt_mean, output_mean], dtype=np.float64)
    for k, name in enumerate(("prompt", "output")):
        if not x[:, k].min() < target[k] < x[:, k].max():
            raise ValueError(f"target mean {name} length {target[k]} is not inside the trace's range "
                             f"[{x[:, k].min():g}, {x[:, k].max():g}] tokens")
    scale = x.std(axis=0)
    z = (x - x.mean(axis=0)) / scale
    zt = (target - x.mean(axis=0)) / scale
    theta = np.zeros(2)
    for _ in range(iterations):
        logits = z @ theta
        w = np.exp(logits - logits.max())
        w /= w.sum()
        mean = w @ z
        gap = mean - zt
        if np.all(np.abs(gap * scale) < 1e-6):
            return w
        cov = (z * w[:, None]).T @ z - np.outer(mean, mean)
        step = np.linalg.solve(cov + 1e-12 * np.eye(2), gap)
        t = 1.0  # backtracking on the dual objective keeps Newton's steps safe far from the optimum
        dual = np.log(np.exp(logits - logits.max()).sum()) + logits.max() - theta @ zt
        while t > 1e-8:
            new = theta - t * step
            nl = z @ new
            if np.log(np.exp(nl - nl.max()).sum()) + nl.max() - new @ zt <= dual:
                break
            t /= 2
        theta = theta - t * step
    raise ValueError(f"the length tilt did not reach the means {prompt_mean}, {output_mean} in {iterations} steps")


def tilted_sample(trace: Trace, prompt_mean: float, output_mean: float, num_requests: int | None = None,
                  seed: int = 0) -> Trace:
    """``num_requests`` (default: as many as ``trace`` has) real pairs of ``trace`` drawn with
    replacement by :func:`tilt_weights`, in draw order, all arriving at 0 s; the sample's means are
    near the targets (exactly in expectation). Deterministic for a seed. O(len).

    Raises:
        ValueError: as :func:`tilt_weights`, or ``num_requests`` < 1.
    """
    n = len(trace) if num_requests is None else int(num_requests)
    if n < 1:
        raise ValueError(f"num_requests must be ≥ 1, got {num_requests}")
    prompts = np.array([r.prompt_len for r in trace], dtype=np.int64)
    outputs = np.array([r.output_len for r in trace], dtype=np.int64)
    w = tilt_weights(prompts, outputs, prompt_mean, output_mean)
    idx = np.random.default_rng(seed).choice(len(trace), size=n, replace=True, p=w)
    return Trace.from_lengths(prompts[idx], outputs[idx], name=f"{trace.name}-tilted",
                              source=f"{trace.source}; length-tilted resample to means {prompt_mean:g} / "
                                     f"{output_mean:g} tokens (seed {seed})")
