"""Every lab module has its place in tests/conftest.py's LAB_MODULE_ORDER: one left out runs last, after the
modules that grow the lab to 6 nodes and reboot half of it into another driver, and pays for a bootstrap of
its own (the --backend slurm module did: 58 s of CI)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# read, not imported: "conftest" names several modules here (tests/, tests/provisioning/, tests/certify/)
LAB_MODULE_ORDER = next(
    ast.literal_eval(node.value)
    for node in ast.parse((TESTS / "conftest.py").read_text()).body
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "LAB_MODULE_ORDER"
)


def test_every_lab_module_is_ordered():
    lab_modules = {str(f.relative_to(TESTS.parent)) for f in TESTS.rglob("test_*.py")
                   if re.search(r"pytest\.mark\.lab\b", f.read_text())}
    assert lab_modules == set(LAB_MODULE_ORDER), (sorted(lab_modules - set(LAB_MODULE_ORDER)),
                                                  sorted(set(LAB_MODULE_ORDER) - lab_modules))
