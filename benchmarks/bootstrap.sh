#!/usr/bin/env bash
# Benchmark: an idempotent re-run of playbooks/bootstrap.yml on 8 lab nodes, Ansible's defaults vs
# clustercert's fast path (ansible.cfg: pipelining + ControlPersist + cached facts, and the mitogen
# strategy when the mitogen package is installed). Run as root from the repository:
#   flock /tmp/clustercert-lab.lock bash benchmarks/bootstrap.sh [RUNS]
# Prints one line per run and the ratio; the README (docs/provisioning.md) records the result.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
PY=.venv/bin/python
export CLUSTERCERT_HOME=${CLUSTERCERT_HOME:-/tmp/clustercert-bench-state}
$PY -m clustercert lab up --nodes 8 >/dev/null
INV=$($PY -c 'from clustercert_lab import manager; print(manager.inventory_path())')
KEYFILE_ARGS=()
if [ -n "${BENCH_EXTRA_VARS:-}" ]; then KEYFILE_ARGS=(-e "$BENCH_EXTRA_VARS"); fi

echo "bootstrap (first run, not timed against the baseline)"
$PY -m clustercert bootstrap -i "$INV" "${KEYFILE_ARGS[@]}" --format json > /tmp/bench-first.json || {
  echo "first bootstrap failed"; exit 1; }

defaults_run() {
  # Ansible's defaults: no ansible.cfg tuning (no pipelining, implicit fact gathering in every play,
  # no fact cache), linear strategy. Same playbook, inventory and roles.
  local cfg; cfg=$(mktemp --suffix=.cfg); printf '[defaults]\nhost_key_checking = True\n' > "$cfg"
  ANSIBLE_CONFIG=$cfg ANSIBLE_ROLES_PATH=roles ANSIBLE_STRATEGY=linear \
    .venv/bin/ansible-playbook -i "$INV" playbooks/bootstrap.yml "${KEYFILE_ARGS[@]}" >/tmp/bench-defaults.log 2>&1
  rm -f "$cfg"
}
fast_run() {
  $PY -m clustercert bootstrap -i "$INV" "${KEYFILE_ARGS[@]}" --format json > /tmp/bench-fast.json
}
timeit() { local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }

declare -a D F
for i in $(seq "$RUNS"); do
  d=$(timeit defaults_run); f=$(timeit fast_run)
  D+=("$d"); F+=("$f")
  printf 'run %d: ansible defaults %.1f s, clustercert %.1f s\n' "$i" "$d" "$f"
done
python3 - "${D[*]}" "${F[*]}" <<'PY'
import statistics, sys
d = [float(x) for x in sys.argv[1].split()]; f = [float(x) for x in sys.argv[2].split()]
print(f"median: ansible defaults {statistics.median(d):.1f} s, clustercert {statistics.median(f):.1f} s, "
      f"ratio {statistics.median(d) / statistics.median(f):.2f}x")
PY
python3 -c "import json; d=json.load(open('/tmp/bench-fast.json')); print('changed per host:', {h: s['changed'] for h, s in d['hosts'].items()})"
