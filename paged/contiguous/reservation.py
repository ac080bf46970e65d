"""The Orca reservation policies: how many KV slots a request reserves up front (paper §3, §6.1).

For a request with prompt ``p`` and true output ``o`` tokens and maximum sequence length ``L``
(2048 in the paper):

* ``max``: ``L`` slots, whatever the request (the system cannot know ``o``).
* ``pow2``: ``p + 2**ceil(log2(o))`` slots, capped at ``L``: at most 2× over-reservation of the
  output (an output of 25 reserves 32).
* ``oracle``: exactly ``p + o`` slots (knows the future; an upper bound, infeasible in practice).
"""

from __future__ import annotations

__all__ = ["POLICIES", "reservation_size"]

POLICIES = ("max", "pow2", "oracle")


def reservation_size(policy: str, prompt_len: int, output_len: int, max_seq_len: int) -> int:
    """Slots a policy reserves for a request (tokens); see the module docstring.

    Raises:
        ValueError: for an unknown policy or non-positive lengths.
    """
    if prompt_len < 1 or output_len < 1:
        raise ValueError(f"prompt_len and output_len must be ≥ 1, got {prompt_len}, {output_len}")
    if policy == "max":
        return max_seq_len
    if policy == "pow2":
        return min(prompt_len + (1 << (output_len - 1).bit_length()), max_seq_len)
    if policy == "oracle":
        return prompt_len + output_len
    raise ValueError(f"unknown reservation policy {policy!r}; choose one of {POLICIES}")
