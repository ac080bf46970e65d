"""ShareGPT V3's parts joined into whole conversations: each part at its turn offset, a repeated turn
kept once, parts after a gap left out; a property test splits random conversations as V3 does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from paged.workloads.conversation_parts import join_conversation_parts


def _turns(*texts, first="human"):
    roles = ("human", "gpt") if first == "human" else ("gpt", "human")
    return [{"from": roles[i % 2], "value": t} for i, t in enumerate(texts)]


def _values(conversations):
    return [[t["value"] for t in c] for c in conversations]


def test_a_part_that_repeats_the_previous_last_turn_adds_it_once():
    # V3's overlap: part 2 starts at turn 2 of the conversation, the assistant turn part 0 ended with
    records = [{"id": "a_0", "conversations": _turns("q1", "r1", "q2", "r2 start")},
               {"id": "a_3", "conversations": _turns("r2 start", "q3", "r3", first="gpt")}]
    convs, report = join_conversation_parts(records)
    assert _values(convs) == [["q1", "r1", "q2", "r2 start", "q3", "r3"]]  # "r2 start" once, not merged twice
    assert (report.conversations, report.conversations_joined, report.parts_joined) == (1, 1, 2)
    assert (report.overlapping_turns, report.overlap_mismatches, report.parts_after_gap) == (1, 0, 0)


def test_parts_without_overlap_are_concatenated_in_offset_order_not_file_order():
    records = [{"id": "c_4", "conversations": _turns("q3", "r3")},
               {"id": "d_0", "conversations": _turns("x", "y")},
               {"id": "c_0", "conversations": _turns("q1", "r1")},
               {"id": "c_2", "conversations": _turns("q2", "r2")},
               {"id": "plain", "conversations": _turns("no", "suffix")}]
    convs, report = join_conversation_parts(records)
    assert _values(convs) == [["q1", "r1", "q2", "r2", "q3", "r3"], ["x", "y"], ["no", "suffix"]]  # first-seen order
    assert (report.conversations_joined, report.parts_joined, report.overlapping_turns) == (1, 3, 0)


def test_an_empty_part_adds_nothing_and_its_twin_at_the_same_offset_is_used():
    # 123 conversations of the packaged file have an empty X_0 and a second X_0 with the turns
    records = [{"id": "e_0", "conversations": []},
               {"id": "e_0", "conversations": _turns("q1", "r1")},
               {"id": "e_1", "conversations": _turns("r1", "q2", "r2", first="gpt")}]
    convs, report = join_conversation_parts(records)
    assert _values(convs) == [["q1", "r1", "q2", "r2"]]
    assert (report.overlapping_turns, report.parts_after_gap) == (1, 0)


def test_parts_after_a_gap_and_conversations_without_turn_zero_are_left_out_and_counted():
    records = [{"id": "g_0", "conversations": _turns("q1", "r1")},
               {"id": "g_5", "conversations": _turns("q4", "r4")},  # turns 2-4 are not in the file
               {"id": "g_7", "conversations": _turns("q5", "r5")},
               {"id": "h_3", "conversations": _turns("late", "start")}]
    convs, report = join_conversation_parts(records)
    assert _values(convs) == [["q1", "r1"]]
    assert (report.parts_after_gap, report.conversations_without_start, report.conversations_joined) == (3, 1, 0)


def test_an_overlap_that_disagrees_keeps_the_joined_turn_and_is_counted():
    records = [{"id": "m_0", "conversations": _turns("q1", "r1")},
               {"id": "m_1", "conversations": _turns("r1 edited", "q2", first="gpt")}]
    convs, report = join_conversation_parts(records)
    assert _values(convs) == [["q1", "r1", "q2"]]
    assert (report.overlapping_turns, report.overlap_mismatches) == (1, 1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=5), st.lists(st.integers(0, 6), max_size=5),
       st.lists(st.booleans(), max_size=5), st.randoms(use_true_random=False))
def test_any_split_with_or_without_one_turn_overlap_joins_back_to_the_conversation(sizes, cuts, overlaps, rng):
    """Split conversations at arbitrary turns (a later part starting one turn early, as V3's do),
    shuffle the records: the join gives back every conversation, each turn once."""
    originals = [_turns(*(f"c{c}t{t}" for t in range(n))) for c, n in enumerate(sizes)]
    records, repeated, per_conv = [], 0, []
    for c, turns in enumerate(originals):
        starts = sorted({0} | {k for k in cuts if 0 < k < len(turns)})
        per_conv.append(len(starts))
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else len(turns)
            begin = start - 1 if start > 0 and i < len(overlaps) and overlaps[i] else start
            repeated += begin < start
            records.append({"id": f"conv{c}_{begin}", "conversations": turns[begin:end]})
    rng.shuffle(records)
    convs, report = join_conversation_parts(records)
    assert sorted(_values(convs)) == sorted(_values(originals))
    assert (report.overlapping_turns, report.overlap_mismatches, report.parts_after_gap) == (repeated, 0, 0)
    multi = [n for n in per_conv if n > 1]
    assert (report.conversations_joined, report.parts_joined) == (len(multi), sum(multi))


def test_the_packaged_file_repeats_exactly_the_turns_its_offsets_say_and_the_committed_traces_say_so():
    """On the real ShareGPT V3 file: every turn a part repeats (by its offset) is identical to the
    joined one, none is appended twice, no part follows a gap; the committed chat trace states it."""
    import re
    import warnings

    from paged.workloads import data_path, default_sharegpt_path, read_sharegpt_records
    from paged.workloads.sharegpt import ShareGPTTruncatedWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ShareGPTTruncatedWarning)
        records, _ = read_sharegpt_records(default_sharegpt_path())
    spans: dict[str, list[tuple[int, int]]] = {}
    for rec in records:
        conv, start = rec["id"].rsplit("_", 1)
        spans.setdefault(conv, []).append((int(start), len(rec["conversations"])))
    expected = 0  # turns each part holds before the end of the parts before it, by the offsets alone
    for parts in spans.values():
        end = 0
        for start, n in sorted(parts):
            expected += max(0, min(end - start, n))
            end = max(end, start + n)
    convs, report = join_conversation_parts(records)
    assert report.overlapping_turns == expected > 0
    assert report.overlap_mismatches == report.parts_after_gap == report.conversations_without_start == 0
    assert sum(map(len, convs)) == sum(len(r["conversations"]) for r in records) - expected
    header = data_path("sharegpt_chat_lengths_gpt2.csv").read_text().split("\n# rounds")[0]
    assert re.search(rf"{report.parts_joined} parts; {expected} turns a part repeats kept once", header)
