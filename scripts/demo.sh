#!/usr/bin/env bash
# The demo: a simulated 4-node GPU/InfiniBand cluster on this machine, and clustercert pointed at it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cc=.venv/bin/clustercert
$cc lab up --nodes 4
$cc inventory -i lab
.venv/bin/ansible all -i "$($cc lab inventory)" -m ping -o
$cc lab fault node02 gpu_missing gpu=3
$cc lab status
echo "demo: the lab is still running; stop it with: $cc lab down"
