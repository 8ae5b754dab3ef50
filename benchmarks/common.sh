# Helpers shared by the lab benchmarks (sourced; needs PY set).
cc() { "$PY" -m clustercert "$@"; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }
# CPU charged to all lab nodes together (cgroup v1 cpuacct, or cgroup2 cpu.stat), in seconds
node_cpu() {
  local f=/sys/fs/cgroup/cpuacct/clustercert-lab/cpuacct.usage
  if [ -r "$f" ]; then awk '{printf "%.3f", $1/1e9}' "$f"
  else awk '/^usage_usec/{printf "%.3f", $2/1e6}' /sys/fs/cgroup/clustercert-lab/cpu.stat 2>/dev/null || echo 0; fi
}
# CPU of this script's finished children (the controller: clustercert and its ssh clients), in seconds
ctl_cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f", ($16+$17)/hz}' /proc/$$/stat; }
