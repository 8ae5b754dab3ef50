"""rdma checks (clustercert.checks.rdma) through testinfra."""

import pytest

from clustercert.checks.rdma import CHECK_IDS
from clustercert.checks.testinfra import assert_check


@pytest.mark.parametrize("check", CHECK_IDS)
def test_rdma(host, clustercert_ctx, check):
    assert_check(host, clustercert_ctx, "rdma", check)
