"""node-check's zipapp (issue 24.1): built on the controller, run by a plain python3 on a node.

The node is this machine with fake tools (tests/test_node_check.py's), the interpreter the system's python3
run isolated (``-I -S``: no site-packages, so no pydantic, PyYAML or Ansible can be found) -- the test proves
that first. Then the same findings and exit codes as ``clustercert node-check``, --drain included."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_node_check import (
    FAULTY_XML,
    GPU_CHECKS,
    HEALTHY_XML,
    LAB_MOUNTS,
    fake_node,
    fake_scontrol,
    fake_storage,
    fake_tool,
    node_file,
)

from clustercert.checks import COMPONENT_MODULES, COMPONENT_ORDER, DISRUPTIVE
from clustercert.model.profile import builtin_profiles, load_profile
from clustercert.remote import nodeapp

SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"
ISOLATED = ("-I", "-S")


@pytest.fixture(scope="module")
def pyz(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("zipapp") / "clustercert-node-check.pyz"
    profiles = {n: load_profile(n).model_dump(mode="json") for n in builtin_profiles()}
    return nodeapp.build(out, profiles, COMPONENT_MODULES)[0]


def run_pyz(
    pyz: Path, *args: str, python: str = SYSTEM_PYTHON, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run([python, *ISOLATED, str(pyz), *args], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", **(env or {})})


def test_the_node_python_is_isolated_from_the_controllers_packages():
    for module in ("pydantic", "yaml", "ansible", "ansible_runner", "jinja2", "rich", "clustercert"):
        p = subprocess.run(
            [SYSTEM_PYTHON, *ISOLATED, "-c", f"import {module}"], capture_output=True, text=True
        )
        assert p.returncode != 0 and "ModuleNotFoundError" in p.stderr, (module, p.stderr)


def test_the_zipapp_holds_the_node_modules_and_the_profiles_only(pyz):
    assert pyz.read_bytes().startswith(b"#!/usr/bin/env python3\n") and pyz.stat().st_mode & 0o777 == 0o755
    names = set(zipfile.ZipFile(pyz).namelist())
    assert names == ({f"clustercert/{f}" for f in nodeapp.module_files(COMPONENT_MODULES)} | {"__main__.py"}
                     | {f"clustercert/profiles/{n}.json" for n in builtin_profiles()})
    mods = {n.removeprefix("clustercert/").removesuffix(".py") for n in names}
    assert (
        not {"model/profile", "model/inventory", "model/strict_yaml", "report/terminal", "collect/engine"}
        & mods
    )


def _component_modules() -> set[str]:
    """The checks package's component modules, read from its files: those that define CHECK_IDS at module
    level."""
    out = set()
    for f in (nodeapp.PACKAGE / "checks").glob("*.py"):
        tree = ast.parse(f.read_text())
        if any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "CHECK_IDS" for t in n.targets)
               for n in tree.body):
            out.add(f.stem)
    return out


def test_the_zipapp_carries_every_check_component_and_no_controller_check_module(pyz):
    """Every component module of the checks package -- node-check imports them by name (checks.component) --
    is in the zipapp, found from the package's files: a new check module cannot be left out. Its other checks
    modules are the drivers' (run, cluster) and the components' helper (rails: the compute rails' discovery);
    the controller's (testinfra: pytest; drift) stay out."""
    comps = _component_modules()
    assert comps == set(COMPONENT_MODULES) == {*COMPONENT_ORDER, *DISRUPTIVE.values()} and "storage" in comps
    mods = {n.removeprefix("clustercert/").removesuffix(".py") for n in zipfile.ZipFile(pyz).namelist()}
    assert {m for m in mods if m.startswith("checks/")} == {
        f"checks/{c}" for c in comps | {"__init__", "run", "cluster", "rails"}
    }
    assert not {"checks/testinfra", "checks/drift"} & mods


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(clustercert modules imported at module level -- type-checking blocks left out --, those imported in
    functions)."""
    tree = ast.parse(path.read_text())
    top, inner = set(), set()

    def visit(node, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            fn = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.ImportFrom) and (child.module or "").startswith("clustercert"):
                for a in child.names:
                    (inner if fn else top).add(f"{child.module}.{a.name}")
                    (inner if fn else top).add(child.module)
            elif isinstance(child, ast.Import):
                (inner if fn else top).update(a.name for a in child.names if a.name.startswith("clustercert"))
            visit(child, fn)

    visit(tree, False)
    return top, inner


def test_the_module_list_is_closed_under_its_imports():
    """Every clustercert module a zipapp module imports is in the zipapp, but for what only the controller
    runs: a YAML profile's validation (model.profile) and --build-zipapp (remote.nodeapp)."""
    files = nodeapp.module_files(COMPONENT_MODULES)
    have = {f"clustercert.{f.removesuffix('.py').replace('/', '.')}".removesuffix(".__init__") for f in files}
    packages = {m.rpartition(".")[0] for m in have}
    controller_only = {"clustercert.model.profile", "clustercert.remote.nodeapp"}
    missing = []
    for f in files:
        top, inner = _imports(nodeapp.PACKAGE / f)
        for m in top | inner:
            # a name imported from a module
            known = m in have or m in packages or m.rpartition(".")[0] in have
            if not known and not any(m == c or m.startswith(c + ".") for c in controller_only):
                missing.append(f"{f}: {m}")
            if m in controller_only and m in top:
                missing.append(f"{f}: {m} at module level")
    assert not missing, missing


def test_a_build_is_reproducible_and_an_unchanged_one_says_so(pyz, tmp_path, cli):
    r = cli("node-check", "--build-zipapp", str(tmp_path / "again.pyz"))
    assert r.returncode == 0 and r.stdout.startswith(f"{tmp_path / 'again.pyz'}: written ("), (
        r.stdout + r.stderr
    )
    assert (tmp_path / "again.pyz").read_bytes() == pyz.read_bytes()
    mtime = (tmp_path / "again.pyz").stat().st_mtime_ns
    r = cli("node-check", "--build-zipapp", str(tmp_path / "again.pyz"))
    assert (
        r.stdout.startswith(f"{tmp_path / 'again.pyz'}: unchanged (")
        and (tmp_path / "again.pyz").stat().st_mtime_ns == mtime
    )
    r = cli("node-check", "--build-zipapp", str(tmp_path / "no" / "such.pyz"))
    assert r.returncode == 2 and "is not a writable directory" in r.stderr


def test_healthy_and_faulty_fake_nodes(pyz, tmp_path):
    for name, xml, rc, status in (("healthy", HEALTHY_XML, 0, "pass"), ("faulty", FAULTY_XML, 1, "fail")):
        d = tmp_path / name
        d.mkdir()
        p = run_pyz(pyz, "--profile", str(node_file(d / "node.json")), "--checks", GPU_CHECKS,
                    "--tool-path", str(fake_node(d, xml)), "--format", "json")
        assert p.returncode == rc, p.stderr
        doc = json.loads(p.stdout)
        node = doc["nodes"]["gpu01"]
        assert node["verdict"] == status and doc["verdict"] == status
        assert {f["check"]: f["status"] for f in node["findings"]} == dict.fromkeys(
            GPU_CHECKS.split(","), status
        )


@pytest.mark.parametrize("unmounted, rc", [(None, 0), ("/shared", 1)])
def test_the_zipapp_checks_the_nodes_storage(pyz, tmp_path, unmounted, rc):
    """checks.storage and its parsers in the zipapp: the lab profile's mounts as a fake findmnt shows them."""
    bindir = fake_storage(
        fake_node(tmp_path, HEALTHY_XML), [m for m in LAB_MOUNTS if m["target"] != unmounted]
    )
    p = run_pyz(
        pyz,
        "--profile",
        str(node_file(tmp_path / "node.json")),
        "--checks",
        "storage",
        "--tool-path",
        str(bindir),
        "--format",
        "json",
    )
    assert p.returncode == rc, p.stderr
    got = {(f["subject"], f["status"]) for f in json.loads(p.stdout)["nodes"]["gpu01"]["findings"]}
    assert got == {
        ("/shared", "fail" if unmounted else "pass"),
        ("/scratch", "pass"),
        ("NVMe devices", "pass"),
    }


def test_the_zipapp_drains_a_faulty_node(pyz, tmp_path):
    bindir, log = fake_scontrol(tmp_path, "IDLE", None)
    fake_tool(bindir, "nvidia-smi", f"#!/bin/sh\ncat {FAULTY_XML}\n")
    p = run_pyz(
        pyz,
        "--profile",
        str(node_file(tmp_path / "node.json")),
        "--checks",
        GPU_CHECKS,
        "--tool-path",
        str(bindir),
        "--drain",
        "--slurm-node",
        "gpu01",
    )
    assert p.returncode == 1, p.stderr
    assert "slurm gpu01: drain (clustercert: gpu.count,gpu.memory,gpu.model)" in p.stdout, p.stdout
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    assert calls[-1] == [
        "update",
        "NodeName=gpu01",
        "State=DRAIN",
        "Reason=clustercert: gpu.count,gpu.memory,gpu.model",
    ]


def test_the_zipapp_carries_the_built_in_profiles(pyz, tmp_path):
    p = run_pyz(
        pyz,
        "--profile",
        "lab",
        "--checks",
        "gpu.count",
        "--tool-path",
        str(fake_node(tmp_path, HEALTHY_XML)),
        "--format",
        "json",
    )
    doc = json.loads(p.stdout)
    assert p.returncode == 1 and doc["profile"] == "built-in profile lab"  # the lab profile wants 8 GPUs
    assert doc["nodes"][next(iter(doc["nodes"]))]["findings"][0]["expected"] == "8"


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (
            ["--profile", "site.yml"],
            "--profile: site.yml: not a node file (.json) nor a profile built into this node-check",
        ),
        (["--build-zipapp", "x.pyz"], "--build-zipapp: builds on the controller"),
        (
            ["--profile", "lab", "--checks", "gpu.vbios_uniform"],
            "--checks: gpu.vbios_uniform: is cluster-wide",
        ),
    ],
)
def test_bad_input_in_the_zipapp_is_one_line_exit_2(pyz, argv, fragment):
    p = run_pyz(pyz, *argv)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and fragment in p.stderr, p.stderr


def test_help_runs_in_the_zipapp(pyz):
    p = run_pyz(pyz, "--help")
    assert p.returncode == 0 and "usage: clustercert node-check" in p.stdout and "--drain" in p.stdout


def _pythons(minor: int) -> list[str]:
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(str(p) for p in root.glob(f"3.{minor}.*/bin/python3")) + [shutil.which(f"python3.{minor}")]
    return [p for p in found if p and "/shims/" not in p][:1]  # a pyenv shim runs the version pyenv selects


@pytest.mark.parametrize(
    "python", _pythons(10) or [pytest.param(None, marks=pytest.mark.skip("no Python 3.10 here"))]
)
def test_the_floor_is_python_3_10(pyz, tmp_path, python):
    p = run_pyz(pyz, "--profile", str(node_file(tmp_path / "node.json")), "--checks", GPU_CHECKS,
                "--tool-path", str(fake_node(tmp_path, HEALTHY_XML)), "--format", "json", python=python)
    assert p.returncode == 0 and json.loads(p.stdout)["verdict"] == "pass", p.stderr


@pytest.mark.parametrize(
    "python", _pythons(9) or [pytest.param(None, marks=pytest.mark.skip("no Python 3.9 here"))]
)
def test_below_the_floor_one_line_exit_2(pyz, python):
    p = run_pyz(pyz, "--profile", "lab", python=python)
    assert p.returncode == 2 and p.stderr.startswith(
        "clustercert: error: node-check needs Python >= 3.10; this is 3.9"
    )


def test_sys_executable_runs_it_too(pyz, tmp_path):
    """The controller's own interpreter, isolated the same way (what the role's wrapper does on a node)."""
    p = run_pyz(pyz, "--profile", str(node_file(tmp_path / "node.json")), "--checks", GPU_CHECKS,
                "--tool-path", str(fake_node(tmp_path, HEALTHY_XML)), python=sys.executable)
    assert p.returncode == 0, p.stderr
