"""Tests for clustercert.parsers.kmod (lsmod, modinfo)."""

from __future__ import annotations

import pytest

from clustercert.parsers import ParseError, parse


def test_lsmod_grep(fixture_text):
    r = parse("lsmod", fixture_text("lsmod/lsmod-grep-nvidia-peermem-loaded.txt"))
    assert r["names"][:2] == ["nvidia_fs", "nvidia_peermem"]
    assert r["modules"]["nvidia_peermem"] == {"size_bytes": 16384, "use_count": 0, "used_by": []}
    assert r["modules"]["nvidia"]["use_count"] == 115 and r["modules"]["nvidia"]["used_by"] == [
        "nvidia_uvm",
        "nvidia_modeset",
    ]
    # the use count includes references that are not modules: 9 users counted, 8 named
    assert r["modules"]["ib_core"]["use_count"] == 9 and len(r["modules"]["ib_core"]["used_by"]) == 8


def test_lsmod_full_header_and_empty_grep(fixture_text):
    r = parse(
        "lsmod",
        "Module                  Size  Used by\nnvidia_uvm           1048576  0\n"
        "nvidia              39059456  115 nvidia_uvm\n",
    )
    assert r["names"] == ["nvidia_uvm", "nvidia"]
    empty = parse("lsmod", fixture_text("lsmod/lsmod-grep-nvidia_peermem-empty-A100.txt"))
    assert empty == {"modules": {}, "names": []}


def test_lsmod_errors():
    with pytest.raises(ParseError, match="empty"):
        parse("lsmod", "")
    with pytest.raises(ParseError, match="unexpected line"):
        parse("lsmod", "filename:       /lib/modules/x/nvidia.ko\n")


def test_modinfo(fixture_text):
    r = parse("modinfo", fixture_text("lsmod/modinfo-nvidia-590.44.01-dkms-excerpt.txt"))
    assert r["version"] == "590.44.01" and r["name"] == "nvidia"
    assert r["filename"] == "/lib/modules/6.8.0-90-generic/updates/dkms/nvidia.ko"
    assert r["vermagic"] == "6.8.0-90-generic SMP preempt mod_unload modversions"
    assert r["srcversion"] == "6AB346C68F15FDDC88B47F1"
    assert r["firmware"] == ["nvidia/590.44.01/gsp_tu10x.bin", "nvidia/590.44.01/gsp_ga10x.bin"]
    assert r["alias_count"] == 8 and r["depends"] == ["ecc"]
    assert "NVreg_DeviceFileMode:int" in r["parm"]
    peer = parse("modinfo", fixture_text("lsmod/modinfo-nv_peer_mem-1.0-8-ubuntu1804-not-loaded.txt"))
    assert (
        peer["version"] == "1.0-8"
        and peer["depends"] == ["ib_core"]
        and peer["vermagic"] == "4.15.0-46-generic SMP mod_unload"
    )


def test_modinfo_errors():
    with pytest.raises(ParseError, match="not found"):
        parse("modinfo", "modinfo: ERROR: Module nvidia_peermem not found.\n")
    with pytest.raises(ParseError, match="empty"):
        parse("modinfo", "")
