"""The layers docs/architecture.md draws, held against the source: the import graph of src/ (the product) and
clustercert-lab/src/ (the simulated lab, a distribution of its own), built with ``ast`` from every import
statement (at module level and inside functions alike)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
# clustercert_lab: clustercert-lab/pyproject.toml
LAB_SRC = Path(__file__).resolve().parent.parent / "clustercert-lab" / "src"

# The flow, first to last: a module imports its own layer and the layers before it, never a later one.
LAYERS = ("base", "model", "collect", "parsers", "checks", "probes", "record", "report", "commands", "cli")
BASE = {"clustercert", "clustercert.errors", "clustercert.paths", "clustercert.shell"}
CLI = {"clustercert.cli", "clustercert.cmdoptions", "clustercert.__main__"}
# the I/O drivers of the evaluate layer: they hand the pure evaluators what collect brought back
DRIVERS = {"clustercert.checks.run", "clustercert.probes.run"}


def module_name(path: Path) -> str:
    root = LAB_SRC if path.is_relative_to(LAB_SRC) else SRC
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for root in (SRC, LAB_SRC) for p in sorted(root.rglob("*.py"))}


def test_the_product_and_the_lab_are_where_their_distributions_package_them():
    """src/ holds the product alone, clustercert-lab/src/ the lab alone: each pyproject.toml packages its own.
    No `lab` at the top of the repository: `-i lab` run there would read it as a path, not the running lab's
    inventory (the README's demo runs from there)."""
    import tomllib

    assert not (SRC.parent / "lab").exists()

    assert {p.name for p in SRC.iterdir() if p.is_dir() and not p.name.endswith(".egg-info")} == {
        "clustercert"
    }
    assert {p.name for p in LAB_SRC.iterdir() if p.is_dir()} == {"clustercert_lab"}
    product = tomllib.loads((SRC.parent / "pyproject.toml").read_text())
    lab = tomllib.loads((LAB_SRC.parent / "pyproject.toml").read_text())
    assert product["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["src/clustercert"]
    assert lab["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["src/clustercert_lab"]
    assert set(product["project"]["scripts"]) == {"clustercert"} and set(lab["project"]["scripts"]) == {
        "clustercert-lab"
    }
    assert lab["project"]["name"] == "clustercert-lab" and "clustercert" in lab["project"]["dependencies"]
    assert "clustercert_lab.cli" in modules() and "clustercert.cli" in modules()  # the graph holds both


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Every module of ``known`` that ``path`` imports, at any depth, with the packages an import runs
    (``import a.b.c`` runs a/__init__, a/b/__init__ and a/b/c)."""
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for t in targets:
            parts = t.split(".")
            out |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & known
    out.discard(name)
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    mods = modules()
    g = {name: imports(path, name, set(mods)) for name, path in mods.items()}
    # clustercert.cli runs each verb's module, imported by name when the verb runs (cli.command)
    g["clustercert.cli"] |= {m for m in mods if m.startswith("clustercert.commands.")}
    return g


def layer(module: str) -> str:
    if module in BASE or module.startswith("clustercert.remote"):
        return "base"
    if module in CLI:
        return "cli"
    return module.split(".")[1]


def test_every_module_has_a_layer(graph):
    unknown = {m for m in graph if m.startswith("clustercert.") and layer(m) not in LAYERS}
    assert not unknown, f"modules outside the layers of docs/architecture.md: {sorted(unknown)}"


def test_no_import_runs_against_the_flow(graph):
    bad = [
        f"{m} ({layer(m)}) imports {t} ({layer(t)})"
        for m, ts in sorted(graph.items())
        if m.startswith("clustercert") and not m.startswith("clustercert_lab")
        for t in sorted(ts)
        if t.startswith("clustercert.") and LAYERS.index(layer(t)) > LAYERS.index(layer(m))
    ]
    assert not bad, "\n".join(bad)


LAB = "clustercert_lab"
IMPORTING_CALLS = {"import_module", "__import__", "run_module"}  # importlib's, the builtin, runpy's


def _literal_prefix(node: ast.expr, constants: dict[str, str]) -> str | None:
    """The text a string argument starts with: a literal's whole text (or a module constant's, ``NAME =
    "..."`` at the top of the module), an f-string's leading literal part; None for anything else (another
    name, a call: it could hold any module's name)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    if isinstance(node, ast.JoinedStr):
        first = node.values[0] if node.values else None
        return first.value if isinstance(first, ast.Constant) else ""
    return None


def lab_imports(path: Path) -> list[str]:
    """Every way ``path`` could import the lab, as ``line: what``: an import statement of clustercert_lab or
    below it (at any depth, inside functions too), and a dynamic import (importlib.import_module, __import__,
    runpy.run_module) of a name that is not a literal product module (``clustercert.``...): a name held in a
    variable could be the lab's. importlib.util.find_spec of a top-level name only looks for it, and is
    allowed; of a dotted lab name it imports the package above it."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    constants = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            text = _literal_prefix(node.args[0], constants)
            if func in IMPORTING_CALLS and (text is None or not text.startswith("clustercert.")):
                found.append(f"{node.lineno}: {func}({ast.unparse(node.args[0])})")
            elif func == "find_spec" and (text is None or (text.startswith(LAB) and "." in text)):
                found.append(f"{node.lineno}: {func}({ast.unparse(node.args[0])})")
        found += [f"{node.lineno}: import {n}" for n in names if n == LAB or n.startswith(LAB + ".")]
    return found


def test_no_product_module_imports_the_lab(graph):
    """The lab is a product beside the tool: no module of clustercert imports clustercert_lab, in any way.
    `-i lab` reads the lab's published path convention (clustercert.paths), and `clustercert lab` runs the
    lab's own program in a process of its own (clustercert.commands.lab)."""
    product = {m: p for m, p in modules().items() if m == "clustercert" or m.startswith("clustercert.")}
    assert "clustercert.commands.lab" in product and "clustercert.commands.common" in product
    bad = [f"{m}: {how}" for m, p in sorted(product.items()) for how in lab_imports(p)]
    assert not bad, "\n".join(bad)
    assert not [f"{m} imports {t}" for m in product for t in graph[m] if t.split(".")[0] == LAB]


def test_the_lab_import_check_sees_every_form(tmp_path):
    f = tmp_path / "m.py"
    caught = [
        "import clustercert_lab",
        "import clustercert_lab.paths as p",
        "from clustercert_lab import manager",
        "from clustercert_lab.paths import inventory_path",
        "import os, clustercert_lab.manager",
        "def f():\n    from clustercert_lab import cli",
        "importlib.import_module('clustercert_lab.manager')",
        "import_module('clustercert_lab')",
        "importlib.import_module(f'clustercert_lab.{x}')",
        "importlib.import_module(name)",
        "__import__('clustercert_lab')",
        "runpy.run_module('clustercert_lab')",
        "importlib.util.find_spec('clustercert_lab.manager')",
        "importlib.util.find_spec(name)",
        "LAB = 'clustercert_lab'\nimportlib.import_module(LAB)",
        "LAB = 'clustercert_lab.cli'\nfind_spec(LAB)",
    ]
    for text in caught:
        f.write_text(text + "\n")
        assert lab_imports(f), text
    allowed = ["import clustercert.paths", "from clustercert import paths", "import clustercert_labs",
               "from . import clustercert_lab", "importlib.import_module(f'clustercert.commands.{name}')",
               "importlib.util.find_spec('clustercert_lab')", "LAB = 'clustercert_lab'\nfind_spec(LAB)",
               "subprocess.call([sys.executable, '-m', 'clustercert_lab', 'status'])"]
    for text in allowed:
        f.write_text(text + "\n")
        assert not lab_imports(f), text


def test_parsers_and_evaluators_do_no_io(graph):
    """parse and evaluate are pure: no parser, check or probe module but the two drivers imports collect."""
    pure = [
        m for m in graph if m.split(".")[1:2] in (["parsers"], ["checks"], ["probes"]) and m not in DRIVERS
    ]
    bad = [
        f"{m} imports {t}"
        for m in sorted(pure)
        for t in sorted(graph[m])
        if t.startswith("clustercert.collect")
    ]
    assert not bad, "\n".join(bad)
    assert all(
        t.startswith("clustercert.parsers")
        for m in pure
        if m.startswith("clustercert.parsers")
        for t in graph[m]
        if t.startswith("clustercert.")
    ), "a parser imports something besides parsers"


@pytest.mark.parametrize("package", ["clustercert", "clustercert_lab"])
def test_no_import_circle(graph, package):
    sub = {
        m: {t for t in ts if t.split(".")[0] == package}
        for m, ts in graph.items()
        if m.split(".")[0] == package
    }
    state: dict[str, int] = {}
    path: list[str] = []
    circles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for t in sorted(sub.get(m, ())):
            if state.get(t) == 1:
                circles.append(path[path.index(t):] + [t])
            elif t not in state:
                visit(t)
        path.pop()
        state[m] = 2

    for m in sorted(sub):
        if m not in state:
            visit(m)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_the_graph_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from a.b import c\n    import a.d\n")
    assert imports(f, "m", {"a", "a.b", "a.b.c", "a.d"}) == {"a", "a.b", "a.b.c", "a.d"}
