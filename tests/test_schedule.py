from __future__ import annotations

import time

from clustercert.schedule import circle_rounds, localise, round1, round2


def nodes(n):
    return [f"node{i:05d}" for i in range(1, n + 1)]


def test_round1_is_a_perfect_matching():
    pairs, spare = round1(nodes(8))
    assert spare is None and len(pairs) == 4
    assert sorted(n for p in pairs for n in p) == nodes(8)
    pairs, spare = round1(nodes(7))
    assert spare == "node00007" and len(pairs) == 3


def test_bad_node_and_bad_link_told_apart_in_two_rounds():
    ns = nodes(8)
    pairs, spare = round1(ns)
    # node00002 is broken (fails with anyone); the node00005<->node00006 link is broken
    bad_node, bad_link = "node00002", {"node00005", "node00006"}

    def run(a, b):
        return not (bad_node in (a, b) or {a, b} == bad_link)

    r1 = {p: run(*p) for p in pairs}
    assert [p for p, ok in r1.items() if not ok] == [("node00001", "node00002"), ("node00005", "node00006")]
    rounds = round2(r1, spare)
    assert len(rounds) == 1  # enough good partners: one more round
    r2 = rounds[0]
    involved = [n for p in r2 for n in p]
    assert len(involved) == len(set(involved)), "a round's pairs are disjoint"
    outcomes = [(a, b, ok) for (a, b), ok in r1.items()] + [(a, b, run(a, b)) for a, b in r2]
    loc = {x.subject: x.kind for x in localise(outcomes)}
    assert loc == {"node00002": "bad_node", "node00005<->node00006": "bad_link"}


def test_odd_spare_joins_a_passing_node():
    pairs, spare = round1(nodes(5))
    r1 = {p: True for p in pairs}
    (r2,) = round2(r1, spare)
    assert len(r2) == 1 and r2[0][0] == spare and r2[0][1] in {n for p in pairs for n in p}


def test_circle_method_covers_all_pairs():
    for n in (2, 7, 8, 16):
        rounds = circle_rounds(nodes(n))
        seen = [tuple(sorted(p)) for r in rounds for p in r]
        assert len(seen) == len(set(seen)) == n * (n - 1) // 2
        for r in rounds:
            flat = [x for p in r for x in p]
            assert len(flat) == len(set(flat))
        assert len(rounds) == (n - 1 if n % 2 == 0 else n)


def test_ten_thousand_nodes_schedule_under_a_second():
    ns = nodes(10_000)
    t0 = time.perf_counter()
    pairs, spare = round1(ns)
    r1 = {p: (i % 50 != 0) for i, p in enumerate(pairs)}  # 2% of pairs fail
    rounds = round2(r1, spare)
    outcomes = [(a, b, ok) for (a, b), ok in r1.items()] + [(a, b, True) for r in rounds for a, b in r]
    loc = localise(outcomes)
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.0, elapsed
    assert len(rounds) == 1 and len(rounds[0]) == 200
    assert all(x.kind == "bad_link" for x in loc) and len(loc) == 100
