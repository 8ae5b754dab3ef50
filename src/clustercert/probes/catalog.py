"""The probes by name: which profile thresholds each is judged against, and the channels that
localisation reasons over. The one place these names are known (certify, probe, drift and the
reports read them from here).

A *channel* is one probe kind on one fabric, ``(probe, fabric)``: a node pair passes or fails each
channel separately, so a node whose fabric-1 link is slow and another whose NVLink is down leave
different signatures and never confuse each other. NCCL across a pair uses every rail and the GPUs:
it is an *aggregate* channel (fabric None), explained by a fault on any of its parts.
"""

from __future__ import annotations

# `--probes` names -> the profile thresholds they are judged against
PROBE_NAMES: dict[str, tuple[str, ...]] = {
    "ib_write_bw": ("ib_write_bw_loopback", "ib_write_bw_pair"),
    "ib_write_lat": ("ib_write_lat_p99",),
    "iperf3": ("iperf3_ipoib",),
    "nccl": ("nccl_allreduce_1node", "gpu_util_under_load", "nccl_allreduce_pair", "nccl_allreduce_cluster"),
    "nvbandwidth": ("nvbandwidth_h2d", "nvbandwidth_d2h", "nvbandwidth_d2d"),
    "dcgmi": (),  # dcgmi diag runs at the profile's dcgm_diag level
    # issue 22: what a training job needs besides bandwidth on host memory
    # GPUDirect RDMA per GPU-NIC pair (gpudirect)
    "gdr": ("ib_write_bw_gdr_loopback", "ib_write_bw_gdr_pair"),
    "nvlink": ("nvlink_aggregate",),                               # per-GPU NVLink both ways (nvbandwidth)
    "storage": ("checkpoint_write", "checkpoint_read"),            # fio checkpoint per storage path (storage)
    "ddp": (),  # the profile's ddp section: torchrun across each pair (no threshold: it passes or fails)
}
# probes judged without a threshold: run where the profile has their section (and the probe is selected).
# NCCL's transport check rides on the pair NCCL run ("nccl") where the profile has a gpudirect section.
SECTION_PROBES = {"ddp": "ddp"}

# nvbandwidth's testcases, by the threshold that judges them
NVBW_TESTS = {"nvbandwidth_h2d": "host_to_device_memcpy_ce", "nvbandwidth_d2h": "device_to_host_memcpy_ce",
              "nvbandwidth_d2d": "device_to_device_memcpy_read_ce"}

# node-to-node measurements: the Measurement.probe -> the threshold that judges it
PAIR_THRESHOLD = {
    "ib_write_bw": "ib_write_bw_pair",
    "ib_write_lat": "ib_write_lat_p99",
    "iperf3": "iperf3_ipoib",
    "nccl_allreduce": "nccl_allreduce_pair",
    "ib_write_bw_gdr": "ib_write_bw_gdr_pair",
}

# the channels of a node pair whose failure is explained by a fault on any part of either node
AGGREGATE = frozenset({"nccl_allreduce", "nccl_transport", "ddp_allreduce"})

Channel = tuple[str, "int | None"]


def channel_text(ch: Channel) -> str:
    probe, fabric = ch
    return probe if fabric is None else f"{probe} fabric {fabric}"
