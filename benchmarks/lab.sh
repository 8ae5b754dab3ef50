#!/usr/bin/env bash
# Lab budget figures on this machine:
#   1. first image build (debootstrap into an empty, throw-away cache)   budget <= 300 s
#   2. `lab up --nodes 8` from the cache until every node answers SSH   budget <= 20 s
#   3. memory per idle node (MemAvailable drop / nodes, and per-node cgroup charge) budget <= 32 MB
#   4. 16 nodes up (from scratch) and answering Ansible ping
#   5. `lab down` (16 nodes)                                            budget <= 10 s
# Usage: sudo benchmarks/lab.sh [--skip-build]     (takes /tmp/clustercert-lab.lock; downs any lab first)
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
[ -x "$PY" ] || PY=python3
ANSIBLE="$(dirname "$PY")/ansible"
[ -x "$ANSIBLE" ] || ANSIBLE=ansible
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
LAB="${CLUSTERCERT_LAB_DIR:-/var/lib/clustercert/lab}"

if [ "${1:-}" != "--locked" ] && [ "${2:-}" != "--locked" ]; then
  exec flock -w 1800 /tmp/clustercert-lab.lock "$0" "$@" --locked
fi
SKIP_BUILD=0
[ "${1:-}" = "--skip-build" ] && SKIP_BUILD=1
[ "$(id -u)" = 0 ] || { echo "lab.sh: must run as root" >&2; exit 2; }

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
mem_avail_kb() { awk '/^MemAvailable:/{print $2}' /proc/meminfo; }
cc() { "$PY" -m clustercert "$@"; }
ssh_all() {  # every node of the running lab answers a real SSH command (fresh connections)
  local n fail=0
  for n in $("$PY" -c 'from clustercert_lab import manager; print(" ".join(manager.status()["nodes"]))'); do
    ssh -F "$LAB/ssh/config" -o ControlMaster=no -o ControlPath=none "$n" true || fail=1
  done
  return $fail
}

declare -A R
cc lab down >/dev/null

# 1. first image build into a throw-away cache
if [ "$SKIP_BUILD" = 0 ]; then
  TMPCACHE="$(mktemp -d /var/tmp/cc-lab-bench-cache.XXXXXX)"
  t=$(now)
  CLUSTERCERT_LAB_CACHE="$TMPCACHE" "$PY" - <<'EOF'
import logging
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from clustercert_lab import image, manager
done = image.ensure_image("lab", manager._profile("lab"))
assert done["base_built"], done
EOF
  R[build]=$(since "$t")
  rm -rf "$TMPCACHE"
else
  R[build]="skipped"
fi

# make sure the real cache is current (not timed: that is the first-build figure above)
cc lab up --nodes 1 >/dev/null && cc lab down >/dev/null
sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null || true
sleep 1

# 2. up --nodes 8 from cache until every node answers SSH
m0=$(mem_avail_kb)
t=$(now)
cc lab up --nodes 8 >/dev/null
R[up8]=$(since "$t")
ssh_all
R[up8_ssh]=$(since "$t")

# 3. memory per idle node
sleep 15
m1=$(mem_avail_kb)
R[mem_avail]=$(awk -v a="$m0" -v b="$m1" 'BEGIN{printf "%.1f", (a-b)/1024/8}')
R[mem_cgroup]=$("$PY" -c '
from clustercert_lab import manager, node
v = [node.cgroup_memory_bytes(n) or 0 for n in manager.status()["nodes"]]
print(f"{sum(v)/len(v)/2**20:.1f} (max {max(v)/2**20:.1f})")')
R[mem_pss]=$("$PY" -c '
from pathlib import Path
from clustercert_lab import manager, node
tot = []
for n in manager.status()["nodes"]:
    kb = 0
    for pid in node.cgroup_pids(n):
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    kb += int(line.split()[1])
        except OSError:
            pass
    tot.append(kb)
print(f"{sum(tot)/len(tot)/1024:.1f}")')
cc lab down >/dev/null

# 4. 16 nodes from scratch, Ansible ping with host-key checking on
t=$(now)
cc lab up --nodes 16 >/dev/null
R[up16]=$(since "$t")
ANSIBLE_HOST_KEY_CHECKING=True "$ANSIBLE" all -i "$LAB/inventory/hosts.yml" -m ping -o -f 16 >/tmp/cc-lab-bench-ping.txt 2>&1 || true
R[ping16_ok]=$(grep -c '| SUCCESS' /tmp/cc-lab-bench-ping.txt || true)
R[running16]=$("$PY" -c 'from clustercert_lab import manager; print(sum(n["state"] == "running" for n in manager.status()["nodes"].values()))')

# 5. down
t=$(now)
cc lab down >/dev/null
R[down16]=$(since "$t")

cat <<EOF
clustercert lab benchmark ($(nproc) cores, $(awk '/MemTotal/{printf "%.0f GB", $2/1048576}' /proc/meminfo), $(uname -r))
  first image build (debootstrap, empty cache) : ${R[build]} s      (budget 300 s)
  up --nodes 8 from cache, all answer SSH       : ${R[up8]} s       (budget 20 s; + a real ssh to each: ${R[up8_ssh]} s)
  memory per idle node, MemAvailable drop       : ${R[mem_avail]} MB   (budget 32 MB; incl. supervisor and nspawn)
  memory per idle node, cgroup charge           : ${R[mem_cgroup]} MB
  memory per idle node, PSS of its processes    : ${R[mem_pss]} MB
  up --nodes 16 from cache                      : ${R[up16]} s; running ${R[running16]}/16, ansible ping ok ${R[ping16_ok]}/16
  down (16 nodes)                               : ${R[down16]} s      (budget 10 s)
EOF
