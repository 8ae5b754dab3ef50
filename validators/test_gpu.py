"""gpu checks (clustercert.checks.gpu) through testinfra."""

import pytest

from clustercert.checks.gpu import CHECK_IDS
from clustercert.checks.testinfra import assert_check


@pytest.mark.parametrize("check", CHECK_IDS)
def test_gpu(host, clustercert_ctx, check):
    assert_check(host, clustercert_ctx, "gpu", check)
