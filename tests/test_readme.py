"""The README is for newcomers: short, no development history, every link resolves, and the commands it
gives are the ones the scripts run."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def test_readme_is_short():
    assert len(README.splitlines()) <= 200


def test_readme_holds_no_history():
    # commit hashes, issue numbers, session dates and CI timings belong in git and docs/benchmarks.md
    assert not re.search(r"\b[0-9a-f]{7,40}\b", README)
    assert not re.search(r"\bissues? #?\d+", README, flags=re.I)
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", README)
    assert not re.search(r"\b\d+:\d\d\b", README), "CI timings go to docs/benchmarks.md"


def test_readme_links_resolve():
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert links
    for link in links:
        assert (REPO / link).exists(), link


def test_readme_commands_are_the_scripts():
    assert "bash scripts/demo.sh" in README and "bash scripts/test.sh" in README
    assert "scripts/test.sh" in (REPO / ".ci" / "run").read_text()
    assert '-m "not lab"' in README
