"""ib checks (clustercert.checks.ib) through testinfra."""

import pytest

from clustercert.checks.ib import CHECK_IDS
from clustercert.checks.testinfra import assert_check


@pytest.mark.parametrize("check", CHECK_IDS)
def test_ib(host, clustercert_ctx, check):
    assert_check(host, clustercert_ctx, "ib", check)
