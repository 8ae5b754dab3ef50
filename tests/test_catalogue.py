"""Issue 23.4: the catalogue of check and probe ids (clustercert.report.catalogue) against what the code
emits, the profiles, the lab's fault table and the lab tests it names; docs/checks.md is generated from it;
validate
--checks/--skip take its ids."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from clustercert.checks import COMPONENT_ORDER, HostContext, component, registry
from clustercert.cli import main
from clustercert.model.profile import KNOWN_THRESHOLDS, builtin_profiles, load_profile
from clustercert.report import catalogue

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src" / "clustercert"


def _emitted_check_ids() -> set[str]:
    """Check ids in the checks package's source: CHECK_IDS tuples, Finding("...") / judge/ok/error("...")
    calls, and CHECK = "..." constants."""
    ids = set()
    pattern = re.compile(
        r'(?:Finding|judge|ok|error)\(\s*"([a-z0-9_]+\.[a-z0-9_]+)"|CHECK\s*=\s*"([a-z0-9_.]+)"'
    )
    for f in (SRC / "checks").glob("*.py"):
        text = f.read_text()
        for m in pattern.finditer(text):
            ids.add(m.group(1) or m.group(2))
        for tup in re.findall(r"CHECK_IDS\s*=\s*\(([^)]*)\)", text):
            ids |= set(re.findall(r'"([a-z0-9_]+\.[a-z0-9_]+)"', tup))
    return ids


def _emitted_probe_ids() -> set[str]:
    """probe.<name> for every Measurement the probes can make: literal names, the pair tools
    (PAIR_THRESHOLD), the nvbandwidth testcases (NVBW_TESTS), and the localisation finding."""
    from clustercert.probes.catalog import NVBW_TESTS, PAIR_THRESHOLD

    names = set()
    for f in (SRC / "probes").glob("*.py"):
        names |= set(re.findall(r'Measurement\(\s*"([a-z0-9_]+)"', f.read_text()))
        names |= {
            m.removeprefix("probe.") for m in re.findall(r'Finding\(\s*"(probe\.[a-z0-9_]+)"', f.read_text())
        }
    names |= set(PAIR_THRESHOLD) | set(NVBW_TESTS)
    return {f"probe.{n}" for n in names}


def test_catalogue_checks_are_the_registry():
    reg = registry()
    assert {e.id: e.component for e in catalogue.CHECKS} == reg
    assert len([i for i in reg if i != "ib.bond_failover"]) == 43  # net.bond_lacp (issue 36)
    assert _emitted_check_ids() == set(reg), _emitted_check_ids() ^ set(reg)
    assert [e.id for e in catalogue.CHECKS if e.disruptive] == ["ib.bond_failover"]


def test_catalogue_probes_are_what_the_probes_emit():
    assert {e.id for e in catalogue.PROBES} == _emitted_probe_ids()
    assert all(e.component == "probe" and e.kind == "probe" for e in catalogue.PROBES)


def test_ids_are_unique_and_well_formed():
    ids = [e.id for e in catalogue.ENTRIES]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z0-9_]+\.[a-z0-9_]+", i) for i in ids)
    assert not set(catalogue.DRIFT_ITEM_IDS) & set(ids)


@pytest.mark.parametrize("profile", builtin_profiles())
def test_what_each_entry_reads_and_is_held_to_exists_in_the_profile(profile):
    prof = load_profile(profile)
    fields = prof.model_dump()
    for e in catalogue.ENTRIES:
        for t in e.thresholds:
            assert t in KNOWN_THRESHOLDS, (e.id, t)
        for key in e.profile_keys:
            head = key.split(".")[0].removesuffix("[]")
            assert head in fields, (e.id, key)
        if e.kind == "check":
            module = "bond_failover" if e.disruptive else e.component
            cmds = component(module).commands(HostContext("n", prof))
            # every evidence key the entry names is one the component collects (for some profile; e.g. the
            # RDMA stack's commands differ between DOCA and inbox), and what it collects is named
            assert set(e.reads) & set(cmds) or not cmds, (e.id, e.reads, sorted(cmds))
    doc = catalogue.document([profile])
    for entry in doc["entries"]:
        for x in entry["profiles"][profile]["expects"]:
            assert x["source"], (entry["id"], x)
            if x["key"].startswith("thresholds.") and x["value"] is not None:
                assert x["source"] == prof.thresholds[x["key"].removeprefix("thresholds.")].source


def test_every_evidence_key_names_a_command_of_its_component():
    keys: dict[str, set[str]] = {}
    for profile in builtin_profiles():
        prof = load_profile(profile)
        for name in (*COMPONENT_ORDER, "bond_failover"):
            keys.setdefault(name, set()).update(component(name).commands(HostContext("n", prof)))
    for e in catalogue.CHECKS:
        module = "bond_failover" if e.disruptive else e.component
        assert e.reads and set(e.reads) <= keys[module] | {"rdma_core_pkg"}, (e.id, e.reads)


# ---- the lab's proofs: generated from the lab tests' metadata, shipped by the lab --------------------------

def _generator():
    """scripts/lab_proofs.py, imported by path (it reads the lab tests' metadata; nothing of them runs)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("_lab_proofs", REPO / "scripts" / "lab_proofs.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_lab_proofs", mod)
    spec.loader.exec_module(mod)
    return mod


def _proofs() -> list[tuple[str, catalogue.Proof]]:
    """(id, proof) for every lab proof the installed lab declares (the tests run with the lab installed)."""
    lab = catalogue.lab_proofs()
    assert lab is not None, "the lab (clustercert-lab) is not installed: scripts/setup.sh installs it"
    return [(i, p) for i, ps in lab.items() for p in ps]


def test_the_shipped_lab_proofs_are_the_lab_tests_metadata():
    """The lab's proofs file (clustercert-lab/src/clustercert_lab/proofs/lab.json) is what
    scripts/lab_proofs.py makes of the lab tests' `pytest.mark.proves` markers and fault-matrix lists now: a
    marker added, changed or dropped without regenerating the file fails here; and the product reads that very
    file through the lab's entry point."""
    gen = _generator()
    assert gen.OUT.read_text() == gen.text(gen.generate()), \
        (
            "clustercert-lab/src/clustercert_lab/proofs/lab.json is stale: run `.venv/bin/python scripts/"
            "lab_proofs.py`"
        )
    want = {(i, p["fault"], json.dumps(p["params"], sort_keys=True), p["status"], p["test"])
            for i, ps in gen.generate()["proofs"].items() for p in ps}
    have = {(i, p.fault, json.dumps(p.params, sort_keys=True), p.status, p.test) for i, p in _proofs()}
    assert have == want and len(have) > 50


def test_the_generator_reads_markers_and_refuses_what_is_not_data(tmp_path, monkeypatch):
    gen = _generator()
    monkeypatch.setattr(gen, "REPO", tmp_path)
    f = tmp_path / "tests" / "test_x_lab.py"
    f.parent.mkdir()
    f.write_text('import pytest\nSLOW = {"factor": 0.3}\n\n\n'
                 '@pytest.mark.proves("probe.iperf3", "probe.pairs", fault="link_slow", params=SLOW)\n'
                 '@pytest.mark.proves("probe.iperf3", fault="bond_slave_down", status="error")\n'
                 'def test_a(lab):\n    pass\n')
    assert gen.marked(f) == [
        ("probe.iperf3", {"fault": "link_slow", "params": {"factor": 0.3}, "status": "fail",
                          "test": "tests/test_x_lab.py::test_a"}),
        ("probe.pairs", {"fault": "link_slow", "params": {"factor": 0.3}, "status": "fail",
                         "test": "tests/test_x_lab.py::test_a"}),
        ("probe.iperf3", {"fault": "bond_slave_down", "params": {}, "status": "error",
                          "test": "tests/test_x_lab.py::test_a"})]
    for bad, why in [('proves("probe.iperf3", fault=kind())', "is not a literal"),
                     ('proves(fault="link_slow")', "proves(ID, ..., fault=KIND"),
                     ('proves("probe.iperf3", fault="link_slow", statuss="fail")', "not ['statuss']")]:
        f.write_text(f"import pytest\n\n\n@pytest.mark.{bad}\ndef test_a(lab):\n    pass\n")
        with pytest.raises(gen.MetadataError, match=re.escape(why)):
            gen.marked(f)


def test_every_lab_proof_names_an_id_a_verdict_or_a_drift_item():
    known = set(catalogue.BY_ID) | set(catalogue.VERDICTS) | set(catalogue.DRIFT_ITEM_IDS)
    assert {i for i, _ in _proofs()} <= known


def test_catalogue_agrees_with_the_lab_fault_table():
    """The product never imports clustercert_lab: the lab's proofs are its data. Here they are held against
    the lab's own FAULTS: every fault kind is listed under the check its table names, every fault a proof
    names exists with those parameters, and every proof names a lab test that exists and uses that fault."""
    from clustercert_lab.faults import FAULTS

    gen = _generator()
    proofs = {(i, p.fault): p for i, p in _proofs()}
    for kind, fk in FAULTS.items():
        assert (fk.check, kind) in proofs, f"lab fault {kind} (check {fk.check}) is not in the catalogue"
    for (check, kind), p in proofs.items():
        assert kind in FAULTS, (check, kind)
        assert set(p.params) <= set(FAULTS[kind].params), (check, kind, p.params)
        assert p.status in ("fail", "error", "unreachable") or (
            check in catalogue.DRIFT_ITEM_IDS and p.status == "hardware"
        )
        assert p.test, f"{check} <- {kind}: the proof names no lab test"
        path, _, name = p.test.partition("::")
        text = (REPO / path).read_text()
        assert f"def {name}(" in text, p.test
        body = text.split(f"def {name}(", 1)[1].split("\ndef ", 1)[0]
        # the fault-matrix tests take the kind from their parametrisation
        # (test_every_lab_proof_is_asserted...)
        assert kind in body or p.test in (gen.VALIDATE_LAB, gen.PROBE_LAB), (p.test, kind)


def test_every_id_says_how_the_lab_proves_it_or_why_not():
    for e in catalogue.ENTRIES:
        fails = any(p.status == "fail" for p in catalogue.proofs_of(e.id))
        assert fails or e.note, f"{e.id}: no lab fault makes it fail, and no note says why"
        if not catalogue.proofs_of(e.id):
            assert len(e.note) > 20, e.id
    unproven = sorted(
        e.id for e in catalogue.ENTRIES if not any(p.status == "fail" for p in catalogue.proofs_of(e.id))
    )
    # what the lab cannot make fail today (each with its reason in the catalogue)
    assert "gpu.model" in unproven and "gpu.count" not in unproven


# ---- every (fault kind -> id) the lab proofs list is asserted by a lab test --------------------------------

def _lab_module(path: str):
    """A lab test module, imported by path for its parametrisation lists (nothing runs: the lab fixtures are
    only named in it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_catalogue_{Path(path).stem}", REPO / path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _matrix() -> dict[str, dict[tuple[str, str], dict]]:
    """The two lab fault matrices as {test: {(fault kind, id): the parameters the test injects}}: the
    validators' test_fault_is_caught_on_its_node_only (VALIDATOR_FAULTS: each kind with the check the lab's
    fault table names, and ALSO_FAILS besides) and test_probe_fault_is_caught_on_its_node_only (PROBE_FAULTS),
    each test parametrised over those very lists and asserting that every id of its case fails on the faulty
    node and on no other."""
    import inspect

    from clustercert_lab.faults import FAULTS

    gen = _generator()
    path = gen.VALIDATE_LAB.partition("::")[0]
    assert gen.PROBE_LAB.partition("::")[0] == path == gen.MATRIX_FILE
    mod = _lab_module(path)
    validators = mod.test_fault_is_caught_on_its_node_only
    probes = mod.test_probe_fault_is_caught_on_its_node_only
    marks = {
        f: [m for m in getattr(f, "pytestmark", []) if m.name == "parametrize"] for f in (validators, probes)
    }
    assert [m.args for m in marks[validators]] == [("kind", mod.VALIDATOR_FAULTS)]
    assert [m.args for m in marks[probes]] == [("kind", sorted(mod.PROBE_FAULTS))]
    # each case's ids are asserted failing on the faulty node (fail, not error), and not failing elsewhere
    for f, lists in (
        (validators, ("FAULTS[kind].check", "ALSO_FAILS.get(kind")),
        (probes, ("PROBE_FAULTS[kind]",)),
    ):
        src = inspect.getsource(f)
        assert all(x in src for x in lists) and src.count('["status"] == "fail"') >= 2, f.__name__
    assert set(mod.ALSO_FAILS) <= set(mod.VALIDATOR_FAULTS) and set(mod.PROBE_FAULTS) <= set(FAULTS)
    cases = {(k, FAULTS[k].check): {} for k in mod.VALIDATOR_FAULTS}
    cases |= {(k, c): {} for k, also in mod.ALSO_FAILS.items() for c in also}
    probe_cases = {(k, c): params for k, (params, _probes, ids) in mod.PROBE_FAULTS.items() for c in ids}
    return {gen.VALIDATE_LAB: cases, gen.PROBE_LAB: probe_cases}


def _test_text(path: str, name: str) -> str:
    """A lab test function's source with the module-level helpers and constants it names (one level: CHECK,
    _pair, ...), where the fault it injects and the id it asserts are written."""
    import ast

    source = (REPO / path).read_text()
    tree = ast.parse(source)
    top: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            top[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    top[t.id] = node
    fn = top.get(name)
    assert isinstance(fn, ast.FunctionDef), f"{path}::{name} does not exist"
    fn_body = ast.Module(body=fn.body, type_ignores=[])  # the body: not the proves markers above it
    named = {n.id for n in ast.walk(fn_body) if isinstance(n, ast.Name)} & set(top) - {name}
    body = "\n".join(ast.get_source_segment(source, node) for node in fn.body)
    return "\n".join([body, *(ast.get_source_segment(source, top[x]) for x in sorted(named))])


def test_every_lab_proof_is_asserted_by_the_lab_test_it_names():
    """Issue 23 acceptance: every id names the lab fault kind that makes it fail, and a lab test asserts it:
    a (fault kind, id) of the validators' or the probes' fault matrix (the kind injected with those
    parameters, the id failing on that node only), or a lab test marked `proves` that injects the kind and
    asserts the id (for a node-to-node probe: the links of its probe) with the proof's status, in its body
    (the marker's own words do not count). Every fault a proof names is one tests/lab/test_faults.py shows on
    a node (its CASES)."""
    from clustercert.probes.catalog import PAIR_THRESHOLD

    matrix = _matrix()
    cases = _lab_module("tests/lab/test_faults.py").CASES
    for ident, p in _proofs():
        assert p.fault in cases, (ident, p.fault)
        if p.test in matrix:
            assert p.status == "fail", (ident, p.test)
            assert (p.fault, ident) in matrix[p.test], (
                f"{p.test} does not assert {ident} failing with {p.fault}"
            )
            assert matrix[p.test][(p.fault, ident)] == {k: str(v) for k, v in p.params.items()}, (
                ident,
                p.fault,
            )
            continue
        path, _, name = p.test.partition("::")
        text = _test_text(path, name)
        assert re.search(rf'\.fault\([^)]*"{p.fault}"', text), f"{p.test} does not inject {p.fault}"
        if ident in catalogue.DRIFT_ITEM_IDS:  # a drift item: the test asserts the item and its kind
            assert f'"{ident}"' in text and f'"{p.status}"' in text, (
                f"{p.test} does not assert a {p.status} item {ident}"
            )
            continue
        probe = ident.removeprefix("probe.")
        assert ident in text or (probe in PAIR_THRESHOLD and f'"{probe}' in text), (
            f"{p.test} does not assert {ident}"
        )
        assert f'"{p.status}"' in text, f"{p.test} does not assert {ident} {p.status}"


def test_the_fault_matrices_assert_nothing_the_catalogue_does_not_list():
    """The other way round: each (fault kind, id) a fault-matrix test asserts is a lab proof (the lab names
    the fault for every id any fault fails), and every id no fault makes fail says why."""
    proofs = {(p.fault, i, p.test) for i, p in _proofs() if p.status == "fail"}
    for test, cases in _matrix().items():
        for kind, check in cases:
            assert (kind, check, test) in proofs, (
                f"{test} asserts {check} failing with {kind}: not in the catalogue"
            )
    unproven = {
        e.id: e.note
        for e in catalogue.ENTRIES
        if not any(p.status == "fail" for p in catalogue.proofs_of(e.id))
    }
    assert all(len(note) > 20 for note in unproven.values()), unproven
    assert {"ib.ipoib", "nccl.version", "probe.nccl_allreduce", "probe.ib_write_bw_loopback",
            "probe.nvbandwidth_h2d", "probe.nvbandwidth_d2h"}.isdisjoint(unproven)


def test_the_product_does_not_import_the_lab():
    """No module of the product imports clustercert_lab: the lab evidence is the lab's data, `-i lab` a path
    convention (clustercert.paths) and the `lab` verb the lab's own program, run in a process of its own.
    tests/test_architecture.py holds every form of import to it, and tests/test_cli_flags.py runs the
    catalogue, the parser and `-i lab` in a fresh interpreter and finds no clustercert_lab module loaded."""
    for f in sorted(SRC.rglob("*.py")):
        assert not re.search(r"^\s*(from|import) clustercert_lab", f.read_text(), re.M), f


# ---- outputs ------------------------------------------------------------------------------------------

def test_docs_checks_md_is_generated_from_the_catalogue():
    want = catalogue.markdown(catalogue.document())
    have = (REPO / "docs" / "checks.md").read_text()
    assert have == want, (
        "docs/checks.md is stale: run `clustercert checks --format markdown > docs/checks.md`"
    )
    for e in catalogue.ENTRIES:
        assert f"### `{e.id}`" in have


def test_checks_verb_table_json_markdown(capsys):
    assert main(["checks", "--profile", "lab"]) == 0
    out = capsys.readouterr().out
    for e in catalogue.ENTRIES:
        assert e.id in out
    assert main(["checks", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "clustercert.checks/v1" and doc["profiles"] == builtin_profiles()
    assert len(doc["entries"]) == len(catalogue.ENTRIES)
    count = next(e for e in doc["entries"] if e["id"] == "gpu.count")
    assert count["profiles"]["lab"]["reads"] == [{"evidence": "nvsmi_xml", "command": "nvidia-smi -q -x"}]
    assert count["profiles"]["a100-sxm-8x-hdr"]["expects"][0]["value"] == 8
    assert count["lab"]["proofs"][0]["fault"] == "gpu_missing"
    iperf = next(e for e in doc["entries"] if e["id"] == "probe.iperf3")
    th = {x["key"]: x for x in iperf["profiles"]["h100-sxm-8x-ndr"]["expects"]}
    assert th["thresholds.iperf3_ipoib"]["value"] == ">= 20 gbit_per_s"
    assert th["thresholds.iperf3_ipoib"]["source"].startswith("clustercert default")
    assert main(["checks", "--format", "markdown"]) == 0
    assert capsys.readouterr().out == (REPO / "docs" / "checks.md").read_text()
    assert main(["checks", "--profile", "no-such-profile"]) == 2
    assert "unknown profile 'no-such-profile'" in capsys.readouterr().err


# ---- validate --checks / --skip ------------------------------------------------------------------

def test_expand_takes_ids_and_components():
    assert catalogue.expand("--checks", "gpu.count, time") == {"gpu.count", "time.sync"}
    assert catalogue.expand("--checks", "bond") == {"ib.bond", "net.bond_lacp", "ib.bond_failover"}
    assert catalogue.expand("--checks", None) is None
    assert catalogue.components_for({"nccl.config", "gpu.xid", "cuda.version"}) == ["gpu", "driver", "ib"]


@pytest.mark.parametrize("argv, fragment", [
    (["--checks", "gpu.cnt"], "--checks: gpu.cnt: unknown check id or component (did you mean gpu.count?)"),
    (["--skip", "gpu.bogus"], "--skip: gpu.bogus: unknown check id or component"),
    (["--checks", "probe.iperf3"], "--checks: probe.iperf3: is a probe, not a validator check"),
    (["--checks", "ib.bond_failover"], "--checks: ib.bond_failover: runs only with --disruptive"),
    (["--checks", "time", "--skip", "time.sync"], "--skip: time.sync: leaves no check to run"),
    (["--checks", ","], "--checks: ,: names no check id or component"),
    (["--checks", "gpu", "--disruptive"], "--disruptive: the disruptive test belongs to bond"),
])
def test_bad_check_selection_is_one_line_before_anything_runs(argv, fragment, capsys, monkeypatch):
    import clustercert.collect.ssh

    def nothing(*a, **k):
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(clustercert.collect.ssh, "collect_many", nothing)
    rc = main(["validate", "-i", "sample:h100", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and fragment in err, err


def test_checks_lists_the_cluster_probe_and_the_one_host_launch_with_their_lab_faults(capsys):
    """Issue 33: `clustercert checks` lists probe.nccl_cluster with its threshold and the lab fault that fails
    it (nccl_scale_slow), and probe.nccl_allreduce with nccl_one_host (every rank on one host: error)."""
    assert main(["checks", "--format", "json"]) == 0
    doc = {e["id"]: e for e in json.loads(capsys.readouterr().out)["entries"]}
    scale = doc["probe.nccl_cluster"]
    assert [(p["fault"], p["status"]) for p in scale["lab"]["proofs"]] == [("nccl_scale_slow", "fail")]
    th = {x["key"]: x for x in scale["profiles"]["lab"]["expects"]}
    assert th["thresholds.nccl_allreduce_cluster"]["value"] == ">= 0.9 ratio", th
    assert "PERFORMANCE.md" in th["thresholds.nccl_allreduce_cluster"]["source"]
    pair = doc["probe.nccl_allreduce"]
    assert ("nccl_one_host", "error") in [(p["fault"], p["status"]) for p in pair["lab"]["proofs"]]
    assert main(["checks", "--profile", "lab"]) == 0
    out = capsys.readouterr().out
    assert "probe.nccl_cluster" in out and "nccl_scale_slow" in out and "nccl_one_host" in out
