#!/bin/bash
# Developer script: a one-shot capture on a GPU machine (the one of 2026-12-05: a lent H200 VM) of real
# tool output for tests/fixtures/ (tests/fixtures/SOURCES.md, "Captured for this project ...") and a
# node-check run against it. Build the zipapp first on the controller:
#   clustercert node-check --build-zipapp devcap/clustercert-node.pyz
# then run this from the repository root on the GPU machine; OUT=DIR collects one file per command
# (NAME, NAME.err, NAME.rc). Not part of the product or of CI.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
t() { local name=$1; shift; timeout 60 "$@" > "$O/$name" 2> "$O/$name.err"; echo "rc=$?" > "$O/$name.rc"; }
t uname uname -a
t os-release cat /etc/os-release
t python-version python3 --version
t nvsmi-version nvidia-smi --version
t nvsmi-q-x nvidia-smi -q -x
t nvsmi-q nvidia-smi -q
t nvsmi-table nvidia-smi
t nvsmi-L nvidia-smi -L
t nvsmi-topo-m nvidia-smi topo -m
t nvsmi-topo-p2p-n nvidia-smi topo -p2p n
t nvsmi-nvlink-s nvidia-smi nvlink -s
t nvsmi-nvlink-e nvidia-smi nvlink -e
t nvsmi-nvlink-c nvidia-smi nvlink -c
t nvsmi-q-d-page nvidia-smi -q -d PAGE_RETIREMENT,ROW_REMAPPER
t nvsmi-query-gpu-csv nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,vbios_version,memory.total,ecc.mode.current,ecc.errors.uncorrected.volatile.total,retired_pages.pending,remapped_rows.pending,remapped_rows.failure,clocks_throttle_reasons.active,power.limit,temperature.gpu,persistence_mode,mig.mode.current --format=csv
# the GPU-utilisation sampler as the probes run it (with `-c 5` added, nvidia-smi 580 refused the
# whole command, exit 255: "Option --query-gpu=... is not recognized"; SIGINT after 2 s stops it instead)
t nvsmi-util-csv timeout -s INT 2 nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader,nounits -lms 200
t nvsmi-retired-csv nvidia-smi --query-retired-pages=gpu_uuid,retired_pages.address,retired_pages.cause --format=csv
t nvsmi-remapped-csv nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure --format=csv
t lsmod lsmod
t lspci-nvidia lspci -nn -d 10de:
t lspci-mellanox lspci -nn -d 15b3:
t ibstat ibstat
t ibv_devinfo ibv_devinfo
t ibdev2netdev ibdev2netdev
t dcgmi-discovery dcgmi discovery -l
t nvidia-ctk nvidia-ctk --version
t which sh -c 'for x in nvbandwidth dcgmi ib_write_bw all_reduce_perf nvidia-ctk torchrun fio; do printf "%s: %s\n" $x "$(command -v $x)"; done; python3 -c "import torch,sys; print(torch.__version__, torch.cuda.is_available(), torch.cuda.nccl.version())"'
t nvbandwidth sh -c 'command -v nvbandwidth >/dev/null && nvbandwidth -t device_local_copy host_to_device_memcpy_ce device_to_host_memcpy_ce'
t dmesg-nvrm sh -c 'dmesg 2>/dev/null | grep -E "NVRM|Xid" | tail -40'
t proc-driver cat /proc/driver/nvidia/version
t gpu-info sh -c 'cat /proc/driver/nvidia/gpus/*/information'
t persistenced systemctl is-active nvidia-persistenced nvidia-fabricmanager
# node-check (the zipapp) against this machine, with the H100 profile
t nodecheck-text python3 devcap/clustercert-node.pyz --profile h100-sxm-8x-ndr
t nodecheck-json python3 devcap/clustercert-node.pyz --profile h100-sxm-8x-ndr --format json
t nodecheck-gpu-json python3 devcap/clustercert-node.pyz --profile h100-sxm-8x-ndr --checks gpu,driver,hardware --format json
# the DDP smoke script with the nccl backend on this one GPU, if torch is here
t ddp-nccl sh -c 'python3 -c "import torch" 2>/dev/null && NCCL_DEBUG=INFO torchrun --standalone --nnodes=1 --nproc_per_node=1 src/clustercert/remote/ddp_smoke.py --backend nccl --nnodes 1 --ranks-per-node 1 --gpus 1 --steps 5'
ls -la "$O" | head -100
