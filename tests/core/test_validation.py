"""The shared argument checks: bools are never counts, NumPy integers are integers."""

import numpy as np
import pytest

from genlm_core.checks import is_int_at_least, is_integer


@pytest.mark.parametrize("value", [0, -3, 7, np.int64(5), np.uint8(255)])
def test_is_integer_accepts_integral_numbers(value):
    assert is_integer(value)


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, np.float32(1)])
def test_is_integer_refuses_the_rest(value):
    assert not is_integer(value)


def test_is_int_at_least_wants_a_plain_int_at_the_minimum():
    assert is_int_at_least(1, 1) and is_int_at_least(5, 0)
    assert not is_int_at_least(0, 1)
    assert not is_int_at_least(True, 1)
    assert not is_int_at_least(np.int64(3), 1)  # counts and budgets are plain ints
