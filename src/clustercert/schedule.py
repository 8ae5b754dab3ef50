"""Pair schedules for node-to-node probes. Pure and fast (10,000 nodes well under a second).

Two-round localisation (the default):
  round 1  a perfect matching of the nodes; every pair of a round runs at once. With an odd count the
           spare node waits and joins a node that passed in round 2.
  round 2  each node of a failing pair is re-paired with a different node that passed.
  verdict  a node that fails with two different partners is a bad node; a pair that fails while both
           of its nodes pass with other partners is a bad link.
``circle_rounds`` gives the full matrix on request (circle method, N-1 rounds of N/2 disjoint pairs).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

Pair = tuple[str, str]


def round1(nodes: list[str]) -> tuple[list[Pair], str | None]:
    """A perfect matching of ``nodes`` (in order: neighbours pair up); the odd one out is the spare."""
    ordered = list(nodes)
    spare = ordered.pop() if len(ordered) % 2 else None
    return [(ordered[i], ordered[i + 1]) for i in range(0, len(ordered), 2)], spare


def round2(results1: dict[Pair, bool], spare: str | None) -> list[list[Pair]]:
    """Re-pair every node of a failing round-1 pair (and the spare) with distinct nodes that passed.

    Returns one round when there are enough good partners; further rounds reuse good partners
    when there are not (each round is a set of disjoint pairs, so it can run at once).
    """
    good = [n for pair, passed in results1.items() if passed for n in pair]
    suspects = [n for pair, passed in results1.items() if not passed for n in pair]
    if spare is not None:
        suspects.append(spare)
    if not suspects:
        return []
    if not good:
        # nothing known-good: pair suspects from different failing pairs with each other
        partner_of = {a: b for (a, b), passed in results1.items() if not passed} | {
            b: a for (a, b), passed in results1.items() if not passed}
        pairs, used = [], set()
        for i, s in enumerate(suspects):
            if s in used:
                continue
            for t in suspects[i + 1:]:
                if t not in used and partner_of.get(s) != t:
                    pairs.append((s, t))
                    used |= {s, t}
                    break
        return [pairs] if pairs else []
    rounds: list[list[Pair]] = []
    queue = list(suspects)
    while queue:
        batch = []
        for g in good:
            if not queue:
                break
            batch.append((queue.pop(0), g))
        rounds.append(batch)
    return rounds


def circle_rounds(nodes: list[str]) -> list[list[Pair]]:
    """All pairs in N-1 rounds (N even; an odd count adds a bye), each round a perfect matching."""
    ring = list(nodes)
    if len(ring) % 2:
        ring.append(None)  # type: ignore[arg-type]
    n = len(ring)
    rounds = []
    fixed, rest = ring[0], ring[1:]
    for _ in range(n - 1):
        order = [fixed] + rest
        pairs = [(order[i], order[n - 1 - i]) for i in range(n // 2)]
        rounds.append([(a, b) for a, b in pairs if a is not None and b is not None])
        rest = rest[-1:] + rest[:-1]
    return rounds


@dataclass(frozen=True)
class Localisation:
    kind: str  # bad_node | bad_link | suspect
    subject: str  # node name, or "a<->b"
    reason: str

    def to_json(self) -> dict:
        key = "link" if self.kind == "bad_link" else "node"
        return {key: self.subject, "kind": self.kind, "reason": self.reason}


def localise(results: list[tuple[str, str, bool]]) -> list[Localisation]:
    """From (a, b, passed) outcomes over all rounds: which nodes are bad, which links are bad."""
    failed_with: dict[str, set[str]] = defaultdict(set)
    passed_with: dict[str, set[str]] = defaultdict(set)
    for a, b, ok in results:
        (passed_with if ok else failed_with)[a].add(b)
        (passed_with if ok else failed_with)[b].add(a)
    bad_nodes = sorted(n for n, partners in failed_with.items() if len(partners) >= 2)
    out = [Localisation("bad_node", n, f"failed with {len(failed_with[n])} different partners: {', '.join(sorted(failed_with[n]))}")
           for n in bad_nodes]
    seen = set()
    for a, b, ok in results:
        key = tuple(sorted((a, b)))
        if ok or key in seen:
            continue
        seen.add(key)
        if a in bad_nodes or b in bad_nodes:
            continue
        if passed_with[a] - {b} and passed_with[b] - {a}:
            out.append(Localisation("bad_link", f"{key[0]}<->{key[1]}",
                                    f"{a} and {b} each pass with other partners ({', '.join(sorted(passed_with[a] - {b}))}; "
                                    f"{', '.join(sorted(passed_with[b] - {a}))})"))
        else:
            out.append(Localisation("suspect", f"{key[0]}<->{key[1]}", "failed; not enough other partners to tell node from link"))
    return out
