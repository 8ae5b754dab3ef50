"""Write the lab proofs `clustercert checks` shows, from the lab tests' own metadata (nothing runs, no
pytest):

- a lab test marked ``@pytest.mark.proves(ID, ..., fault=KIND, params={...}, status="fail")`` shows each ID
  come out ``status`` (fail, error, unreachable, or a drift item's kind) on the node the lab fault KIND (with
  those parameters) is injected on;
- the two fault matrices of tests/validators/test_validate_lab.py, from the lists they are parametrised over:
  the validators' (VALIDATOR_FAULTS: each kind fails the check the lab's fault table, clustercert_lab.faults
  FAULTS, names for it, and the checks ALSO_FAILS lists besides) and the probes' (PROBE_FAULTS: each kind,
  with its parameters, fails the probe ids listed).

The result is clustercert-lab/src/clustercert_lab/proofs/lab.json, shipped by the lab's distribution, which
declares it to the product through the entry point group ``clustercert.proofs`` (the product never imports the
lab). tests/test_catalogue.py fails when the file is stale against the tests: run ``.venv/bin/python
scripts/lab_proofs.py`` (``--check``: exit 1 when it is stale, writing nothing).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "clustercert-lab" / "src" / "clustercert_lab" / "proofs" / "lab.json"
SCHEMA = "clustercert.lab-proofs/v1"
MATRIX_FILE = "tests/validators/test_validate_lab.py"
VALIDATE_LAB = f"{MATRIX_FILE}::test_fault_is_caught_on_its_node_only"
PROBE_LAB = f"{MATRIX_FILE}::test_probe_fault_is_caught_on_its_node_only"
MARKER = "proves"


class MetadataError(ValueError):
    """A marker or a matrix list that cannot be read as data."""


def _constants(tree: ast.Module) -> dict[str, ast.expr]:
    """The module-level ``NAME = expression`` assignments of a test file (the last one wins)."""
    out: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.value
    return out


def _value(node: ast.expr, consts: dict[str, ast.expr], where: str):
    """A marker argument as data: a literal, or the name of a module-level literal constant (``_SLOW0``)."""
    if isinstance(node, ast.Name) and node.id in consts:
        node = consts[node.id]
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise MetadataError(f"{where}: {ast.unparse(node)} is not a literal") from None


def _is_proves(dec: ast.expr) -> bool:
    """``@pytest.mark.proves(...)``."""
    return (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute) and dec.func.attr == MARKER
            and isinstance(dec.func.value, ast.Attribute) and dec.func.value.attr == "mark")


def marked(path: Path) -> list[tuple[str, dict]]:
    """(id, proof) for every ``proves`` marker in the test file ``path``."""
    rel = path.relative_to(REPO).as_posix()
    tree = ast.parse(path.read_text(), rel)
    consts = _constants(tree)
    out = []
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for dec in fn.decorator_list:
            if not _is_proves(dec):
                continue
            where = f"{rel}:{dec.lineno}"
            ids = [_value(a, consts, where) for a in dec.args]
            kw = {k.arg: _value(k.value, consts, where) for k in dec.keywords}
            unknown = set(kw) - {"fault", "params", "status"}
            if not ids or not all(isinstance(i, str) for i in ids) or "fault" not in kw or unknown:
                raise MetadataError(f"{where}: proves(ID, ..., fault=KIND[, params={{...}}][, status=...]) "
                                    f"expected{f', not {sorted(unknown)}' if unknown else ''}")
            proof = {
                "fault": kw["fault"],
                "params": dict(kw.get("params") or {}),
                "status": kw.get("status", "fail"),
                "test": f"{rel}::{fn.name}",
            }
            out += [(i, proof) for i in ids]
    return out


def matrices(faults: dict[str, str]) -> list[tuple[str, dict]]:
    """(id, proof) for every case of the two fault matrices, from the lists they are parametrised over;
    ``faults``: the lab's fault table as {kind: the check it names}."""
    tree = ast.parse((REPO / MATRIX_FILE).read_text(), MATRIX_FILE)
    consts = _constants(tree)
    lit = {name: _value(consts[name], consts, f"{MATRIX_FILE}: {name}")
           for name in ("PROBE_OWNED", "DRIFT_OWNED", "ALSO_FAILS", "PROBE_FAULTS")}
    # VALIDATOR_FAULTS is an expression over FAULTS and the literal sets above: evaluated over them alone
    expr = ast.Expression(consts["VALIDATOR_FAULTS"])
    validator_faults = eval(
        compile(expr, MATRIX_FILE, "eval"),  # noqa: S307 -- the repository's own test data
        {"__builtins__": {"sorted": sorted, "set": set, "len": len}, "FAULTS": faults, **lit},
    )
    out = []
    for kind in validator_faults:
        for check in (faults[kind], *lit["ALSO_FAILS"].get(kind, {})):
            out.append((check, {"fault": kind, "params": {}, "status": "fail", "test": VALIDATE_LAB}))
    for kind, (params, _probes, ids) in sorted(lit["PROBE_FAULTS"].items()):
        out += [
            (i, {"fault": kind, "params": dict(params), "status": "fail", "test": PROBE_LAB}) for i in ids
        ]
    return out


def lab_fault_checks() -> dict[str, str]:
    from clustercert_lab.faults import FAULTS

    return {kind: fk.check for kind, fk in FAULTS.items()}


def generate(faults: dict[str, str] | None = None) -> dict:
    """The proofs document: {"schema", "generated_by", "proofs": {id: [proof, ...]}}, ids and proofs
    sorted."""
    pairs = matrices(lab_fault_checks() if faults is None else faults)
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        if f"mark.{MARKER}(" in path.read_text():
            pairs += marked(path)
    proofs: dict[str, list[dict]] = {}
    for ident, proof in pairs:
        if proof not in proofs.setdefault(ident, []):
            proofs[ident].append(proof)
    key = lambda p: (p["test"], p["fault"], p["status"], json.dumps(p["params"], sort_keys=True))  # noqa: E731
    return {
        "schema": SCHEMA,
        "generated_by": "scripts/lab_proofs.py, from the lab tests' metadata (pytest.mark.proves, the fault "
                        "matrices)",
        "proofs": {i: sorted(ps, key=key) for i, ps in sorted(proofs.items())},
    }


def text(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    try:
        want = text(generate())
    except MetadataError as exc:
        print(f"lab_proofs: {exc}", file=sys.stderr)
        return 2
    have = OUT.read_text() if OUT.is_file() else ""
    if "--check" in argv:
        if have != want:
            print(f"lab_proofs: {OUT.relative_to(REPO)} is stale: run scripts/lab_proofs.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(want)
    print(f"{OUT.relative_to(REPO)}: {'unchanged' if have == want else 'written'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
