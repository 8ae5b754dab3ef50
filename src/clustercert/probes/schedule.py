"""Pair schedules for node-to-node probes. Pure and fast (10,000 nodes well under a second).

round 1   a perfect matching of the nodes; every pair of a round runs at once. Where the inventory
          names failure domains (clustercert_rack), no pair has both nodes in one domain when no
          domain holds more than half of the nodes: a rack-wide fault then never sits at both ends of
          a pair. With an odd count the spare node waits for round 2.
next      one round that answers what localisation left open (localise.Inference.needs): each node
          that needs a partner gets one it has not had, preferring a partner that is itself in question
          on other channels and passes this node's (two questions with one pair), then a node known good
          on them, then another node in question. A round is a matching: no node is in two of its pairs.
circle    ``circle_rounds`` gives the full matrix on request (circle method, N-1 rounds of N/2 disjoint
pairs).
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
    layout = [
        n
        for _dom, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), str(kv[0])))
        for n in members
    ]
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


class _Matcher:
    """The state of one ``next_round``: who needs a partner on which channels (``want``), the nodes grouped
    by what they can tell (in question or not, their channels in question, those they are cleared on),
    and the pairs made so far (``matched``, both ways)."""

    def __init__(self, alive: set[str], want: dict[str, frozenset], tried: dict[str, set[str]],
                 cleared: dict[str, set[Channel]]) -> None:
        self.alive, self.want, self.tried, self.cleared = alive, want, tried, cleared
        self.relevant = frozenset(c for cs in want.values() for c in cs)
        self.groups: dict[tuple, list[str]] = defaultdict(list)
        for m in sorted(alive, reverse=True):  # each group is taken from its end: in name order
            self.groups[self._sig(m)].append(m)
        self.matched: dict[str, str] = {}

    def _sig(self, m: str) -> tuple:
        return (m in self.want, self.want.get(m, frozenset()),
                frozenset(self.cleared.get(m, set()) & self.relevant))

    def score(self, n: str, g: tuple) -> int:
        in_question, m_needs, m_cleared = g
        for_n = self.want[n] <= m_cleared
        if in_question:
            for_m = m_needs <= (self.cleared.get(n, set()) & self.relevant)
            return 4 if for_n and for_m else 2 if for_n else 1 if for_m else 0
        return 3 if for_n else 0 if not (self.want[n] & m_cleared) else 1

    def candidates(self, n: str):
        for g in sorted(self.groups, key=lambda g: -self.score(n, g)):
            members = self.groups[g]
            while members and members[-1] in self.matched:  # matched ones are dropped from the end
                members.pop()
            for m in reversed(members):
                if m != n and m not in self.matched and m not in self.tried.get(n, ()):
                    yield m

    def options(self, n: str) -> int:
        return sum(len(self.groups[g]) for g in self.groups if self.score(n, g) >= 3)

    def order(self) -> list[str]:
        """One node of each group in question together (a failing pair of the last round) chooses first: a
        good partner for one end decides the pair (that end passes: the other is at fault; it fails: it
        is), and with at most a third of the nodes bad there is a good node for one end of every pair.
        Then the most constrained first: fewest good partners, the most in question (a spare: everything)."""
        want = self.want
        lead, seen_group = set(), set()
        for n in sorted(want, key=lambda n: (self.options(n), -len(want[n]), n)):
            group = {n} | {m for m in self.tried.get(n, ()) if m in want}
            if not group & seen_group:
                lead.add(n)
            seen_group |= group
        return sorted(want, key=lambda n: (n not in lead, self.options(n), -len(want[n]), n))

    def greedy(self) -> list[str]:
        """Each node in ``order`` takes its best untried free partner; returns those left without one."""
        left = []
        for n in self.order():
            if n in self.matched:
                continue
            m = next(self.candidates(n), None)
            if m is None:
                left.append(n)
                continue
            self.matched[n], self.matched[m] = m, n
        return left

    def exchange(self, n: str) -> None:
        """Pairs ``n``, left without a partner, by taking x from a pair (x, y) whose y can be re-paired with
        someone free; with nobody free, by taking a node in question from a node that is not."""
        free = [z for z in sorted(self.alive) if z not in self.matched and z != n]
        if not free:
            self._take_from_unquestioned(n)
            return
        matched, tried = self.matched, self.tried
        for x in sorted(matched):
            y = matched[x]
            if x in tried.get(n, ()) or y == n:
                continue
            z = next((z for z in free if z not in tried.get(y, ())), None)
            if z is None:
                continue
            matched[n], matched[x], matched[y], matched[z] = x, n, z, y
            break

    def _take_from_unquestioned(self, n: str) -> None:
        """Nobody free: a node in question paired with a node that is not gives the latter up, so that two
        nodes in question are asked with one pair rather than one of them waiting a round."""
        want, matched, cleared = self.want, self.matched, self.cleared
        xs = [x for x in sorted(matched)
              if x in want and matched[x] not in want and x not in self.tried.get(n, ())]
        # the one that tells most: it passes n's channels, n passes its
        x = max(xs, key=lambda x: (-len(want[n] & want[x]), len(want[n] & cleared.get(x, set()))
                                   + len(want[x] & cleared.get(n, set()))), default=None)
        if x is not None:
            del matched[matched[x]]
            matched[n], matched[x] = x, n

    def pairs(self) -> list[Pair]:
        pairs, seen = [], set()
        for a in sorted(self.matched):
            b = self.matched[a]
            if a in seen:
                continue
            seen |= {a, b}
            # the node in question is the client (its end's output is the one read)
            pairs.append((a, b) if a in self.want or b not in self.want else (b, a))
        return pairs


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
    matcher = _Matcher(alive, want, tried, cleared)
    for n in matcher.greedy():
        if n not in matcher.matched:
            matcher.exchange(n)
    return matcher.pairs()
