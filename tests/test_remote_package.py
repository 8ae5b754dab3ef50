"""clustercert.remote: the programs clustercert runs outside its own process are real modules of the package,
their text is what is sent or written out, and the two that run on a node stay within Python 3.6."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from clustercert import remote

SRC = Path(__file__).resolve().parent.parent / "src" / "clustercert"
# run by the node's python3 (3.6 or later)
NODE_PROGRAMS = ("runner", "bond_failover", "ddp_smoke", "slurm_agent")


@pytest.mark.parametrize("name", remote.PROGRAMS)
def test_each_program_is_an_importable_module_whose_text_is_its_source(name):
    module = importlib.import_module(f"clustercert.remote.{name}")
    assert callable(module.main)
    text = remote.source(name)
    assert text == Path(module.__file__).read_text(encoding="utf-8")
    assert '\nif __name__ == "__main__":\n' in text  # run as python3 -c TEXT, it runs main()


def test_an_unknown_program_is_refused():
    with pytest.raises(ValueError):
        remote.source("../engine")


@pytest.mark.parametrize("name", NODE_PROGRAMS)
def test_a_node_program_compiles_for_python_3_6(name):
    """No syntax newer than 3.6 (walrus, positional-only parameters, f"{x=}", ...), no ``from __future__``
    import (annotations is 3.7) and no annotations at all (list[str] fails at run time before 3.9); nor the
    subprocess keywords 3.7 brought (capture_output, text)."""
    text = remote.source(name)
    tree = ast.parse(text, feature_version=(3, 6))
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.AnnAssign)]
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.Lambda)):
        args = fn.args
        assert not args.posonlyargs
        if isinstance(fn, ast.FunctionDef):
            assert fn.returns is None and all(a.annotation is None for a in args.args + args.kwonlyargs), (
                fn.name
            )
    keywords = {k.arg for n in ast.walk(tree) if isinstance(n, ast.Call) for k in n.keywords}
    assert not keywords & {"capture_output", "text"}


@pytest.mark.parametrize("path", ["collect/ssh.py", "checks/bond_failover.py", "collect/engine.py"])
def test_no_program_source_is_left_in_a_string_constant(path):
    """No string constant of the module but a docstring has a line that imports or defines a function (a
    template for str.format need not parse: the old tether did not)."""
    tree = ast.parse((SRC / path).read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    code_line = re.compile(r"^\s*(import \w|from [\w.]+ import |def \w+\()", re.M)
    programs = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                and id(n) not in docstrings and code_line.search(n.value)]
    assert programs == [], f"{path}: string constants that hold a program, at lines {programs}"
