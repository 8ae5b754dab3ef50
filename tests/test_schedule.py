from __future__ import annotations

import time

from clustercert.probes.schedule import circle_rounds, round1


def nodes(n):
    return [f"node{i:05d}" for i in range(1, n + 1)]


def test_round1_is_a_perfect_matching():
    pairs, spare = round1(nodes(8))
    assert spare is None and len(pairs) == 4
    assert sorted(n for p in pairs for n in p) == nodes(8)
    pairs, spare = round1(nodes(7))
    assert spare == "node00007" and len(pairs) == 3


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
    racks = {n: f"rack{i // 40:03d}" for i, n in enumerate(ns)}
    t0 = time.process_time()  # CPU time: parallel test workers beside it do not count against the bound
    pairs, spare = round1(ns)
    rack_pairs, rack_spare = round1(ns, racks)
    elapsed = time.process_time() - t0
    assert elapsed < 1.0, elapsed
    assert len(pairs) == len(rack_pairs) == 5000 and spare is rack_spare is None
    assert all(racks[a] != racks[b] for a, b in rack_pairs)
