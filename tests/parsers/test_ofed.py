"""Tests for clustercert.parsers.ofed (inputs written for this project: ofed_info -s prints one line)."""

from __future__ import annotations

import pytest

from clustercert.parsers import ParseError, parse


@pytest.mark.parametrize(
    ("line", "package", "flavour", "version"),
    [
        ("MLNX_OFED_LINUX-24.10-1.1.4.0:", "MLNX_OFED_LINUX", "mlnx", "24.10-1.1.4.0"),
        ("MLNX_OFED_LINUX-5.8-3.0.7.0:\r\n", "MLNX_OFED_LINUX", "mlnx", "5.8-3.0.7.0"),
        ("OFED-internal-24.07-0.6.1:", "OFED-internal", "ofed-internal", "24.07-0.6.1"),
        ("DOCA-OFED-2.9.1-1.0.0:", "DOCA-OFED", "doca", "2.9.1-1.0.0"),
        ("MLNX_EN_LINUX-23.10-2.1.3.1:", "MLNX_EN_LINUX", "mlnx-en", "23.10-2.1.3.1"),
    ],
)
def test_ofed_info_versions(line, package, flavour, version):
    rec = parse("ofed-info", line)
    assert rec == {"ok": True, "installed": True, "package": package, "flavour": flavour, "version": version,
                   "error": None}


def test_ofed_info_missing_tool():
    rec = parse("ofed-info", "bash: ofed_info: command not found\n")
    assert rec["ok"] is False and rec["installed"] is False and rec["version"] is None


def test_ofed_info_errors():
    with pytest.raises(ParseError, match="empty"):
        parse("ofed-info", "")
    with pytest.raises(ParseError, match="MLNX_OFED_LINUX"):
        parse("ofed-info", "Error: Cannot unload the Infiniband driver stack due to the above issue(s)!\n")
    with pytest.raises(ParseError):
        parse("ofed-info", "CA 'mlx5_0'\n\tCA type: MT4129\n")
