#!/usr/bin/env bash
# Set up a development/CI environment on a fresh Debian 12 machine (run as root from the repo).
# Installs the Debian packages clustercert and its lab need, then a virtualenv with clustercert and its lab.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in python3 python3-venv python3-pip git ca-certificates openssh-client iproute2 iptables \
           debootstrap systemd-container iperf3 fio gnupg dpkg-dev curl \
           chromium fonts-dejavu-core prometheus; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ] && [ "$(id -u)" = 0 ]; then
  echo "setup: installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # prometheus is here for promtool (the tests check every --prom exposition with `promtool check metrics`);
  # its package enables and starts a server on :9090, which nothing here wants
  case " ${need[*]} " in
    *" prometheus "*) if command -v systemctl >/dev/null; then
                        systemctl disable --now prometheus.service >/dev/null 2>&1 || true
                      fi ;;
  esac
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
# the product, then the simulated lab, a distribution of its own (clustercert-lab/pyproject.toml) that the demo and the tests use
.venv/bin/python -m pip install -q -e '.[test]'
.venv/bin/python -m pip install -q --no-deps -e ./clustercert-lab
echo "setup: $(.venv/bin/clustercert version | head -2 | tr '\n' ' ')"
