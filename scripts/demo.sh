#!/usr/bin/env bash
# The demo: a simulated 4-node GPU/InfiniBand cluster on this machine, provisioned, validated and
# certified by clustercert, then broken on purpose to show what a failing certificate looks like.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cc=.venv/bin/clustercert
$cc version | tail -1   # where the store, runs and signing key live (CLUSTERCERT_HOME overrides it)
$cc key show >/dev/null 2>&1 || $cc key init   # the signing key, made once; certify never makes one
$cc lab up --nodes 4
$cc inventory -i lab
$cc bootstrap -i lab
$cc validate -i lab
$cc certify -i lab --out demo-cert/healthy --probe-seconds 2
$cc verify demo-cert/healthy/certificate.json --key demo-cert/healthy/signing.pub
echo "== now break two nodes: a missing GPU on node02, a slow fabric-0 link on node04"
$cc lab fault node02 gpu_missing gpu=3
$cc lab fault node04 link_slow fabric=0 factor=0.3
$cc certify -i lab --out demo-cert/broken --probe-seconds 2 || echo "(not certified, as expected: exit $?)"
$cc lab heal node02
$cc lab heal node04
echo "demo: reports in demo-cert/*/report.html; the lab is still running — stop it with: $cc lab down"
