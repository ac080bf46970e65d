"""Whole conversations from ShareGPT V3's parts (§6.5 needs a conversation's full history).

ShareGPT V3 splits a long conversation into records with ids ``<id>_<start>``: ``<start>`` is the
index of the part's first turn in the whole conversation (FastChat's ``split_long_conversation``).
Consecutive parts may overlap: in the packaged file 6,340 parts begin at the previous part's last
turn (their offset says so, and that turn is repeated with the same role and the identical text).
:func:`join_conversation_parts` places every part at its offset, so a repeated turn is kept once
and the history is the original conversation's, never a turn counted twice. Used by the chatbot
trace (:func:`paged.workloads.sharegpt.joined_conversation_texts`) and the long-context session
traces (:mod:`paged.workloads.sharegpt_sessions`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PartsJoinReport", "join_conversation_parts"]

_PART_ID = re.compile(r"^(?P<conv>.*)_(?P<start>\d+)$")


@dataclass(slots=True)
class PartsJoinReport:
    """What :func:`join_conversation_parts` did (counts of records, conversations and turns).

    Attributes:
        records: records read.
        conversations: whole conversations returned.
        conversations_joined: returned conversations made of two or more records.
        parts_joined: records in those conversations.
        overlapping_turns: turns a part repeats from the turns already joined (kept once).
        overlap_mismatches: of those, turns whose role or text differ from the joined turn
            (the joined turn is kept; 0 in the packaged file).
        parts_after_gap: records left out because they start past the turns joined so far: the
            history before them is not in the file (with the later parts of their conversation).
        conversations_without_start: conversations left out whole because no part starts at turn 0.
    """

    records: int = 0
    conversations: int = 0
    conversations_joined: int = 0
    parts_joined: int = 0
    overlapping_turns: int = 0
    overlap_mismatches: int = 0
    parts_after_gap: int = 0
    conversations_without_start: int = 0


def join_conversation_parts(records: Sequence[dict[str, Any]]) -> tuple[list[list[dict[str, str]]], PartsJoinReport]:
    """Join ShareGPT V3's parts into whole conversations, each turn once, at its offset.

    Records are grouped by ``<id>`` (the id without its ``_<start>`` suffix; a record whose id has
    no such suffix is a conversation of its own, starting at turn 0), in the order each id is first
    seen in ``records``. A group's parts are taken in ``<start>`` order (ties in file order); a
    part at offset ``s`` holds turns ``s, s+1, ...`` of the conversation, so when ``t`` turns are
    joined it adds its turns from index ``t - s`` on (the first ``t - s`` repeat joined turns:
    counted, and compared). A part with ``s > t`` would follow turns that are not in the file; it
    and the rest of its group are left out (a group whose first part starts past 0 entirely).
    Empty parts add nothing. Roles are not looked at: the alternating human/assistant rule is
    applied afterwards (:func:`paged.workloads.sharegpt.alternating_prefix`).

    Args:
        records: ShareGPT records ``{"id": str, "conversations": [{"from": str, "value": str}, ...]}``
            (as :func:`paged.workloads.sharegpt.read_sharegpt_records` returns; not re-checked).

    Returns:
        ``(conversations, report)``: the turn lists (the records' own turn dicts, not copied) in
        order, and the counts (:class:`PartsJoinReport`).

    Cost: O(total turns) plus sorting each group's parts.
    """
    report = PartsJoinReport(records=len(records))
    groups: dict[str, list[tuple[int, int, list[dict[str, str]]]]] = {}
    for i, rec in enumerate(records):
        m = _PART_ID.match(str(rec.get("id", "")))
        key, start = (m["conv"], int(m["start"])) if m else (f"\0{i}", 0)
        groups.setdefault(key, []).append((start, i, rec["conversations"]))
    conversations: list[list[dict[str, str]]] = []
    for group in groups.values():
        group.sort(key=lambda part: (part[0], part[1]))
        if group[0][0] > 0:
            report.conversations_without_start += 1
            report.parts_after_gap += len(group)
            continue
        turns: list[dict[str, str]] = []
        for k, (start, _, part) in enumerate(group):
            if start > len(turns):
                report.parts_after_gap += len(group) - k
                group = group[:k]
                break
            overlap = min(len(turns) - start, len(part))
            report.overlapping_turns += overlap
            report.overlap_mismatches += sum(
                _differ(turns[start + j], part[j]) for j in range(overlap))
            turns.extend(part[overlap:])
        if len(group) > 1:
            report.conversations_joined += 1
            report.parts_joined += len(group)
        conversations.append(turns)
    report.conversations = len(conversations)
    return conversations, report


def _differ(a: dict[str, str], b: dict[str, str]) -> bool:
    return a["from"].strip().lower() != b["from"].strip().lower() or a["value"] != b["value"]
