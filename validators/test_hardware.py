"""hardware checks (clustercert.checks.hardware) through testinfra: the per-node ones. The cluster-wide ones
(ib.firmware_uniform, gpu.vbios_uniform) compare nodes: `clustercert validate` runs them."""

import pytest

from clustercert.checks.hardware import NODE_CHECK_IDS
from clustercert.checks.testinfra import assert_check


@pytest.mark.parametrize("check", NODE_CHECK_IDS)
def test_hardware(host, clustercert_ctx, check):
    assert_check(host, clustercert_ctx, "hardware", check)
