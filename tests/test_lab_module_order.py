"""Every lab module has its place in tests/conftest.py's LAB_MODULE_ORDER: one left out runs last, after the
modules that grow the lab to 8 nodes and reboot half of it into another driver, and pays for a bootstrap of its
own (the --backend slurm module did: 58 s of CI)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import LAB_MODULE_ORDER

TESTS = Path(__file__).resolve().parent


def test_every_lab_module_is_ordered():
    lab_modules = {str(f.relative_to(TESTS.parent)) for f in TESTS.rglob("test_*.py")
                   if re.search(r"pytest\.mark\.lab\b", f.read_text())}
    assert lab_modules == set(LAB_MODULE_ORDER), (sorted(lab_modules - set(LAB_MODULE_ORDER)),
                                                  sorted(set(LAB_MODULE_ORDER) - lab_modules))
