"""The round loop's decisions, pure: which pairs each round probes, and when to stop.

``Rounds`` is driven by clustercert.probes.run (which runs the pairs) and, in the tests, by a fake.
Round 1 is a matching of every node (schedule.round1); after each round localisation says what is
still open, and the next round (schedule.next_round) asks exactly that. Round 2 runs whenever round 1
left anything open; a further round runs only where the evidence is still truly ambiguous, at most
``max_rounds`` in all, and never when it could pair nobody new. Each round records the question it
answered. With ``all_pairs`` every pair is probed (circle method) and nothing else is asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clustercert.probes import schedule
from clustercert.probes.catalog import Channel
from clustercert.probes.localise import Inference, PairResult, localise

MAX_ROUNDS = 4


@dataclass
class Round:
    number: int
    pairs: list[tuple[str, str]]
    question: str
    # per pair (a frozenset of its two nodes): the channels it is asked about; None: every probe (round 1,
    # every pair of the circle). A later round measures only what is in question at either end.
    asks: dict[frozenset, set[Channel]] | None = None

    def channels(self, a: str, b: str) -> set[Channel] | None:
        return None if self.asks is None else self.asks.get(frozenset((a, b)), set())


@dataclass
class Rounds:
    nodes: list[str]
    domains: dict[str, str] | None = None
    all_pairs: bool = False
    max_rounds: int = MAX_ROUNDS
    node_bad: set[str] = field(default_factory=set)   # failed their own node probes
    results: list[PairResult] = field(default_factory=list)
    down: set[str] = field(default_factory=set)       # stopped answering: out of the schedule
    done: list[Round] = field(default_factory=list)
    _circle: list[list[tuple[str, str]]] | None = None

    def first(self) -> Round | None:
        """Round 1 (None with fewer than two nodes)."""
        if len(self.nodes) < 2:
            return None
        if self.all_pairs:
            self._circle = schedule.circle_rounds(self.nodes)
            pairs = self._circle[0]
            question = f"every pair: round 1 of {len(self._circle)}"
        else:
            pairs, spare = schedule.round1(self.nodes, self.domains)
            question = ("a matching of every node" + (f" ({spare} waits: an odd count)" if spare else "")
                        + (", no pair within one failure domain" if self.domains else ""))
        return Round(1, pairs, question)

    def record(self, rnd: Round, results: list[PairResult], down: set[str]) -> None:
        """What round ``rnd`` gave: the results of its pairs whose nodes both answered, and the nodes
        that stopped answering (their pairs say nothing about the fabric)."""
        self.done.append(rnd)
        self.down |= down
        self.results += [r for r in results if not ({r.a, r.b} & self.down)]

    def alive(self) -> list[str]:
        return [n for n in self.nodes if n not in self.down]

    def inference(self) -> Inference:
        return localise(self.results, self.alive(), self.node_bad)

    def next(self) -> Round | None:
        """The next round, or None when nothing is left to ask (or nothing more can be asked)."""
        k = len(self.done) + 1
        if self._circle is not None:
            if k > len(self._circle):
                return None
            alive = set(self.alive())
            pairs = [p for p in self._circle[k - 1] if set(p) <= alive]
            return Round(k, pairs, f"every pair: round {k} of {len(self._circle)}") if pairs else None
        if k > self.max_rounds:
            return None
        inf = self.inference()
        if not inf.needs:
            return None
        tried: dict[str, set[str]] = {}
        for rnd in self.done:
            for a, b in rnd.pairs:
                tried.setdefault(a, set()).add(b)
                tried.setdefault(b, set()).add(a)
        pairs = schedule.next_round(self.alive(), inf.needs, tried, self.cleared())
        if not pairs:
            return None
        asks = {frozenset(p): set(inf.needs.get(p[0], ())) | set(inf.needs.get(p[1], ())) for p in pairs}
        return Round(k, pairs, inf.question, asks)

    def cleared(self) -> dict[str, set[Channel]]:
        """Per node, the channels it passed with some partner."""
        out: dict[str, set[Channel]] = {}
        bad: dict[frozenset, set[Channel]] = {}
        for r in self.results:
            bad.setdefault(r.key, set()).update(ch for ch, ok in r.passed.items() if not ok)
        for r in self.results:
            for ch, ok in r.passed.items():
                if ok and ch not in bad[r.key]:
                    out.setdefault(r.a, set()).add(ch)
                    out.setdefault(r.b, set()).add(ch)
        return out
