from __future__ import annotations

import pytest

from clustercert.errors import InputError
from clustercert.model.profile import KNOWN_THRESHOLDS, builtin_profiles, load_profile


def test_builtin_profiles_exist_and_validate():
    names = builtin_profiles()
    for required in ("h100-sxm-8x-ndr", "a100-sxm-8x-hdr", "lab"):
        assert required in names
    for name in names:
        p = load_profile(name)
        assert p.name == name
        # every threshold carries its source and a usable bound
        for tname, t in p.thresholds.items():
            assert tname in KNOWN_THRESHOLDS
            assert len(t.source) > 10
            assert t.floor is not None or t.max is not None


def test_h100_profile_shape():
    p = load_profile("h100-sxm-8x-ndr")
    assert (p.gpu.count, p.gpu.nvswitch, p.gpu.nvlink_links_per_gpu) == (8, True, 18)
    # the compute rails are counted, rated and placed, never named: each node's names are discovered
    assert (p.hardware.rails.count, p.hardware.rails.rate_gbit_per_s, p.hardware.rails.affinity) == (
        8,
        400,
        "PIX",
    )
    assert not p.hardware.nic_gpu and not [h for h in p.ib.hcas if h.role == "compute"]
    assert p.ib.bond.slaves == ("ib8", "ib9") and p.ib.bond.mode == "active-backup"
    assert p.driver.version.startswith(p.driver.branch + ".")
    assert p.thresholds["ib_write_bw_pair"].floor == pytest.approx(320)
    assert p.thresholds["ib_write_lat_p99"].max == 4.2


def test_a100_differs_where_hardware_differs():
    a, h = load_profile("a100-sxm-8x-hdr"), load_profile("h100-sxm-8x-ndr")
    assert a.gpu.pcie_gen == 4 and h.gpu.pcie_gen == 5
    assert a.thresholds["nccl_allreduce_1node"].min == 228
    assert a.driver.modules == "proprietary"


def test_override_is_deep_merged_and_revalidated():
    p = load_profile("lab", {"gpu": {"count": 4}, "thresholds": {"iperf3_ipoib": {"rated": 0.1}},
                             "hardware": {"nic_gpu": {"mlx5_0": 0}}})
    assert p.gpu.count == 4 and p.hardware.nic_gpu == {"mlx5_0": 0}  # the GPU->NIC mapping is replaced whole
    assert p.gpudirect.source.startswith("lab: the simulated topo -m")
    assert p.gpu.model == "NVIDIA H100 80GB HBM3"  # untouched keys survive the merge
    assert p.thresholds["iperf3_ipoib"].floor == pytest.approx(0.08)
    with pytest.raises(InputError) as exc:  # the merged profile is validated whole: GPUDirect without rails
        load_profile("lab", {"hardware": {"nic_gpu": {}}})
    assert "gpudirect: the profile has no compute rails" in str(exc.value)
    with pytest.raises(InputError) as exc:
        load_profile("lab", {"ib": {"bond": {"primary": "ib7"}}})
    assert "ib.bond" in str(exc.value) and "not one of the slaves" in str(exc.value)


def test_driver_version_must_be_on_branch():
    with pytest.raises(InputError, match="not on branch 570"):
        load_profile("lab", {"driver": {"version": "560.35.03"}})


def test_unknown_threshold_rejected():
    with pytest.raises(InputError, match="unknown threshold 'ib_wirte_bw'"):
        load_profile(
            "lab", {"thresholds": {"ib_wirte_bw": {"min": 1, "unit": "gbit_per_s", "source": "typo test"}}}
        )


def test_dcgm_diag_level_is_validated_and_sets_its_own_time_limit():
    for name in ("h100-sxm-8x-ndr", "a100-sxm-8x-hdr", "lab"):
        d = load_profile(name).dcgm_diag
        assert d is not None and d.level == 2 and "dcgmi-diag" in d.source
        assert d.limit_s == 900  # -r 2 runs about two minutes: not bounded by --probe-timeout
    assert load_profile("lab", {"dcgm_diag": {"level": 3, "timeout_s": 1800}}).dcgm_diag.limit_s == 1800
    assert load_profile("lab", {"dcgm_diag": {"level": 4}}).dcgm_diag.limit_s == 14400
    with pytest.raises(InputError, match="dcgm_diag.level"):
        load_profile("lab", {"dcgm_diag": {"level": 5}})
    with pytest.raises(InputError, match="dcgm_diag.levle"):
        load_profile("lab", {"dcgm_diag": {"levle": 1}})


def test_lab_latency_ceiling_sits_between_healthy_and_slowed_links():
    from clustercert_lab.hardware import IB_REFERENCES

    lab = load_profile("lab").thresholds["ib_write_lat_p99"]
    healthy_p99 = IB_REFERENCES[400]["ib_write_lat_usec"]["value"] + 0.05  # the perftest sim's p99 spread
    assert healthy_p99 < lab.max < healthy_p99 / 0.5  # a link at half speed or worse fails
    assert load_profile("h100-sxm-8x-ndr").thresholds["ib_write_lat_p99"].max == 4.2
    assert load_profile("a100-sxm-8x-hdr").thresholds["ib_write_lat_p99"].max == 4.2
