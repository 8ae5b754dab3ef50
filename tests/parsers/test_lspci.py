"""Tests for clustercert.parsers.lspci."""

from __future__ import annotations

import pytest

from clustercert.parsers import ParseError, parse

# Hand-written -vv stanzas in lspci's layout: one healthy GPU, one downgraded switch port, and an old
# pciutils device without (ok)/(downgraded) annotations whose width is below capability.
VV = """19:00.0 3D controller: NVIDIA Corporation Device 2330 (rev a1)
\tSubsystem: NVIDIA Corporation Device 16c1
\tNUMA node: 0
\tCapabilities: [78] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM L1, Exit Latency L1 <4us
\t\tLnkSta:\tSpeed 32GT/s (ok), Width x16 (ok)
\tKernel driver in use: nvidia

17:03.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0) (prog-if 00 [Normal decode])
\tNUMA node: 1
\t\tLnkCap:\tPort #3, Speed 32GT/s, Width x16, ASPM L0s L1, Exit Latency L0s <4us, L1 <32us
\t\tLnkSta:\tSpeed 16GT/s (downgraded), Width x16 (ok)
\tKernel driver in use: pcieport

82:00.0 Infiniband controller: Mellanox Technologies MT27500 Family [ConnectX-3]
\t\tLnkCap:\tPort #8, Speed 8GT/s, Width x8, ASPM L0s, Exit Latency L0s unlimited, L1 unlimited
\t\tLnkSta:\tSpeed 8GT/s, Width x4, TrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-
"""


def test_vv_links_and_downgrades():
    r = parse("lspci", VV)
    gpu, sw, cx3 = r["devices"]
    assert gpu["bus_id"] == "00000000:19:00.0" and gpu["driver"] == "nvidia" and gpu["numa_node"] == 0
    assert gpu["link"] == {
        "cap_speed_gt_s": 32.0, "cap_width": 16, "sta_speed_gt_s": 32.0, "sta_width": 16,
        "speed_downgraded": False, "width_downgraded": False, "downgraded": False,
    }
    assert sw["description"] == "Broadcom / LSI PEX890xx PCIe Gen 5 Switch" and sw["rev"] == "b0"
    assert sw["link"]["sta_speed_gt_s"] == 16.0 and sw["link"]["speed_downgraded"] is True
    assert sw["link"]["downgraded"] is True and sw["link"]["width_downgraded"] is False
    assert cx3["link"]["sta_width"] == 4 and cx3["link"]["width_downgraded"] is True  # computed: x4 < x8
    assert cx3["link"]["speed_downgraded"] is False


def test_crlf_vv():
    assert parse("lspci", VV.replace("\n", "\r\n")) == parse("lspci", VV)


def test_nn_listing(fixture_text):
    r = parse("lspci", fixture_text("lspci/lspci-nn-hgx-a100-gpus-nvswitch.txt"))
    assert len(r["devices"]) == 31
    d0 = r["devices"][0]
    assert d0["address"] == "0001:00:00.0" and d0["class"] == "3D controller" and d0["class_id"] == "0302"
    assert d0["vendor_device"] == "10de:20b2" and d0["rev"] == "a1"
    assert d0["description"] == "NVIDIA Corporation GA100 [A100 SXM4 80GB]"
    assert sum(1 for d in r["devices"] if d["vendor_device"] == "10de:20b2") == 8
    ib = [d for d in r["devices"] if d["class"] == "Infiniband controller"]
    assert len(ib) == 8 and ib[0]["vendor_device"] == "15b3:101c"
    assert all(d["link"] is None for d in r["devices"])


def test_plain_listing_with_domains(fixture_text):
    r = parse("lspci", fixture_text("lspci/lspci-gb200-cx7-bridges.txt"))
    assert len(r["devices"]) == 87
    gpus = [d for d in r["devices"] if d["class"] == "3D controller"]
    assert [d["bus_id"] for d in gpus] == [
        "00000008:01:00.0",
        "00000009:01:00.0",
        "00000018:01:00.0",
        "00000019:01:00.0",
    ]
    cx7 = [d for d in r["devices"] if d["description"] == "Mellanox Technologies MT2910 Family [ConnectX-7]"]
    assert len(cx7) == 4


def test_errors():
    with pytest.raises(ParseError, match="empty"):
        parse("lspci", "")
    with pytest.raises(ParseError, match="device lines"):
        parse("lspci", "pcilib: Cannot open /proc/bus/pci\nlspci: Cannot find any working access method.\n")
