"""bond checks (clustercert.checks.bond) through testinfra."""

import pytest

from clustercert.checks.bond import CHECK_IDS
from clustercert.checks.testinfra import assert_check


@pytest.mark.parametrize("check", CHECK_IDS)
def test_bond(host, clustercert_ctx, check):
    assert_check(host, clustercert_ctx, "bond", check)
