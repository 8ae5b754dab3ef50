#!/usr/bin/env bash
# Validator speed on the lab: `clustercert validate` (one connection per node, every command in one
# round trip) against a plain `pytest validators/ --hosts=...` (testinfra, one ssh per command) and
# the same pytest run with ControlMaster/ControlPersist (the best a testinfra user can do).
# Measured as ratios in one run. Usage: sudo benchmarks/validate.sh [NODES...]   (default: 4 8 16)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
if [ "${CC_LOCKED:-}" != 1 ]; then
  exec env CC_LOCKED=1 flock -w 3600 /tmp/clustercert-lab.lock "$0" "$@"
fi
PY="$REPO/.venv/bin/python"
LAB="${CLUSTERCERT_LAB_DIR:-/var/lib/clustercert/lab}"
export CLUSTERCERT_HOME="$(mktemp -d)"
# shellcheck source=benchmarks/common.sh
source "$REPO/benchmarks/common.sh"
declare -A T C N
sizes=("${@:-4 8 16}")
# shellcheck disable=SC2206
sizes=(${sizes[*]})
cc lab down >/dev/null
for n in "${sizes[@]}"; do
  cc lab up --nodes "$n" >/dev/null
  inv="$(cc lab inventory)"
  cc validate -i lab --format json >/dev/null || true  # warm-up: ssh host keys, python caches
  c0=$(ctl_cpu); n0=$(node_cpu); t0=$(now)
  cc validate -i lab --format json >/dev/null || true
  t1=$(now); n1=$(node_cpu); c1=$(ctl_cpu)
  T[cc_$n]=$(secs "$t0" "$t1"); C[cc_$n]=$(secs "$c0" "$c1"); N[cc_$n]=$(secs "$n0" "$n1")
  if [ "$n" = 8 ]; then
    hosts=$(seq -f 'ssh://node%02g' 1 "$n" | paste -sd, -)
    plain="$CLUSTERCERT_HOME/ssh_plain"; cm="$CLUSTERCERT_HOME/ssh_cm"
    sed -e 's/^  ControlMaster .*/  ControlMaster no/' -e '/^  ControlPath /d' -e '/^  ControlPersist /d' "$LAB/ssh/config" > "$plain"
    sed -e "s#^  ControlPath .*#  ControlPath $CLUSTERCERT_HOME/cm-%C#" "$LAB/ssh/config" > "$cm"
    for variant in plain cm; do
      cfg=$plain; [ "$variant" = cm ] && cfg=$cm
      t0=$(now)
      "$PY" -m pytest -q -p no:cacheprovider validators/ --hosts="$hosts" --ssh-config="$cfg" \
        --ansible-inventory="$inv" >/dev/null 2>&1 || true
      t1=$(now)
      T[pytest_${variant}_$n]=$(secs "$t0" "$t1")
    done
  fi
done
cc lab down >/dev/null
echo "clustercert validate wall time (s):"
for n in "${sizes[@]}"; do
  echo "  $n nodes: ${T[cc_$n]} s wall; CPU: controller ${C[cc_$n]} s, all nodes ${N[cc_$n]} s (host has $(nproc) cores)"
done
if [ -n "${T[pytest_plain_8]:-}" ]; then
  echo "8 nodes, pytest validators/ plain ssh: ${T[pytest_plain_8]} s; with ControlMaster: ${T[pytest_cm_8]} s"
  awk -v p="${T[pytest_plain_8]}" -v c="${T[pytest_cm_8]}" -v x="${T[cc_8]}" \
    'BEGIN{printf "ratio plain/clustercert: %.1fx (goal >= 10x); ControlMaster/clustercert: %.1fx (goal >= 2x)\n", p/x, c/x}'
fi
if [ -n "${T[cc_16]:-}" ] && [ -n "${T[cc_4]:-}" ]; then
  awk -v a="${T[cc_16]}" -v b="${T[cc_4]}" 'BEGIN{printf "16-node / 4-node wall time: %.2f (goal <= 1.5)\n", a/b}'
  awk -v a="${C[cc_16]}" -v b="${C[cc_4]}" 'BEGIN{printf "16-node / 4-node controller CPU: %.2f\n", a/b}'
fi
