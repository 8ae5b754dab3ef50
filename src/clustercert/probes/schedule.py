"""Pair schedules for node-to-node probes. Pure and fast (10,000 nodes well under a second).

round 1   a perfect matching of the nodes; every pair of a round runs at once. Where the inventory
          names failure domains (clustercert_rack), no pair has both nodes in one domain when no
          domain holds more than half of the nodes: a rack-wide fault then never sits at both ends of
          a pair. With an odd count the spare node waits for round 2.
next      one round that answers what localisation left open (localise.Inference.needs): each node
          that needs a partner gets one it has not had, preferring a partner that is itself in question
          on other channels and passes this node's (two questions with one pair), then a node known good
          on them, then another node in question. A round is a matching: no node is in two of its pairs.
circle    ``circle_rounds`` gives the full matrix on request (circle method, N-1 rounds of N/2 disjoint pairs).
"""

from __future__ import annotations

from collections import defaultdict

from clustercert.probes.catalog import AGGREGATE, Channel

Pair = tuple[str, str]


class _Aggregate(frozenset):
    """Channels whose probe is an aggregate one: ``want - AGGREGATE_CH`` drops them."""

    def __rsub__(self, other):
        return frozenset(c for c in other if c[0] not in AGGREGATE)


AGGREGATE_CH = _Aggregate()


def round1(nodes: list[str], domains: dict[str, str] | None = None) -> tuple[list[Pair], str | None]:
    """A perfect matching of ``nodes``; the odd one out is the spare. Without failure domains
    neighbours pair up, in order. With them (``domains``: node -> domain), the nodes are laid out
    domain by domain, largest first, and node i pairs with node i + N/2: no pair shares a domain
    unless one domain holds more than half of the nodes."""
    ordered = list(nodes)
    if not domains or len({domains.get(n) for n in ordered}) < 2:
        spare = ordered.pop() if len(ordered) % 2 else None
        return [(ordered[i], ordered[i + 1]) for i in range(0, len(ordered), 2)], spare
    groups: dict[str | None, list[str]] = defaultdict(list)
    for n in ordered:
        groups[domains.get(n)].append(n)
    layout = [n for _dom, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), str(kv[0]))) for n in members]
    spare = layout.pop(0) if len(layout) % 2 else None  # from the largest domain: it evens the halves
    half = len(layout) // 2
    return [(layout[i], layout[i + half]) for i in range(half)], spare


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


def next_round(nodes: list[str], needs: dict[str, set[Channel]], tried: dict[str, set[str]],
               cleared: dict[str, set[Channel]]) -> list[Pair]:
    """One round of disjoint pairs giving each node of ``needs`` a partner it has not had (``tried``).

    A partner m is *informative* for n when m is cleared (passed with someone) on every channel n is
    in question on. Preference, best first: m is in question itself and each is informative for the
    other; m is not in question and informative; m is in question and informative for n; any other
    partner. The most constrained nodes choose first; a node left without a partner may take one from
    a pair already made when that pair's other node can be re-paired (one exchange)."""
    alive = set(nodes)
    # an aggregate channel (NCCL across a pair) is answered by its parts: it decides a partner only for a
    # node in question on nothing else
    want = {n: (frozenset(c) - AGGREGATE_CH) or frozenset(c) for n, c in needs.items() if n in alive and c}
    if not want:
        return []
    relevant = frozenset(c for cs in want.values() for c in cs)

    def sig(m: str) -> tuple:
        return (m in want, want.get(m, frozenset()), frozenset(cleared.get(m, set()) & relevant))

    groups: dict[tuple, list[str]] = defaultdict(list)
    for m in sorted(alive, reverse=True):  # each group is taken from its end: in name order
        groups[sig(m)].append(m)

    def score(n: str, g: tuple) -> int:
        in_question, m_needs, m_cleared = g
        for_n = want[n] <= m_cleared
        if in_question:
            for_m = m_needs <= (cleared.get(n, set()) & relevant)
            return 4 if for_n and for_m else 2 if for_n else 1 if for_m else 0
        return 3 if for_n else 0 if not (want[n] & m_cleared) else 1

    matched: dict[str, str] = {}

    def candidates(n: str):
        for g in sorted(groups, key=lambda g: -score(n, g)):
            members = groups[g]
            while members and members[-1] in matched:  # matched ones are dropped from the end
                members.pop()
            for m in reversed(members):
                if m != n and m not in matched and m not in tried.get(n, ()):
                    yield m

    def options(n: str) -> int:
        return sum(len(groups[g]) for g in groups if score(n, g) >= 3)

    # one node of each group in question together (a failing pair of the last round) chooses first: a
    # good partner for one end decides the pair (that end passes: the other is at fault; it fails: it
    # is), and with at most a third of the nodes bad there is a good node for one end of every pair.
    # Then the most constrained first: fewest good partners, the most in question (a spare: everything).
    lead, seen_group = set(), set()
    for n in sorted(want, key=lambda n: (options(n), -len(want[n]), n)):
        group = {n} | {m for m in tried.get(n, ()) if m in want}
        if not group & seen_group:
            lead.add(n)
        seen_group |= group
    order = sorted(want, key=lambda n: (n not in lead, options(n), -len(want[n]), n))
    left = []
    for n in order:
        if n in matched:
            continue
        m = next(candidates(n), None)
        if m is None:
            left.append(n)
            continue
        matched[n], matched[m] = m, n
    for n in left:  # one exchange: take x from (x, y) where y can be re-paired with someone free
        if n in matched:
            continue
        free = [z for z in sorted(alive) if z not in matched and z != n]
        if not free:
            # nobody free: a node in question paired with a node that is not gives the latter up, so that
            # two nodes in question are asked with one pair rather than one of them waiting a round
            xs = [x for x in sorted(matched) if x in want and matched[x] not in want and x not in tried.get(n, ())]
            # the one that tells most: it passes n's channels, n passes its
            x = max(xs, key=lambda x: (-len(want[n] & want[x]), len(want[n] & cleared.get(x, set()))
                                       + len(want[x] & cleared.get(n, set()))), default=None)
            if x is not None:
                del matched[matched[x]]
                matched[n], matched[x] = x, n
            continue
        for x in sorted(matched):
            y = matched[x]
            if x in tried.get(n, ()) or y == n:
                continue
            z = next((z for z in free if z not in tried.get(y, ())), None)
            if z is None:
                continue
            matched[n], matched[x], matched[y], matched[z] = x, n, z, y
            break
    pairs, seen = [], set()
    for a in sorted(matched):
        b = matched[a]
        if a in seen:
            continue
        seen |= {a, b}
        # the node in question is the client (its end's output is the one read)
        pairs.append((a, b) if a in want or b not in want else (b, a))
    return pairs
