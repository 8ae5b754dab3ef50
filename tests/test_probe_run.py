"""The one round loop (clustercert.probes.run) driven with a fake collector: certify's judge (thresholds)
and drift's judge (a baseline) localise the same fault through the same code; a dead fabric fails in
about a second; concurrency stays within --forks."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

from clustercert.collect import ssh
from clustercert.collect.ssh import ProbeRun
from clustercert.model.evidence import CommandResult, NodeEvidence
from clustercert.model.profile import load_profile
from clustercert.probes import run as probe_run
from clustercert.probes.judge import BaselineJudge, ThresholdJudge
from clustercert.probes.plan import ProbeSettings

SEP = "-" * 87


def perftest_out(gbit: float) -> str:
    return (f"{SEP}\n #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            f" 65536      100000           {gbit * 1.01:.2f}            {gbit:.2f}                 0.3\n"
            f"{SEP}\n")


def iperf3_out(gbit: float) -> str:
    end = {"bytes": int(gbit * 2.5e8), "seconds": 2.0, "bits_per_second": gbit * 1e9}
    return json.dumps({"start": {"connecting_to": {"host": "x", "port": 5201}}, "intervals": [],
                       "end": {"sum_sent": end | {"retransmits": 0}, "sum_received": end}})


class FakeFabric:
    """Nodes n01..nNN with two fabrics; ``slow``: (node, fabric) whose link runs at 30 %; ``dead``: (node,
    fabric) whose IPoIB address does not answer. Implements the collect functions the probe run calls."""

    def __init__(self, n: int, slow=(), dead=()):
        self.names = [f"n{i:02d}" for i in range(1, n + 1)]
        self.ip = {
            (f"10.25{f + 1}.0.{i}"): (name, f) for i, name in enumerate(self.names, 11) for f in (0, 1)
        }
        self.slow, self.dead = set(slow), set(dead)
        self.lock = threading.Lock()
        self.busy = self.most = 0
        self.clients: list[str] = []
        self.runner_limit = ssh.runner_limit

    def hosts(self) -> dict:
        prof = load_profile("lab")
        out = {}
        for i, name in enumerate(self.names, 11):
            out[name] = SimpleNamespace(
                name=name,
                connection={"ansible_host": name},
                profile=prof,
                vars=SimpleNamespace(
                    clustercert_fabric_addresses={"ib0": f"10.251.0.{i}/24", "ib1": f"10.252.0.{i}/24"},
                    clustercert_slurm=False,
                    clustercert_rack=None,
                ),
            )
        return out

    def _factor(self, a: str, b: str, fabric: int) -> float:
        return 0.3 if (a, fabric) in self.slow or (b, fabric) in self.slow else 1.0

    # -- the collect functions ------------------------------------------------------------------
    def collect_node(self, node, conn, commands, **_):
        results = {}
        for name, spec in commands.items():
            line = spec[0]
            if name.startswith("reach"):
                src, dst = line.split()[-2:]
                dead = {self.ip[src], self.ip[dst]} & self.dead
                results[name] = CommandResult(
                    1 if dead else 0,
                    "1 packets transmitted, 0 received" if dead else "1 packets transmitted, 1 received",
                    "",
                    False,
                    1.0 if dead else 0.01,
                    line,
                )
            else:
                results[name] = CommandResult(0, "KILLED=", "", False, 0.01, line)
        return NodeEvidence(node, True, results=results)

    def collect_many(self, nodes, commands_for, **_):
        return {n: self.collect_node(n, c, commands_for[n]) for n, c in nodes.items()}

    def start_server(self, server, timeout, **_):
        return server

    def stop_server(self, srv, wait=0.0):
        return CommandResult(0, "", "", False, 0.0, "")

    def finish_probe(self, srv, client, timeout, **_):
        node, _conn, line = client
        with self.lock:
            self.busy += 1
            self.most = max(self.most, self.busy)
            self.clients.append(line)
        try:
            time.sleep(0.02)
            words = line.split()
            if words[0] == "iperf3":
                server, bind = words[words.index("-c") + 1], words[words.index("-B") + 1]
                (a, f), (b, _f) = self.ip[bind], self.ip[server]
                if {(a, f), (b, f)} & self.dead:  # what iperf3 --connect-timeout gives
                    return ProbeRun(
                        None,
                        CommandResult(
                            1, json.dumps({"error": "unable to connect to server"}), "", False, 3.0, line
                        ),
                    )
                return ProbeRun(
                    None, CommandResult(0, iperf3_out(1.5 * self._factor(a, b, f)), "", False, 2.0, line)
                )
            hca, server = words[words.index("-d") + 1], words[-1]
            f = int(hca[-1])
            b = server
            return ProbeRun(
                None, CommandResult(0, perftest_out(390.0 * self._factor(node, b, f)), "", False, 2.0, line)
            )
        finally:
            with self.lock:
                self.busy -= 1


def _run(fab: FakeFabric, judge, forks: int = 25, probes=frozenset({"ib_write_bw", "iperf3"})):
    inv = SimpleNamespace(hosts=fab.hosts())
    return probe_run.run(
        inv, fab.names, ProbeSettings(2, 20, only=probes, node_probes=False), judge, forks, io=fab
    )


def test_certify_and_drift_judges_localise_the_same_fault_through_the_one_loop(monkeypatch, tmp_path):
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path))
    # certify: thresholds
    out = _run(FakeFabric(6, slow={("n03", 1)}), ThresholdJudge())
    bad = [x for x in out.localisation if x.kind == "bad_node"]
    assert [(x.subject, x.fabric) for x in bad] == [("n03", 1)] and len(out.rounds) == 2
    assert set(bad[0].probes) == {"ib_write_bw", "iperf3"} and len(bad[0].partners) == 2
    assert out.schedule()[1]["question"].startswith("which of n03, n04")
    # round 2 measures what it asks: fabric 1 only (the fabric-0 probes passed everywhere in round 1)
    r2 = [m for m in out.pairs if m.round == 2]
    assert r2 and {m.fabric for m in r2} == {1} and {m.probe for m in r2} == {"ib_write_bw", "iperf3"}
    # drift: the same fabric against a healthy baseline (its median values), the same loop
    base = [{"probe": "ib_write_bw", "fabric": f, "value": 390.0, "status": "pass"} for f in (0, 1)] + [
        {"probe": "iperf3", "fabric": f, "value": 1.5, "status": "pass"} for f in (0, 1)]
    out = _run(FakeFabric(6, slow={("n03", 1)}), BaselineJudge(base, lambda n: 0.10))
    assert [(x.subject, x.fabric, x.kind) for x in out.localisation] == [("n03", 1, "bad_node")]
    # a healthy fabric: one round, nothing found, with either judge
    for judge in (ThresholdJudge(), BaselineJudge(base, lambda n: 0.10)):
        out = _run(FakeFabric(6), judge)
        assert len(out.rounds) == 1 and out.localisation == []


def test_three_nodes_drift_blames_the_node_on_its_fabric_after_trying_every_partner(monkeypatch, tmp_path):
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path))
    base = [{"probe": "iperf3", "fabric": f, "value": 1.5, "status": "pass"} for f in (0, 1)]
    out = _run(
        FakeFabric(3, slow={("n01", 1)}), BaselineJudge(base, lambda n: 0.10), probes=frozenset({"iperf3"})
    )
    assert [(x.subject, x.fabric, x.kind, x.partners) for x in out.localisation] == [
        ("n01", 1, "bad_node", ("n02", "n03"))
    ]


def test_a_dead_fabric_fails_in_a_second_and_its_iperf3_is_not_started(monkeypatch, tmp_path):
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path))
    fab = FakeFabric(4, dead={("n02", 0)})
    out = _run(fab, ThresholdJudge())
    dead = [m for m in out.pairs if m.probe == "iperf3" and m.status == "error"]
    assert dead and all("not run: fabric 0 not reachable" in m.observed for m in dead)
    # no iperf3 client was started toward or from n02's fabric-0 address
    assert not [c for c in fab.clients if c.startswith("iperf3") and ("10.251.0.12" in c)]
    assert [(x.subject, x.fabric) for x in out.localisation if x.kind == "bad_node"] == [("n02", 0)]


def test_pairs_run_at_most_forks_at_a_time(monkeypatch, tmp_path):
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path))
    fab = FakeFabric(16)
    _run(fab, ThresholdJudge(), forks=2, probes=frozenset({"iperf3"}))
    # a pair runs its fabrics' clients at once (2 here): at most 2 pairs x 2 fabrics
    assert 2 <= fab.most <= 4
    fab = FakeFabric(16)
    _run(fab, ThresholdJudge(), forks=25, probes=frozenset({"iperf3"}))
    assert fab.most > 4


def test_slurm_is_read_before_any_server_starts(monkeypatch, tmp_path):
    """Round 1's servers start early, as soon as their node's loopback tests end, and may hold every session
    the node allows until their clients come: reading the Slurm states (one more session on a Slurm node)
    after them waited for the servers' timeout (the lab's drain test, slurmctld stopped: 19 min). The
    states are read before any probe."""
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path))
    fab = FakeFabric(4)
    order: list[str] = []
    start = fab.start_server
    fab.start_server = lambda server, timeout, **kw: (order.append("server"), start(server, timeout, **kw))[1]
    monkeypatch.setattr(probe_run, "slurm_launch_states", lambda *a, **k: order.append("slurm"))
    inv = SimpleNamespace(hosts=fab.hosts())
    probe_run.run(
        inv,
        fab.names,
        ProbeSettings(2, 20, only=frozenset({"ib_write_bw", "iperf3"})),
        ThresholdJudge(),
        25,
        io=fab,
    )
    assert "server" in order and order[0] == "slurm" and order.count("slurm") == 1, order
