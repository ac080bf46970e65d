"""FasterTransformer's request-level (static) batching, simulated (paper §6.1).

The earliest ≤ ``B`` arrived requests run as one batch to completion, ``B`` as large as memory
allows when every request reserves the maximum sequence length. Prompts are padded to the batch's
longest, every request stays in the batch until the longest output is done, and a request's
results return when its batch ends (request-level scheduling, as described by Orca, Yu et al.,
OSDI 2022, §2.2). There is no iteration-level scheduler and no KV cache manager: the batch's
reservations are fixed for its whole life, so this is its own loop over the cost model. A batch's
decode steps differ only by one context token per sequence, and the cost model's decode time is
linear in the context, so their times are summed in closed form (equal to the step-by-step sum up
to float rounding), O(1) per batch.
"""

from __future__ import annotations

from paged.core.max_model_len import check_request_len
from paged.core.serving_loop import ServingResult
from paged.sim.cost_model import CostModel
from paged.sim.simulator import groups_from_trace

__all__ = ["simulate_static_batching"]


def simulate_static_batching(trace, cost: CostModel, max_batch_size: int) -> ServingResult:
    """FasterTransformer-style request-level batching (module docstring) on ``cost``.

    Args:
        trace: requests with ``prompt_len``, ``output_len`` (tokens), ``arrival_time`` (s).
        cost: the cost model (contiguous kernel).
        max_batch_size: most requests per batch (requests).

    Returns:
        A :class:`~paged.core.serving_loop.ServingResult` with every group's times set.

    Raises:
        ValueError: if ``max_batch_size`` < 1 or a request has an empty prompt or output;
            RequestTooLargeError (a ValueError) if it exceeds the maximum sequence length.
    """
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be ≥ 1, got {max_batch_size}")
    groups = groups_from_trace(trace)
    limit = cost.model.max_seq_len
    for g in groups:
        if g.prompt_len < 1 or g.output_len < 1:
            raise ValueError(f"request {g.request_id!r}: prompt {g.prompt_len} + output {g.output_len} tokens must be "
                             f"≥ 1 each")
        check_request_len(g.request_id, g.prompt_len, g.output_len, limit)  # the message every system gives
    result = ServingResult(groups)
    now, i, n = 0.0, 0, len(groups)
    while i < n:
        now = max(now, groups[i].arrival_time)
        j = i + 1
        while j < n and j - i < max_batch_size and groups[j].arrival_time <= now:
            j += 1
        batch = groups[i:j]
        b = len(batch)
        longest_prompt = max(g.prompt_len for g in batch)
        longest_output = max(g.output_len for g in batch)
        start = now
        for g in batch:
            g.first_scheduled_time = now
        now += cost.prefill_time([longest_prompt] * b)
        for g in batch:
            g.first_token_time = now
        steps = longest_output - 1  # decode steps after the prefill's first token
        if steps:  # decode_time is linear in the context: sum the arithmetic series at once
            first = cost.decode_time(b, b * (longest_prompt + 1))
            growth = cost.decode_time(b, b * (longest_prompt + 2)) - first if steps > 1 else 0.0
            now += steps * first + growth * (steps * (steps - 1) / 2)
        for g in batch:
            g.seqs[0].num_generated = g.output_len
            g.finished_time = now
        result.busy_seconds += now - start
        result.batched_requests_seconds += (now - start) * b
        result.num_iterations += longest_output  # one prefill, then longest_output - 1 decodes
        result.batched_requests_sum += b * longest_output
        result.num_prefill_iterations += 1
        result.prefill_batched_requests_sum += b
        result.prefill_tokens += b * longest_prompt
        i = j
    result.duration = now
    return result
