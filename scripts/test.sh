#!/usr/bin/env bash
# The test command (README and .ci/run): set up, lint, run the whole test suite -- the unit tests in
# parallel (pytest-xdist), then the lab tests one after another. Arguments go to both pytest runs
# (`-x`, `-k EXPR`, a test path; not `-m`, which would replace each run's own); a run they leave with
# nothing to select counts as passed, unless both do.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== ruff"
.venv/bin/ruff check src clustercert-lab tests benchmarks scripts plugins
echo "== ansible-lint (production profile)"
.venv/bin/ansible-lint --profile production -q roles playbooks
echo "== the collection: ansible-galaxy build, every ansible-test sanity test" && bash scripts/collection_check.sh
# `wip` marks lab acceptance tests of issues still open (see the README); everything else runs.
# Ctrl-C stops the script (pytest itself exits 2 on it, which would start the next run).
trap 'echo "test.sh: interrupted" >&2; exit 130' INT
# -n 2: as many workers as this machine's 2 cores (3 were faster only on an otherwise quiet machine and,
# under load, tripped the tests that time themselves: README, Two commands).
echo "== pytest: unit tests (parallel: -n 2)"
unit=0
.venv/bin/pytest -q -p no:cacheprovider --durations=12 -m "not lab and not wip" -n 2 "$@" || unit=$?
# The lab tests need root (namespaces, bridges, systemd-nspawn) and run serially: one lab per machine,
# the modules in tests/conftest.py's LAB_MODULE_ORDER. They run even when a unit test failed: CI reports both.
echo "== pytest: lab tests (serial)"
lab=0
.venv/bin/pytest -q -p no:cacheprovider --durations=12 -m "lab and not wip" "$@" || lab=$?
echo "== pytest exit status: unit tests $unit, lab tests $lab"
if [ "$unit" -eq 5 ] && [ "$lab" -eq 5 ]; then  # 5: no test selected
  exit 5
fi
for rc in "$unit" "$lab"; do
  [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ] || exit "$rc"
done
