#!/usr/bin/env bash
# The test command (README and .ci/run): set up, lint, run the whole test suite -- the unit tests in
# parallel (pytest-xdist), then the lab tests one after another, and beside the lab tests (at the lowest CPU
# priority, in the time their simulated tools leave the CPUs idle) ansible-lint, the collection's checks and
# the unit tests marked beside_lab. Arguments go to every pytest run (`-x`, `-k EXPR`, a test path; not
# `-m`, which would replace each run's own); a run they leave with nothing to select counts as passed,
# unless all do.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== ruff"
.venv/bin/ruff check src clustercert-lab tests benchmarks scripts plugins
# `wip` marks lab acceptance tests of issues still open (see the README); everything else runs.
# Ctrl-C stops the script (pytest itself exits 2 on it, which would start the next run).
trap 'echo "test.sh: interrupted" >&2; exit 130' INT
# -n 2: as many workers as this machine's 2 cores (3 were faster only on an otherwise quiet machine and,
# under load, tripped the tests that time themselves: README, Two commands).
echo "== pytest: unit tests (parallel: -n 2), but those that run beside the lab tests"
unit=0
.venv/bin/pytest -q -p no:cacheprovider --durations=12 -m "not lab and not wip and not beside_lab" -n 2 "$@" || unit=$?
# Beside the lab tests, at the lowest CPU priority (nice 19): ansible-lint, the collection's build and
# sanity tests, and the unit tests marked beside_lab (tests/suites.py: they drive ansible-playbook, pip or
# Chromium and read no clock). It starts once the lab tests reach their modules that leave the CPUs idle
# about half the time (tests/suites.py BESIDE_LAB_FROM: the lab's pytest creates $go), or when the lab
# tests end; it takes that idle time instead of minutes before the lab tests. Its output comes after theirs.
beside_log=$(mktemp /tmp/clustercert-beside-lab.XXXXXX)
go=$(mktemp -u /tmp/clustercert-beside-go.XXXXXX)
(
  while [ ! -e "$go" ]; do kill -0 "$$" 2>/dev/null || exit 1; sleep 2; done  # not past this script's end
  renice -n 19 -p "$BASHPID" >/dev/null || true
  echo "== beside the lab tests, from $(date +%T)"
  rc=0
  echo "== ansible-lint (production profile)"
  .venv/bin/ansible-lint --profile production -q roles playbooks || rc=1
  echo "== the collection: ansible-galaxy build, every ansible-test sanity test"
  bash scripts/collection_check.sh || rc=1
  echo "== pytest: the unit tests beside the lab tests (serial)"
  p=0
  .venv/bin/pytest -q -p no:cacheprovider --durations=12 -m "beside_lab and not lab and not wip" "$@" || p=$?
  echo "pytest_status=$p"
  exit "$rc"
) >"$beside_log" 2>&1 &
beside_pid=$!
trap 'kill -- "$beside_pid" 2>/dev/null; echo "test.sh: interrupted" >&2; exit 130' INT
# The lab tests need root (namespaces, bridges, systemd-nspawn) and run serially: one lab per machine,
# the modules in tests/conftest.py's LAB_MODULE_ORDER. They run even when a unit test failed: CI reports both.
echo "== pytest: lab tests (serial; beside them: linters, collection, unit tests marked beside_lab), from $(date +%T)"
lab=0
CLUSTERCERT_BESIDE_LAB_GO="$go" .venv/bin/pytest -q -p no:cacheprovider --durations=12 -m "lab and not wip" "$@" \
  || lab=$?
touch "$go"  # the lab tests have ended: the work beside them starts now if it has not yet
lint=0
wait "$beside_pid" || lint=$?
cat "$beside_log"
beside=$(sed -n 's/^pytest_status=//p' "$beside_log" | tail -1)
rm -f "$beside_log" "$go"
echo "== exit status: unit tests $unit, lab tests $lab, unit tests beside the lab ${beside:-none}," \
     "linters and collection $lint"
[ "$lint" -eq 0 ] || exit 1
beside=${beside:-1}
if [ "$unit" -eq 5 ] && [ "$lab" -eq 5 ] && [ "$beside" -eq 5 ]; then  # 5: no test selected
  exit 5
fi
for rc in "$unit" "$lab" "$beside"; do
  [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ] || exit "$rc"
done
