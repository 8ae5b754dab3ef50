"""`clustercert node-check` (issue 24.1): the node's own checks run on the node, with no controller.

A fake node is this machine with fake tools first on the checks' PATH (--tool-path): an ``nvidia-smi`` that
prints a fixture of tests/fixtures, an ``scontrol`` that records its argv and prints a fixture ``scontrol show
node`` line. The profile fits the fixture (the lab profile with two RTX A5000s), so the healthy node passes.
"""

from __future__ import annotations

import json
import shlex
import socket
import stat
import sys
import typing
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from clustercert.checks import HostContext, registry
from clustercert.checks import run as check_run
from clustercert.cli import main
from clustercert.model import nodefile, plain
from clustercert.model.profile import Profile, builtin_profiles, load_profile
from clustercert.remote import runner
from clustercert.report import documents

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
HEALTHY_XML = FIXTURES / "nvidia-smi" / "q-x-dual-rtx-a5000-590-v13.xml"   # 2x NVIDIA RTX A5000, 24564 MiB
FAULTY_XML = FIXTURES / "nvidia-smi" / "q-x-quadro-p400-418.xml"           # 1x Quadro P400
GPU_CHECKS = "gpu.count,gpu.model,gpu.memory"
A5000 = {"gpu": {"count": 2, "model": "NVIDIA RTX A5000", "memory_mib": 24564}}


def node_file(path: Path, node: str = "gpu01", timeout: int = 10, **overrides) -> Path:
    """The node file the node_check role writes: the resolved profile (the lab's, two A5000s), name,
    timeout."""
    profile = load_profile("lab", A5000 | overrides).model_dump(mode="json")
    path.write_text(json.dumps({"schema": nodefile.NODE_SCHEMA, "node": node, "command_timeout_s": timeout,
                                "profile": profile}))
    return path


def fake_tool(bindir: Path, name: str, body: str) -> None:
    bindir.mkdir(exist_ok=True)
    f = bindir / name
    f.write_text(body)
    f.chmod(f.stat().st_mode | stat.S_IEXEC)


def fake_node(tmp_path: Path, xml: Path) -> Path:
    """A bin directory whose nvidia-smi prints ``xml``: the node's GPUs."""
    bindir = tmp_path / "bin"
    fake_tool(bindir, "nvidia-smi", f"#!/bin/sh\ncat {shlex.quote(str(xml))}\n")
    return bindir


GIB = 1 << 30
# what the lab profile's storage section asks for (/shared and /scratch: ext4, xfs or btrfs, rw, >= 1 GiB
# free)
LAB_MOUNTS = [
    {"target": "/", "source": "/dev/vda1", "fstype": "ext4", "options": "rw,relatime", "avail": 9 * GIB},
    {
        "target": "/shared",
        "source": "/dev/vda1[/srv/shared]",
        "fstype": "ext4",
        "options": "rw,relatime",
        "avail": 50 * GIB,
    },
    {
        "target": "/scratch",
        "source": "/dev/vda1[/srv/scratch/gpu01]",
        "fstype": "xfs",
        "options": "rw,noatime",
        "avail": 20 * GIB,
    },
]


def fake_storage(bindir: Path, mounts: list[dict]) -> Path:
    """A findmnt that prints ``mounts`` and an lsblk that prints one virtio disk (the storage checks' tools,
    as JSON): the node's mounts are the fixture's, whatever this machine has mounted."""
    for tool, doc in (
        ("findmnt", {"filesystems": mounts}),
        ("lsblk", {"blockdevices": [{"name": "vda", "type": "disk", "tran": None, "size": 64 * GIB}]}),
    ):
        out = bindir.parent / f"{tool}.json"
        out.write_text(json.dumps(doc))
        fake_tool(bindir, tool, f"#!/bin/sh\ncat {shlex.quote(str(out))}\n")
    return bindir


# ---- the profile on the node: plain data, the same attributes as pydantic's
# ---------------------------------

# the derived values: the properties of model.plain's *Rules classes, which the pydantic models inherit
DERIVED = {name for cls in vars(plain).values() if isinstance(cls, type) and cls.__name__.endswith("Rules")
           for name, value in vars(cls).items() if isinstance(value, property)}


def _models(model: type, seen: dict[str, type]) -> dict[str, type]:
    """``model`` and every pydantic model its fields hold, at any depth, by name."""
    seen[model.__name__] = model
    for f in model.model_fields.values():
        for t in (f.annotation, *typing.get_args(f.annotation)):
            for u in (t, *typing.get_args(t)):
                if isinstance(u, type) and hasattr(u, "model_fields") and u.__name__ not in seen:
                    _models(u, seen)
    return seen


def _walk(a, b, where: str) -> None:
    """Every field, item and derived value of the pydantic object ``a`` equals the plain object's ``b``."""
    if hasattr(type(a), "model_fields"):
        assert set(type(a).model_fields) == set(b.as_dict()), where
        for key in type(a).model_fields:
            _walk(getattr(a, key), getattr(b, key), f"{where}.{key}")
        for prop in DERIVED:
            if hasattr(a, prop):
                assert getattr(a, prop) == getattr(b, prop), f"{where}.{prop}"
    elif isinstance(a, dict):
        assert type(b) is dict and set(a) == set(b), where
        for key in a:
            _walk(a[key], b[key], f"{where}[{key}]")
    elif isinstance(a, tuple):
        assert type(b) is tuple and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _walk(x, y, f"{where}[{i}]")
    else:
        assert a == b and type(a) is type(b), f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize("name", builtin_profiles())
def test_a_plain_profile_reads_as_the_validated_one(name):
    p = load_profile(name)
    _walk(p, plain.profile_of(p.model_dump(mode="json")), name)


def test_the_plain_profile_knows_the_models_fields_and_mappings():
    assert plain.FIELDS == tuple(Profile.model_fields)
    mappings = set()

    def visit(model, path):
        for key, f in model.model_fields.items():
            for t in (f.annotation, *typing.get_args(f.annotation)):
                if typing.get_origin(t) is dict:
                    mappings.add((*path, key))
                elif isinstance(t, type) and hasattr(t, "model_fields"):
                    visit(t, (*path, key))

    visit(Profile, ())
    assert mappings == set(plain.MAPPINGS)


def test_the_derived_values_are_defined_once_in_plain():
    """A model's derived value is a property of a model.plain *Rules class (the plain object has it too),
    never the model's own: the walk above compares every one of them."""
    models = _models(Profile, {})
    assert {"Profile", "GpuDirect", "Ddp", "Storage", "Mount", "Scratch"} <= set(models)
    own = [
        f"{name}.{key}" for name, m in models.items() for key, v in vars(m).items() if isinstance(v, property)
    ]
    assert not own, own
    assert {"floor", "limit_s", "checkpoint_paths", "ddp_ranks"} <= DERIVED


def test_plain_profiles_are_read_only():
    p = plain.profile_of(load_profile("lab").model_dump(mode="json"))
    with pytest.raises(AttributeError, match="read-only"):
        p.gpu.count = 1


def test_the_same_evidence_gives_the_same_findings_with_either_profile():
    from clustercert.checks import components, run_evaluations
    from clustercert.model.evidence import CommandResult

    p = load_profile("lab", A5000)
    ev = {"nvsmi_xml": CommandResult(0, HEALTHY_XML.read_text(), "", False, 0.1, "nvidia-smi -q -x")}
    comps = components(["gpu"])
    got = [
        run_evaluations(ev, HostContext("n", prof), comps)
        for prof in (p, plain.profile_of(p.model_dump(mode="json")))
    ]
    assert got[0] == got[1] and any(f.status == "pass" for f in got[0])


# ---- bad input: one line, exit 2, nothing runs -------------------------------------------------------------

@pytest.mark.parametrize(
    "doc, fragment",
    [
        (
            {"schema": "clustercert.node/v9"},
            "schema: is 'clustercert.node/v9', expected 'clustercert.node/v1'",
        ),
        ({"schema": nodefile.NODE_SCHEMA, "profile": {}, "extra": 1}, "extra: unknown key"),
        ({"schema": nodefile.NODE_SCHEMA, "profile": {"name": "x"}}, "profile.description: missing"),
        ({"schema": nodefile.NODE_SCHEMA, "profile": None}, "profile: expected the resolved profile"),
        (
            {"schema": nodefile.NODE_SCHEMA, "command_timeout_s": True, "profile": {}},
            "command_timeout_s: expected whole seconds",
        ),
        ({"schema": nodefile.NODE_SCHEMA, "node": "a b", "profile": {}}, "node: "),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_a_bad_node_file_is_one_line_naming_the_file_and_key(tmp_path, capsys, doc, fragment):
    f = tmp_path / "node.json"
    f.write_text(json.dumps(doc))
    assert main(["node-check", "--profile", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"clustercert: error: {f}: ") and fragment in err, err


def test_an_unknown_profile_key_is_named(tmp_path, capsys):
    f = node_file(tmp_path / "node.json")
    doc = json.loads(f.read_text())
    doc["profile"]["gpus"] = {}
    f.write_text(json.dumps(doc))
    assert main(["node-check", "--profile", str(f)]) == 2
    assert "node.json: profile.gpus: unknown profile key" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (
            ["--profile", "lab", "--checks", "ib.firmware_uniform"],
            "--checks: ib.firmware_uniform: is cluster-wide",
        ),
        (
            ["--profile", "lab", "--checks", "ib.bond_failover"],
            "--checks: ib.bond_failover: disturbs the node",
        ),
        (
            ["--profile", "lab", "--checks", "gpu.cuont"],
            "--checks: gpu.cuont: unknown check id or component (did you mean gpu.count?)",
        ),
        (["--profile", "lab", "--checks", "gpu", "--skip", "gpu"], "--skip: gpu: leaves no check to run"),
        (["--profile", "lab", "--slurm-node", "gpu01"], "--slurm-node: gpu01: only with --drain"),
        (["--profile", "lab", "--drain", "--slurm-node=-x"], "--slurm-node: -x: not a Slurm node name"),
        (["--profile", "lab", "--tool-path", "bin"], "--tool-path: bin:"),
        (["--profile", "nosuch.json"], "--profile: nosuch.json: cannot read it"),
        (["--profile", "nosuch"], "unknown profile 'nosuch'"),
        ([], "--profile: required"),
        (["--build-zipapp", "x.pyz", "--drain"], "--build-zipapp: --drain: builds the program only"),
    ],
)
def test_bad_flags_are_one_line(capsys, argv, fragment):
    assert main(["node-check", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err, err


def test_the_selection_is_the_per_node_checks():
    comps, ids = check_run.node_selection(None, None)
    assert ids == set(registry()) - set(check_run.NOT_HERE)
    assert {"ib.firmware_uniform", "gpu.vbios_uniform", "ib.bond_failover"} == set(check_run.NOT_HERE)
    assert "hardware" in comps and "gpu.nvlink_errors" in ids
    # a component named whole leaves its cluster-wide checks out, silently
    assert check_run.node_selection("hardware", None)[1] == {
        "gpu.nvlink_errors",
        "gpu.nic_affinity",
        "hw.pcie_manifest",
        "gpu.fabric_state",
    }
    assert check_run.node_selection(None, "hardware,gpu,driver")[0] == [
        "rdma",
        "ib",
        "bond",
        "container",
        "tuning",
        "time",
        "packages",
        "storage",
    ]
    # the node's own mounts and scratch: checked on the node
    assert {"storage.mounts", "storage.scratch"} <= ids


# ---- the run, on a fake node ---------------------------------------------------------------------------

def run_here(tmp_path, capsys, xml: Path, *args: str) -> tuple[int, dict]:
    bindir = fake_node(tmp_path, xml)
    rc = main(["node-check", "--profile", str(node_file(tmp_path / "node.json")), "--checks", GPU_CHECKS,
               "--tool-path", str(bindir), "--format", "json", *args])
    out, err = capsys.readouterr()
    return rc, json.loads(out)


def schema_valid(doc: dict) -> None:
    Draft202012Validator(documents.schema_for("node-check")).validate(doc)


def test_a_healthy_node_passes_exit_0(tmp_path, capsys):
    rc, doc = run_here(tmp_path, capsys, HEALTHY_XML)
    assert rc == 0 and doc["verdict"] == "pass", doc
    schema_valid(doc)
    assert doc["schema"] == "clustercert.node-check/v1" and doc["run"] is None and doc["slurm"] == []
    (name, node), = doc["nodes"].items()
    assert name == "gpu01" and node["verdict"] == "pass"
    assert {f["check"] for f in node["findings"]} == set(GPU_CHECKS.split(","))
    assert all(f["status"] == "pass" for f in node["findings"])


def test_a_faulty_node_fails_exit_1_with_the_failing_findings(tmp_path, capsys):
    rc, doc = run_here(tmp_path, capsys, FAULTY_XML)
    assert rc == 1 and doc["verdict"] == "fail"
    schema_valid(doc)
    node = doc["nodes"]["gpu01"]
    count = next(f for f in node["findings"] if f["check"] == "gpu.count")
    assert (node["verdict"], count["status"], count["expected"], count["observed"]) == (
        "fail",
        "fail",
        "2",
        "1",
    )


def test_the_text_output_folds_what_did_not_pass(tmp_path, capsys):
    bindir = fake_node(tmp_path, FAULTY_XML)
    assert main(["node-check", "--profile", str(node_file(tmp_path / "n.json")), "--checks", GPU_CHECKS,
                 "--tool-path", str(bindir)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[0]
        == f"node-check gpu01: fail -- findings 0 pass, 3 fail, 0 error, 0 skip ({tmp_path / 'n.json'})"
    )
    assert "gpu01 fail: gpu.count: expected 2, observed 1" in lines


def test_a_missing_tool_is_an_error_never_a_pass(tmp_path, capsys):
    rc = main(["node-check", "--profile", str(node_file(tmp_path / "n.json")), "--checks", "gpu.count",
               "--tool-path", str(tmp_path), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    (f,) = doc["nodes"]["gpu01"]["findings"]
    assert rc == 1 and f["status"] == "error" and "nvidia-smi" in f["observed"], f


def test_commands_run_with_the_runners_semantics(tmp_path, capsys):
    """LC_ALL=C and the fixed PATH after --tool-path; a hung tool is killed at the node file's timeout with
    its children, and is an error."""
    bindir = tmp_path / "bin"
    marker = tmp_path / "child.pid"
    fake_tool(
        bindir, "nvidia-smi", f'#!/bin/sh\necho "$LC_ALL $PATH" >&2\nsleep 300 & echo $! > {marker}\nwait\n'
    )
    rc = main(
        [
            "node-check",
            "--profile",
            str(node_file(tmp_path / "n.json", timeout=1)),
            "--checks",
            "gpu.count",
            "--tool-path",
            str(bindir),
            "--format",
            "json",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    (f,) = doc["nodes"]["gpu01"]["findings"]
    assert rc == 1 and f["status"] == "error" and f["observed"].startswith("timed out after 1 s"), f
    assert f["evidence"] == f"C {bindir}:{runner.PATH}"
    pid = int(marker.read_text())  # the tool's child went with it (its process group): gone, or a zombie
    stat_file = Path(f"/proc/{pid}/stat")
    assert not stat_file.exists() or stat_file.read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.parametrize("unmounted, rc", [(None, 0), ("/shared", 1), ("/scratch", 1)])
def test_the_storage_checks_run_on_the_node_and_a_missing_mount_fails(tmp_path, capsys, unmounted, rc):
    """storage.mounts and storage.scratch judge the node's own findmnt and lsblk: the lab profile's /shared
    and /scratch pass where mounted as it asks; one that is not mounted fails, never passes."""
    bindir = fake_storage(
        fake_node(tmp_path, HEALTHY_XML), [m for m in LAB_MOUNTS if m["target"] != unmounted]
    )
    assert main(["node-check", "--profile", str(node_file(tmp_path / "n.json")), "--checks", "storage",
                 "--tool-path", str(bindir), "--format", "json"]) == rc
    doc = json.loads(capsys.readouterr().out)
    schema_valid(doc)
    got = {(f["check"], f["subject"]): f for f in doc["nodes"]["gpu01"]["findings"]}
    assert set(got) == {
        ("storage.mounts", "/shared"),
        ("storage.scratch", "/scratch"),
        ("storage.scratch", "NVMe devices"),
    }
    for (_, subject), f in got.items():
        assert f["status"] == ("fail" if subject == unmounted else "pass"), f
        assert ("is not a mount point" in f["observed"]) == (subject == unmounted), f


def test_the_node_name_defaults_to_the_short_host_name(tmp_path, capsys):
    f = tmp_path / "bare.json"  # a bare resolved profile (what the clustercert_profile lookup returns)
    f.write_text(json.dumps(load_profile("lab", A5000).model_dump(mode="json")))
    assert main(["node-check", "--profile", str(f), "--checks", GPU_CHECKS, "--tool-path",
                 str(fake_node(tmp_path, HEALTHY_XML)), "--format", "json"]) == 0
    assert list(json.loads(capsys.readouterr().out)["nodes"]) == [socket.gethostname().split(".")[0]]


# ---- merging node-check documents on the controller --------------------------------------------------------

def test_node_check_documents_merge_into_validate_shape(tmp_path, capsys):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    _, good = run_here(tmp_path / "a", capsys, HEALTHY_XML)
    bindir = fake_node(tmp_path / "b", FAULTY_XML)
    main(
        [
            "node-check",
            "--profile",
            str(node_file(tmp_path / "b" / "n.json", node="gpu02")),
            "--checks",
            "gpu.count",
            "--tool-path",
            str(bindir),
            "--format",
            "json",
        ]
    )
    bad = json.loads(capsys.readouterr().out)
    merged = documents.merge_node_checks(good, bad)
    schema_valid(merged)
    assert list(merged["nodes"]) == ["gpu01", "gpu02"] and merged["verdict"] == "fail"
    assert merged["checks"] == sorted(GPU_CHECKS.split(",")) and merged["components"] == ["gpu"]
    # into a validate document: its nodes and node-check's have one shape
    validate = documents.validate_document({}, "run-1", 0.0, 1.0, "pass", "inv", ["time"], {"time.sync"})
    validate["nodes"] = {
        "gpu03": {
            "verdict": "pass",
            "findings": [
                {
                    "check": "time.sync",
                    "status": "pass",
                    "subject": "",
                    "expected": "",
                    "observed": "",
                    "evidence": "",
                }
            ],
        }
    }
    both = documents.merge_node_checks(validate, good)
    Draft202012Validator(documents.schema_for("validate")).validate(both)
    assert both["schema"] == "clustercert.validate/v1" and set(both["nodes"]) == {"gpu01", "gpu03"}
    assert both["components"] == ["gpu", "time"] and "slurm" not in both
    with pytest.raises(ValueError, match="gpu01 is in two"):
        documents.merge_node_checks(good, good)
    with pytest.raises(ValueError, match="not a node-check document"):
        documents.merge_node_checks(good, validate)


def test_the_node_shape_is_validates():
    assert documents.schema_for("node-check")["$defs"] == documents.schema_for("validate")["$defs"]


# ---- --drain: a fake scontrol ---------------------------------------------------------------------------

SHOW = ("NodeName={n} Arch=x86_64 CoresPerSocket=2 CPUAlloc=0 CPUTot=2 NodeAddr=10.250.0.11 NodeHostName={n} "
        "Version=22.05.8 RealMemory=24105 State={state} ThreadsPerCore=1 Partitions=lab {reason}\n")


def fake_scontrol(tmp_path: Path, state: str, reason: str | None) -> tuple[Path, Path]:
    """A bin directory whose scontrol records each call's argv (JSON, one line each) and answers `show node`
    with the node in ``state`` (``reason``, stamped as scontrol stamps it)."""
    bindir, log = tmp_path / "bin", tmp_path / "scontrol.log"
    show = tmp_path / "show.txt"
    show.write_text(SHOW.format(n="gpu01", state=state,
                                reason=f"Reason={reason} [root@2026-12-05T10:00:00]" if reason else ""))
    fake_tool(bindir, "scontrol", f"""#!{sys.executable} -I
import json, sys
with open({str(log)!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1] == "show":
    sys.stdout.write(open({str(show)!r}).read())
""")
    return bindir, log


def drain_run(
    tmp_path, capsys, xml: Path, state: str, reason: str | None
) -> tuple[int, dict, list[list[str]]]:
    bindir, log = fake_scontrol(tmp_path, state, reason)
    fake_tool(bindir, "nvidia-smi", f"#!/bin/sh\ncat {shlex.quote(str(xml))}\n")
    rc = main(
        [
            "node-check",
            "--profile",
            str(node_file(tmp_path / "n.json")),
            "--checks",
            GPU_CHECKS,
            "--tool-path",
            str(bindir),
            "--format",
            "json",
            "--drain",
            "--slurm-node",
            "gpu01",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    schema_valid(doc)
    return rc, doc, [json.loads(x) for x in log.read_text().splitlines()]


def test_drain_a_failing_node_with_its_failing_ids(tmp_path, capsys):
    rc, doc, calls = drain_run(tmp_path, capsys, FAULTY_XML, "IDLE", None)
    reason = "clustercert: gpu.count,gpu.memory,gpu.model"
    assert calls == [["show", "node", "gpu01", "--oneliner"],
                     ["update", "NodeName=gpu01", "State=DRAIN", f"Reason={reason}"]]
    (a,) = doc["slurm"]
    assert rc == 1 and (a["action"], a["reason"], a["ok"]) == ("drain", reason, True)


def test_leave_a_foreign_drain_alone(tmp_path, capsys):
    rc, doc, calls = drain_run(tmp_path, capsys, FAULTY_XML, "IDLE+DRAIN", "admin: swap PSU")
    assert calls == [["show", "node", "gpu01", "--oneliner"]]
    (a,) = doc["slurm"]
    assert rc == 1 and (a["action"], a["reason"], a["ok"]) == ("none", "admin: swap PSU", True)
    assert "drained by someone else" in a["detail"]


def test_resume_its_own_drain_when_the_node_passes(tmp_path, capsys):
    rc, doc, calls = drain_run(tmp_path, capsys, HEALTHY_XML, "IDLE+DRAIN", "clustercert: gpu.count")
    assert calls == [["show", "node", "gpu01", "--oneliner"], ["update", "NodeName=gpu01", "State=RESUME"]]
    (a,) = doc["slurm"]
    assert rc == 0 and (a["action"], a["ok"]) == ("resume", True)


def test_do_not_resume_a_foreign_drain_when_the_node_passes(tmp_path, capsys):
    rc, doc, calls = drain_run(tmp_path, capsys, HEALTHY_XML, "IDLE+DRAIN", "admin: clustercert: rerun")
    assert calls == [["show", "node", "gpu01", "--oneliner"]]
    (a,) = doc["slurm"]
    assert rc == 0 and (a["action"], a["ok"]) == ("none", True)


def test_a_passing_undrained_node_is_left_alone(tmp_path, capsys):
    rc, doc, calls = drain_run(tmp_path, capsys, HEALTHY_XML, "IDLE", None)
    assert rc == 0 and len(calls) == 1 and doc["slurm"][0]["action"] == "none"


def test_slurm_that_does_not_answer_is_exit_1_and_said(tmp_path, capsys):
    bindir = fake_node(tmp_path, HEALTHY_XML)
    fake_tool(
        bindir,
        "scontrol",
        "#!/bin/sh\necho 'slurm_load_node error: Unable to contact slurm controller' >&2\nexit 1\n",
    )
    rc = main(
        [
            "node-check",
            "--profile",
            str(node_file(tmp_path / "n.json")),
            "--checks",
            GPU_CHECKS,
            "--tool-path",
            str(bindir),
            "--drain",
            "--slurm-node",
            "gpu01",
        ]
    )
    out, err = capsys.readouterr()
    assert (
        rc == 1 and "Unable to contact slurm controller" in err and "slurm gpu01: untouched FAILED" in out
    ), (out, err)
