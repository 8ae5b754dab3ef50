"""driver checks (clustercert.checks.driver) through testinfra."""

import pytest

from clustercert.checks.driver import CHECK_IDS
from clustercert.checks.testinfra import assert_check


@pytest.mark.parametrize("check", CHECK_IDS)
def test_driver(host, clustercert_ctx, check):
    assert_check(host, clustercert_ctx, "driver", check)
