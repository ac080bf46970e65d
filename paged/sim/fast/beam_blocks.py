"""What a replayed beam search does to KV memory, step by step, without a KV cache manager (§4.4, Fig. 9).

A replayed beam group (:mod:`paged.sim.beam_replay`) changes its memory at every decode step: on the
paged manager its candidates write into shared blocks (copy-on-write) or cross into new ones, and
dropped candidates free the blocks no survivor holds; on a contiguous (Orca) manager every fork
copies its parent's KV into another reservation. None of this depends on anything but the recorded
search, the step, the block size and where the prompt ends in its last block, so it can be computed
once and shared by every request that replays the same search. The simulator's beam calendar
(:mod:`paged.sim.beam_calendar`) reads these profiles instead of stepping every group.

:class:`BeamBlockTree` replays the paged manager's rules on the blocks past a group's full prompt
blocks (those are shared by every candidate and never change): a block is a node whose parent is the
block before it, held by the candidates whose last block it is and kept alive by its live children.
Decode ``j`` writes token ``prompt_len + j - 1`` of every candidate: at a block boundary each
candidate takes a new block; otherwise each block shared by ``h`` candidates is copied ``h - 1``
times, the first writers (in candidate order) copying, the last writing in place, as
:meth:`paged.block.PagedKVCacheManager.append_slots_in_order` does. Beam step ``j`` then drops the
candidates no new one continues (a block is freed once no candidate and no live child holds it) and
forks the others. A step costs O(width) plus the blocks it frees.

:func:`paged_profile` gives, per decode ``j``, the blocks its appends take (``taken``), how many of
those are copy-on-write copies (``copies``), the blocks beam step ``j`` frees (``freed``) and the
blocks past the full prompt blocks held after it (``held``); :func:`fork_counts`, the forks of every
beam step (what a contiguous manager copies). Both are cached per recorded search.
"""

from __future__ import annotations

import numpy as np

from paged.sim.beam_replay import BeamTrace

__all__ = ["BeamBlockTree", "BeamProfile", "paged_profile", "fork_counts", "step_moves"]

#: Parent of a block that follows the full prompt blocks directly (not a block of the tree).
_ROOT = -1


#: id(trace) -> (the trace, its moves per recorded step); traces live as long as the package's cache.
_MOVES: dict[int, tuple[BeamTrace, tuple]] = {}


def _moves_of(step: int, width: int, parents: tuple[int, ...]) -> tuple:
    count = 1 if step == 0 else width
    kept, seen, targets = set(parents), set(), []
    for p in parents:
        targets.append((p, p in seen))
        seen.add(p)
    return count, tuple(i for i in range(count) if i not in kept), tuple(targets)


def step_moves(trace: BeamTrace, step: int) -> tuple[int, tuple[int, ...], tuple[tuple[int, bool], ...]]:
    """Step ``step`` (≥ 0) of ``trace.parents`` as the moves that carry it out: ``(candidates before,
    dropped, targets)``. ``candidates before`` is 1 at step 0 and the width after; ``dropped`` are the
    indices, ascending, of the candidates no new candidate continues; ``targets[c] = (p, fork)``: new
    candidate ``c`` continues candidate ``p`` itself (``fork`` False, the first child of ``p``) or a fork
    of it (True). O(1) after the first call for a trace."""
    entry = _MOVES.get(id(trace))
    if entry is None or entry[0] is not trace:
        entry = _MOVES[id(trace)] = (trace, tuple(_moves_of(j, trace.width, p) for j, p in enumerate(trace.steps)))
    moves = entry[1]
    return moves[step] if step < len(moves) else moves[1 + (step - 1) % (len(moves) - 1)]


class BeamBlockTree:
    """The blocks past a beam group's full prompt blocks, replayed under the paged manager's rules
    (module docstring), starting after the group's prefill and its beam step 0 (every candidate then
    shares the prompt's partly filled last block, node 0, if the prompt does not end on a block boundary).

    Args:
        trace: the recorded search the group replays.
        prompt_len: the group's prompt tokens (only ``prompt_len % block_size`` matters).
        block_size: tokens per KV block.

    Attributes:
        step: the beam steps applied so far (0 after the prefill).
        num_blocks: blocks alive (held by a candidate or by a live child).
        last: each candidate's last block, candidate order (``-1``: none past the full prompt blocks).
    """

    __slots__ = ("trace", "block_size", "offset", "step", "num_blocks", "last", "_parent", "_holders", "_children")

    def __init__(self, trace: BeamTrace, prompt_len: int, block_size: int) -> None:
        self.trace = trace
        self.block_size = block_size
        self.offset = prompt_len % block_size  # prompt tokens in its last, partly filled block
        self.step = 0
        width = trace.width
        if self.offset:
            self._parent, self._holders, self._children = [_ROOT], [width], [0]
            self.last = [0] * width
            self.num_blocks = 1
        else:
            self._parent, self._holders, self._children = [], [], []
            self.last = [_ROOT] * width
            self.num_blocks = 0

    def _new(self, parent: int) -> int:
        """A new block after ``parent``, held by one candidate."""
        node = len(self._parent)
        self._parent.append(parent)
        self._holders.append(1)
        self._children.append(0)
        if parent != _ROOT:
            self._children[parent] += 1
        self.num_blocks += 1
        return node

    def decode(self) -> tuple[int, int]:
        """The appends of the next decode (``j = step + 1``): ``(blocks taken, copy-on-write copies among them)``."""
        last, holders = self.last, self._holders
        if (self.offset + self.step) % self.block_size == 0:  # token prompt_len + j - 1 starts a block
            new = self._new
            for c, node in enumerate(last):
                if node != _ROOT:
                    holders[node] -= 1  # full: kept by the new block, its child
                last[c] = new(node)
            return len(last), 0
        copies = 0
        parent = self._parent
        for c, node in enumerate(last):
            if holders[node] > 1:  # shared and partly filled: this writer copies it
                holders[node] -= 1
                last[c] = self._new(parent[node])
                copies += 1
        return copies, copies

    def beam_step(self) -> int:
        """Beam step ``step + 1`` (after the decode of the same number): drop, fork and reorder the
        candidates as recorded. Returns the blocks freed."""
        self.step += 1
        _, dropped, targets = step_moves(self.trace, self.step)
        last, holders, children, parent = self.last, self._holders, self._children, self._parent
        freed = 0
        for i in dropped:
            node = last[i]
            if node == _ROOT:
                continue
            holders[node] -= 1
            while holders[node] == 0 and children[node] == 0:  # nothing holds it: free, then its parent
                freed += 1
                node = parent[node]
                if node == _ROOT:
                    break
                children[node] -= 1
        self.num_blocks -= freed
        new_last = []
        for p, fork in targets:
            node = last[p]
            if fork and node != _ROOT:
                holders[node] += 1
            new_last.append(node)
        self.last = new_last
        return freed

    def tables(self) -> tuple[list[list[int]], list[int]]:
        """``(each candidate's blocks past the full prompt blocks, in logical order, as node ids; the
        live node ids)``. Node 0 is the prompt's partly filled block when the prompt has one. O(blocks)."""
        parent = self._parent
        paths = []
        for node in self.last:
            path = []
            while node != _ROOT:
                path.append(node)
                node = parent[node]
            path.reverse()
            paths.append(path)
        live = sorted({node for path in paths for node in path})
        return paths, live


class BeamProfile:
    """Per-decode block counts of one recorded search at one prompt offset and block size
    (:func:`paged_profile`), grown on demand.

    Attributes:
        counts: int64 array ``[3, length]``: rows ``taken``, ``copies``, ``freed`` of decode ``j``
            (column ``j``; column 0 unused).
        held: ``held[j]``: blocks past the full prompt blocks held after beam step ``j`` (a list).
    """

    __slots__ = ("tree", "counts", "held")

    def __init__(self, tree: BeamBlockTree) -> None:
        self.tree = tree
        self.counts = np.zeros((3, 1), dtype=np.int64)
        self.held = [tree.num_blocks]

    def grow(self, length: int) -> None:
        """Replay up to decode ``length - 1`` (columns ``0 .. length - 1``). O(new steps × width)."""
        have = len(self.held)
        if length <= have:
            return
        tree = self.tree
        rows = [[], [], []]
        held = self.held
        for _ in range(have, length):
            taken, copies = tree.decode()
            freed = tree.beam_step()
            rows[0].append(taken)
            rows[1].append(copies)
            rows[2].append(freed)
            held.append(tree.num_blocks)
        self.counts = np.concatenate([self.counts, np.array(rows, dtype=np.int64)], axis=1)


_PROFILES: dict[tuple[int, int, int], tuple[BeamTrace, BeamProfile]] = {}
_FORKS: dict[int, tuple[BeamTrace, np.ndarray]] = {}


def paged_profile(trace: BeamTrace, prompt_len: int, block_size: int, length: int) -> BeamProfile:
    """The :class:`BeamProfile` of ``trace`` for prompts of ``prompt_len % block_size`` tokens past their
    full blocks, covering decodes ``1 .. length - 1``; cached per search, offset and block size
    (a group of output length ``L`` reads decodes ``1 .. L - 1``). O(new steps × width)."""
    key = (id(trace), prompt_len % block_size, block_size)
    entry = _PROFILES.get(key)
    if entry is None or entry[0] is not trace:
        entry = _PROFILES[key] = (trace, BeamProfile(BeamBlockTree(trace, prompt_len, block_size)))
    profile = entry[1]
    if len(profile.held) < length:
        profile.grow(max(length, 2 * len(profile.held)))
    return profile


def fork_counts(trace: BeamTrace, length: int) -> np.ndarray:
    """Forks of beam steps ``0 .. length - 1`` of ``trace`` (int64; a fork is a later child of a
    candidate: what a contiguous manager copies the parent's KV for); cached per search. O(length)."""
    entry = _FORKS.get(id(trace))
    if entry is None or entry[0] is not trace or len(entry[1]) < length:
        size = max(length, 2 * len(entry[1]) if entry is not None and entry[0] is trace else 0, 64)
        counts = np.array([sum(fork for _, fork in step_moves(trace, j)[2]) for j in range(size)], dtype=np.int64)
        entry = _FORKS[id(trace)] = (trace, counts)
    return entry[1]
