"""Fleet scale (issue 24, points 3-5): the pipeline after the probes linear in N, evidence once per node in
the certificate and the store, retention (report prune), and every concurrency bound by --forks and by
the nodes' sshd MaxSessions."""

from __future__ import annotations

import base64
import json
import sqlite3
import time
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from clustercert.checks.drift import Item, fold_symptoms, performance_items
from clustercert.record import certificate as cc
from clustercert.record.store import Store, default_keep

# ---- drift's folding: dict lookups, linear ------------------------------------------------------------

def _drift_items(n: int) -> list[Item]:
    items = []
    for i in range(n):
        node = f"gpu{i:05d}"
        items.append(Item(node, "configuration", task="nccl: /etc/nccl.conf", role="nccl"))
        items += [
            Item(node, "state", check=c)
            for c in ("nccl.config", "driver.version", "gpu.count", "ib.port_state")
        ]
    return items


def _fold_seconds(n: int) -> float:
    items = _drift_items(n)
    t0 = time.process_time()
    out = fold_symptoms(items)
    dt = time.process_time() - t0
    assert len(out) == 3 * n and all(len(i.explains) == 2 for i in out if i.kind == "configuration")
    return dt


def test_fold_symptoms_at_10000_nodes_is_linear():
    small = min(_fold_seconds(1_000) for _ in range(3))
    big = min(_fold_seconds(10_000) for _ in range(3))
    assert big < 1.0, f"fold_symptoms took {big:.2f} s CPU for 10,000 nodes"
    # linear: 10x the nodes is ~10x the time (quadratic was ~100x); generous for a busy 2-core host
    assert big < 40 * max(small, 1e-4), (small, big)


def test_fold_symptoms_keeps_the_first_configuration_item_per_node():
    items = [Item("a", "configuration", task="t1"), Item("a", "configuration", task="t2"),
             Item("a", "state", check="nccl.config"), Item("b", "state", check="nccl.config"),
             Item("a", "state", check="gpu.count")]
    out = fold_symptoms(items)
    assert [(i.node, i.kind, i.check) for i in out] == [
        ("a", "configuration", None),
        ("a", "configuration", None),
        ("b", "state", "nccl.config"),
        ("a", "state", "gpu.count"),
    ]
    assert out[0].explains == ["nccl.config"] and out[1].explains == []


def test_performance_items_names_each_node_s_notes_by_lookup():
    pairs = [SimpleNamespace(a=f"n{i}", b=f"n{i + 1}", fabric=0) for i in range(0, 2000, 2)]
    judge = SimpleNamespace(note=lambda m: f"{m.a}<->{m.b} fabric 0: 50% below the baseline")
    locs = [SimpleNamespace(subject="n10", kind="bad_node", reason="slow", fabric=0),
            SimpleNamespace(subject="n4<->n5", kind="bad_link", reason="both ends fine elsewhere", fabric=0)]
    items = performance_items(SimpleNamespace(pairs=pairs, localisation=locs), judge)
    assert items[0].after == "n10<->n11 fabric 0: 50% below the baseline"
    assert items[1].after == "n4<->n5 fabric 0: 50% below the baseline"


# ---- evidence once per node in the certificate -------------------------------------------------------

def _node(n_gpus: int = 8) -> dict:
    sysfs = "mlx5_0/ports/1/state:4: ACTIVE\n" * 20
    fs = [
        {"check": "ib.port_state", "status": "pass", "subject": f"mlx5_{r}/1", "evidence": sysfs}
        for r in range(4)
    ]
    fs += [
        {"check": "ib.port_rate", "status": "pass", "subject": f"mlx5_{r}/1", "evidence": sysfs}
        for r in range(4)
    ]
    fs += [
        {"check": "gpu.ecc", "status": "pass", "subject": f"GPU{g}", "evidence": f"GPU {g}: 0 errors"}
        for g in range(n_gpus)
    ]
    fs.append({"check": "time.sync", "status": "pass", "evidence": ""})
    return {"verdict": "pass", "findings": fs}


def _signed(nodes: dict, key) -> dict:
    cert = {"schema": cc.SCHEMA, "cluster": "c", "verdict": "pass", "nodes": nodes, "links": []}
    return cc.sign(cert, key)


def _verify(tmp_path, cert: dict, key) -> tuple[bool, str]:
    (tmp_path / "cert.json").write_text(cc.dumps(cert))
    (tmp_path / "k.pub").write_text(cc.openssh_public_line(key.public_key()))
    return cc.verify(tmp_path / "cert.json", tmp_path / "k.pub")


def test_evidence_is_stored_once_per_node_and_verify_checks_the_references(tmp_path):
    key = Ed25519PrivateKey.generate()
    nodes = cc.pack_evidence({"n1": _node(), "n2": _node()})
    body = nodes["n1"]
    assert len(body["evidence"]) == 1 + 8  # the sysfs text once, one text per GPU
    assert all("evidence" not in f for f in body["findings"])
    assert body["findings"][-1].get("evidence_ref") is None  # no evidence, no reference
    assert cc.finding_evidence(body, body["findings"][0]).startswith("mlx5_0/ports/1/state")
    cert = _signed(nodes, key)
    assert _verify(tmp_path, cert, key) == (True, "")
    # a certificate signed with a reference that names no text, or a text that is not its hash: refused
    bad = json.loads(json.dumps(cert))
    bad["nodes"]["n1"]["findings"][0]["evidence_ref"] = "0" * 16
    ok, why = _verify(tmp_path, cc.sign(bad, key), key)
    assert not ok and "names no evidence" in why and "nodes.n1.findings[0]" in why
    ref = cert["nodes"]["n1"]["findings"][0]["evidence_ref"]
    # the file holds each node's texts as a list and each finding the index of its text: read back, the
    # references are the texts' hashes again
    (tmp_path / "cert.json").write_text(cc.dumps(cert))
    raw = json.loads((tmp_path / "cert.json").read_text())
    assert isinstance(raw["nodes"]["n1"]["evidence"], list) and len(raw["nodes"]["n1"]["evidence"]) == 1 + 8
    assert cc.expanded(raw)["nodes"]["n1"] == json.loads(json.dumps(cert["nodes"]["n1"]))
    raw["nodes"]["n1"]["findings"]["rows"][0][
        raw["nodes"]["n1"]["findings"]["columns"].index("evidence_ref")
    ] = 99
    ok, why = _verify(tmp_path, cc.sign(raw, key), key)
    assert not ok and "nodes.n1.findings: row 0: evidence_ref 99 is not the index of a text" in why
    # a certificate of the form before (texts by reference, findings as objects) signed with a text that is
    # not its hash: refused
    bad = json.loads(json.dumps(cert))
    bad["nodes"]["n1"]["evidence"][ref] += "altered before signing"
    bad.pop("signature")
    (tmp_path / "cert.json").write_text(json.dumps(bad | {"signature": {
        "algorithm": "ed25519", "public_key": base64.b64encode(cc.public_raw(key.public_key())).decode(),
        "value": base64.b64encode(key.sign(cc.canonical_bytes(bad))).decode()}}))
    ok, why = cc.verify(tmp_path / "cert.json", tmp_path / "k.pub")
    assert not ok and "SHA-256" in why
    # changed after signing: the signature covers the references and the texts
    bad = json.loads(json.dumps(cert))
    bad["nodes"]["n2"]["evidence"][ref] = "forged"
    ok, why = _verify(tmp_path, bad, key)
    assert not ok and "signature does not match" in why


def test_a_certificate_with_inline_evidence_still_verifies(tmp_path):
    key = Ed25519PrivateKey.generate()
    cert = _signed({"n1": _node()}, key)  # as certify wrote them before evidence was stored once
    assert "evidence" in cert["nodes"]["n1"]["findings"][0]
    assert _verify(tmp_path, cert, key) == (True, "")


# ---- the store: evidence once per node, indexes, retention -------------------------------------------

def _record(store: Store, run_id: str, kind: str = "certify", verdict: str = "pass", started: float = 0.0,
            inventory: str = "/inv", meta: dict | None = None) -> None:
    store.start_run(run_id, kind, inventory, meta)
    store.finish_run(run_id, verdict, cc.pack_evidence({"n1": _node(), "n2": _node()}),
                     [{"a": "n1", "b": "n2", "probe": "ib_write_bw", "status": "pass", "value": 390.0}])
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE runs SET started=? WHERE id=?", (started, run_id))


def test_the_store_keeps_each_text_once_and_findings_read_it_back(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    _record(store, "r1")
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT COUNT(*) FROM evidence WHERE run_id='r1' AND node='n1'").fetchone()[0] == 9
        assert db.execute("SELECT COUNT(*) FROM findings WHERE evidence != ''").fetchone()[0] == 0
    fs = store.findings("r1", "n1")
    assert fs[0]["evidence"].startswith("mlx5_0/ports/1/state") and fs[-1]["evidence"] == ""
    # validate's inline findings are stored the same way
    store.start_run("v1", "validate", "/inv")
    store.finish_run("v1", "pass", {"n1": _node()})
    assert store.findings("v1", "n1")[8]["evidence"] == "GPU 0: 0 errors"


def test_every_query_the_verbs_make_uses_an_index(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    queries = {
        "runs": "SELECT * FROM runs WHERE kind=? ORDER BY started DESC LIMIT 50",
        "latest_certified": "SELECT * FROM runs WHERE kind='certify' AND verdict='pass' AND status='done' "
        "AND inventory=? ORDER BY started DESC LIMIT 1",
        "history": "SELECT r.id FROM nodes n JOIN runs r ON r.id = n.run_id WHERE n.node = ? ORDER BY "
                   "r.started DESC",
        "findings": "SELECT * FROM findings f LEFT JOIN evidence e ON e.run_id = f.run_id AND e.node = "
        "f.node AND e.ref = f.evidence_ref WHERE f.run_id=? AND f.node=?",
        "links": "SELECT * FROM links WHERE run_id=?",
        "actions": "SELECT * FROM actions WHERE run_id=? ORDER BY system, node",
        "hardware": "SELECT node, identity FROM hardware WHERE run_id=?",
        "node_verdicts": "SELECT node, verdict FROM nodes WHERE run_id=?",
    }
    with sqlite3.connect(store.path) as db:
        for name, q in queries.items():
            plan = " | ".join(r[-1] for r in db.execute("EXPLAIN QUERY PLAN " + q, ("x",) * q.count("?")))
            scans = [p for p in plan.split(" | ") if p.startswith("SCAN") and "USING" not in p]
            assert not scans, f"{name}: {plan}"


def test_an_old_store_gets_the_new_column_and_tables(tmp_path):
    path = tmp_path / "store.sqlite"
    with sqlite3.connect(path) as db:  # the findings table as stores made before issue 24 have it
        db.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, inventory TEXT NOT NULL, "
                   "started REAL NOT NULL, finished REAL, status TEXT NOT NULL, verdict TEXT, meta TEXT NOT "
                   "NULL DEFAULT '{}')")
        db.execute("CREATE TABLE findings (run_id TEXT NOT NULL, node TEXT NOT NULL, check_id TEXT NOT NULL, "
                   "status TEXT NOT NULL, subject TEXT NOT NULL DEFAULT '', expected TEXT NOT NULL DEFAULT "
                   "'', observed TEXT NOT NULL DEFAULT '', evidence TEXT NOT NULL DEFAULT '', value REAL, "
                   "unit TEXT)")
        db.execute("INSERT INTO runs VALUES ('old', 'validate', '/inv', 1, 2, 'done', 'pass', '{}')")
        db.execute(
            "INSERT INTO findings VALUES ('old', 'n1', 'gpu.count', 'pass', '', '8', '8', 'GPU 0 ...', NULL, "
            "NULL)"
        )
    store = Store(path)
    assert store.findings("old")[0]["evidence"] == "GPU 0 ..."
    _record(store, "new", started=3)
    assert store.findings("new", "n1")[0]["evidence"].startswith("mlx5_0")


def test_prune_keeps_the_newest_and_never_the_baseline(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    _record(store, "base", started=100)                          # the latest certified run of /inv
    _record(store, "older-cert", started=50)                     # certified before it: not a baseline
    _record(store, "other-base", started=10, inventory="/other")  # the latest certified run of /other
    _record(store, "named", kind="certify", verdict="fail", started=20)
    _record(store, "drift1", kind="drift", verdict="drift", started=200, meta={"baseline": "named"})
    _record(store, "gone", kind="drift", verdict="drift", started=5, meta={"baseline": "older-cert"})
    for i in range(5):
        _record(store, f"v{i}", kind="validate", started=300 + i)
    result = store.prune(keep=6)
    assert result["removed"] == ["gone", "older-cert"]  # a pruned drift protects no baseline
    assert set(result["protected"]) == {"base", "other-base", "named"}
    assert {r["id"] for r in store.runs(limit=100)} == {"drift1", "base", "other-base", "named"} | {
        f"v{i}" for i in range(5)
    }
    with sqlite3.connect(store.path) as db:  # the cascade took every row of the removed runs
        for table in ("nodes", "findings", "evidence", "links"):
            assert not db.execute(
                f"SELECT COUNT(*) FROM {table} WHERE run_id IN ('gone', 'older-cert')"
            ).fetchone()[0]
    assert store.integrity_ok()
    assert store.latest_certified("/inv")["id"] == "base"


def test_prune_older_than_and_dry_run_and_vacuum(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    for i in range(30):
        _record(store, f"v{i:02d}", kind="validate", started=1000 + i * 86400)
    now = 1000 + 29 * 86400
    dry = store.prune(older_than_s=10 * 86400, now=now, dry_run=True)
    assert len(dry["removed"]) == 19 and len(store.runs(limit=100)) == 30
    result = store.prune(older_than_s=10 * 86400, now=now)
    assert result["removed"] == dry["removed"] and len(store.runs(limit=100)) == 11
    assert result["bytes_after"] < result["bytes_before"]  # VACUUM handed the space back
    assert store.prune(keep=5, older_than_s=1e9, now=now)["removed"] == []  # both: beyond 5 AND older


def test_default_keep_from_config(tmp_path):
    assert default_keep(tmp_path) == 500
    (tmp_path / "config.yml").write_text("report:\n  keep: 40\n")
    assert default_keep(tmp_path) == 40
    (tmp_path / "config.yml").write_text("report:\n  keep: none\n")
    with pytest.raises(Exception, match="report.keep"):
        default_keep(tmp_path)


def test_report_prune_cli(tmp_path, monkeypatch, capsys):
    from clustercert import cli

    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path))
    store = Store(tmp_path / "store.sqlite")
    for i in range(4):
        _record(store, f"v{i}", kind="validate", started=100 + i)
    assert cli.main(["report", "prune", "--keep", "1", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["report"] == "prune" and doc["prune"]["removed"] == ["v0", "v1", "v2"]
    from test_schemas import check
    check(doc, "report")
    assert cli.main(["report", "prune", "--older-than", "soon"]) == 2
    err = capsys.readouterr().err
    assert "--older-than" in err and "Traceback" not in err


# ---- concurrency: --forks nodes at once, at most MaxSessions - 1 sessions per node ----------------------

class _Counting:
    """Counts the sessions (processes) the collect layer has open, per node and in all: a fake transport
    under clustercert.collect.ssh (its _remote/ssh_argv put the node's name first in the command line)."""

    def __init__(self, monkeypatch):
        import subprocess
        import threading

        from clustercert.collect import ssh

        self.lock = threading.Lock()
        self.open: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.total = self.peak_total = 0
        counting = self
        real = subprocess.Popen

        class Popen(real):
            def __init__(self, argv, *a, **kw):
                node = argv[2].split("=", 1)[1].split(";", 1)[0] if argv[:2] == ["/bin/sh", "-c"] else "local"
                self._cc_node, self._cc_done = node, False
                counting.enter(node)
                try:
                    super().__init__(argv, *a, **kw)
                except BaseException:
                    counting.leave(node)
                    raise

            def _handle_exitstatus(self, *a, **kw):
                super()._handle_exitstatus(*a, **kw)
                if not self._cc_done:
                    self._cc_done = True
                    counting.leave(self._cc_node)

        monkeypatch.setattr(ssh.subprocess, "Popen", Popen)
        monkeypatch.setattr(
            ssh, "_remote", lambda conn, node, script, cp: ["/bin/sh", "-c", f": node={node}; {script}"]
        )
        monkeypatch.setattr(
            ssh,
            "ssh_argv",
            lambda conn, node, cp=None, **kw: [
                "/bin/sh",
                "-c",
                f': node={node}; exec "$0" -c "$1"',
                "/bin/sh",
            ],
        )

    def enter(self, node):
        with self.lock:
            self.open[node] = self.open.get(node, 0) + 1
            self.peak[node] = max(self.peak.get(node, 0), self.open[node])
            self.total += 1
            self.peak_total = max(self.peak_total, self.total)

    def leave(self, node):
        with self.lock:
            self.open[node] -= 1
            self.total -= 1


def test_collect_many_holds_at_most_forks_sessions(monkeypatch):
    from clustercert.collect import ssh

    c = _Counting(monkeypatch)
    nodes = {f"n{i:02d}": {"ansible_python_interpreter": "/bin/sh"} for i in range(12)}
    # the runner is replaced by a shell that sleeps: one session per node, what matters is how many at once
    monkeypatch.setattr(ssh.remote, "source", lambda name: "sleep 0.3; echo '{\"results\": {}}'")
    out = ssh.collect_many(nodes, {n: {"x": ("true", 5)} for n in nodes}, forks=4)
    assert all(ev.reachable for ev in out.values()), out
    assert c.peak_total <= 4 and c.peak_total >= 2 and max(c.peak.values()) == 1


def test_a_node_never_carries_more_than_max_sessions_minus_one(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from clustercert.collect import ssh

    c = _Counting(monkeypatch)
    conn = {}
    # 24 probes against one server node (18 servers of an 8-rail profile's three kinds, and more), their
    # clients on one node, with the groups killed where a wrapper did not reap its own: every session counted
    with ThreadPoolExecutor(48) as ex:
        runs = list(
            ex.map(
                lambda i: ssh.run_server_client(
                    ("srv", conn, "sleep 0.2"), ("cli", conn, "sleep 0.1"), 5, server_start_delay=0.05
                ),
                range(24),
            )
        )
    assert all(r.client.ok and r.server is not None for r in runs)
    assert c.peak["srv"] <= ssh.MAX_SESSIONS - 1 and c.peak["cli"] <= ssh.MAX_SESSIONS - 1, c.peak
    assert c.peak["srv"] >= 2  # they did run at once
    assert c.total == 0


def test_forks_beyond_the_open_files_limit_is_refused_before_anything_runs(monkeypatch, tmp_path, capsys):
    import resource

    from clustercert import cli
    from clustercert.collect import ssh

    monkeypatch.setattr(resource, "getrlimit", lambda what: (1024, 1024))
    monkeypatch.setattr(resource, "setrlimit", lambda *a: pytest.fail("must not raise past the hard limit"))
    with pytest.raises(
        Exception, match=r"--forks.*open-files limit is 1024 \(hard 1024\): use --forks 17 or less"
    ):
        ssh.check_open_files(25)
    assert ssh.check_open_files(17) == 1024
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    here:\n      ansible_connection: local\n")
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path / "state"))
    assert cli.main(["validate", "-i", str(inv), "--forks", "500"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and "--forks" in err[0]
        and "ulimit -n" in err[0]
        and not (tmp_path / "state" / "store.sqlite").exists()
    )


def test_the_soft_limit_is_raised_towards_the_hard_one_where_that_is_enough(monkeypatch):
    import resource

    from clustercert.collect import ssh

    calls = []
    monkeypatch.setattr(resource, "getrlimit", lambda what: (1024, 65536))
    monkeypatch.setattr(resource, "setrlimit", lambda what, lim: calls.append(lim))
    assert ssh.check_open_files(100) == 100 * 2 * 9 * 3 + 64 and calls == [(5464, 65536)]


def test_certificate_per_node_with_the_lab_profile_s_full_check_set_is_at_most_32_kb():
    import os
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parent.parent / "benchmarks" / "scale.py"
    p = subprocess.run(
        [sys.executable, str(bench), "--nodes", "24", "--json", "--forks", "4"],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"PYTHONPATH": str(bench.parent.parent / "src")},
    )
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert set(doc) >= {
        "nodes",
        "cpu_s",
        "rss_mb",
        "certificate_bytes",
        "html_bytes",
        "junit_bytes",
        "store_bytes",
        "peak_sessions",
    }
    assert doc["findings"]["pass"] > 100 * 24  # every component ran on every node
    assert doc["certificate_bytes"] / doc["nodes"] <= 32 * 1024, doc
    assert 1 <= doc["peak_sessions"] <= 4  # --forks nodes at once, one runner each


def scale_pipeline(monkeypatch, tmp_path, nodes: int, forks: int, keep: dict) -> dict:
    """benchmarks/scale.py's pipeline (benchmarks/fleet.py's fake collector, every probe of the lab profile)
    over ``nodes`` nodes, its state under ``tmp_path``; what it replaces is undone after the test. Its
    document; ``keep`` gets the certificate and its path."""
    import sys
    from pathlib import Path

    from clustercert.collect import ssh

    bench = Path(__file__).resolve().parent.parent / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    monkeypatch.setattr(ssh, "collect_node", ssh.collect_node)  # the pipeline replaces it: undone after
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path / "home"))  # the pipeline sets its own: undone after
    sys.modules.pop("scale", None)
    import scale

    return scale.pipeline(nodes, forks=forks, all_probes=True, keep=keep, home=tmp_path / "pipeline")


def test_a_certificate_with_every_probe_of_the_lab_profile_is_at_most_32_kb_per_node_and_reads_back(tmp_path,
                                                                                                   monkeypatch):
    """benchmarks/fleet.py's fake collector answering every probe the lab profile plans, through the real
    validators, probe rounds, signing and reports: the certificate file stays within 32 KB per node, verifies,
    and read back from the file gives the reports what the run gave them."""
    from clustercert.report.html import render_html
    from clustercert.report.junit import render_junit
    from clustercert.report.markdown import render_summary

    keep: dict = {}
    doc = scale_pipeline(monkeypatch, tmp_path, 16, 4, keep)
    assert doc["certificate_bytes"] / 16 <= 32 * 1024, doc
    kinds = {
        "probe.ib_write_bw_loopback",
        "probe.nccl_allreduce",
        "probe.gpu_util_under_load",
        "probe.nvbandwidth_h2d",
        "probe.nvbandwidth_d2h",
        "probe.nvbandwidth_d2d",
        "probe.dcgmi_diag",
        "link.ib_write_bw",
        "link.ib_write_lat",
        "link.iperf3",
        "link.nccl_allreduce",
    }
    assert kinds <= set(doc["probe_checks"]), sorted(kinds - set(doc["probe_checks"]))
    cert, path = keep["cert"], keep["certificate"]
    (tmp_path / "k.pub").write_text(f"ssh-ed25519 {cc.openssh_public_line(_pub(cert)).split()[1]}\n")
    assert cc.verify(path, tmp_path / "k.pub") == (True, "")
    back = cc.expanded(cc.load_certificate(path))
    assert render_html(back) == keep["html"].decode() and render_junit(back) == render_junit(cert)
    assert render_summary(back) == render_summary(cert)


def _pub(cert: dict):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    return Ed25519PublicKey.from_public_bytes(base64.b64decode(cert["signature"]["public_key"]))


# ---- the controller's memory: raw outputs, validator results -------------------------------------------

def test_collect_many_hands_each_node_over_as_it_ends_with_a_bounded_backlog(monkeypatch):
    import random
    import threading
    import time

    from clustercert.collect import ssh
    from clustercert.model.evidence import NodeEvidence

    lock, state = threading.Lock(), {"started": 0, "handed": 0, "most": 0}

    def fake(node, conn, commands, **_):
        with lock:
            state["started"] += 1
            state["most"] = max(state["most"], state["started"] - state["handed"])
        time.sleep(random.uniform(0, 0.01))
        return NodeEvidence(node, True, results={"x": node})

    def each(name, ev):
        with lock:
            state["handed"] += 1
        time.sleep(0.002)  # the controller's evaluation, slower than these nodes
        return NodeEvidence(name, True, results={"kept": ev.results["x"]})

    monkeypatch.setattr(ssh, "collect_node", fake)
    nodes = {f"n{i:03d}": {} for i in range(60)}
    out = ssh.collect_many(nodes, {n: {} for n in nodes}, forks=4, each=each)
    assert list(out) == list(nodes)  # the inventory's order, whatever order the nodes ended in
    assert all(out[n].results == {"kept": n} for n in nodes)
    assert state["handed"] == 60 and state["most"] <= 2 * 4, state


def _fleet_validation(monkeypatch, tmp_path, n: int, **kw):
    from pathlib import Path

    from clustercert.checks import COMPONENT_ORDER
    from clustercert.checks import run as check_run
    from clustercert.collect import ssh

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path / "home"))
    import fleet

    inv = fleet.inventory(n)
    monkeypatch.setattr(ssh, "collect_node", fleet.Fleet(inv).collect_node)
    return inv, check_run.validate_nodes(inv, list(COMPONENT_ORDER), 3, **kw, io=ssh.SshBackend())


def test_certify_keeps_none_of_the_raw_outputs_and_records_the_same(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from clustercert.checks.run import KEPT_OUTPUTS
    from clustercert.record import results

    inv, kept = _fleet_validation(monkeypatch, tmp_path, 4)
    _, slim = _fleet_validation(monkeypatch, tmp_path, 4, keep_outputs=False)
    assert any(len(r.evidence.results) > 20 for r in kept.values())
    for name, r in slim.items():
        assert set(r.evidence.results) <= KEPT_OUTPUTS and r.hardware is not None
        assert [f.to_json() for f in r.findings] == [f.to_json() for f in kept[name].findings]
        assert results.node_hardware(r) == results.node_hardware(kept[name])
    assert results.versions(slim)["nodes"] == results.versions(kept)["nodes"]
    outcome = SimpleNamespace(down=set(), why_down={}, per_node={}, localisation=[], pairs=[], rounds=[],
                              timing={}, schedule=lambda: [])
    started = __import__("datetime").datetime(2026, 12, 5)
    whole = results.certificate_body(inv, kept, outcome, started, 1.0)
    consumed = results.certificate_body(inv, slim, outcome, started, 1.0, consume=True)
    assert slim == {}  # released as recorded
    assert {k: v for k, v in consumed.items() if k != "finished"} == {
        k: v for k, v in whole.items() if k != "finished"
    }
