"""OpInfo conformance in the integer dtypes: test_opinfo_dtypes.py's pass, in a file of its
own so that ``pytest -n 2 --dist loadfile`` runs it beside the other dtypes."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import test_opinfo_dtypes as _dt  # noqa: E402  (the pass and its dtype lists)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("dtype", _dt.INTEGER, ids=str)
def test_opinfo_integer_dtype(dtype):
    """Zero mismatches against eager in ``dtype``; errors exactly ``expected_errors(dtype)``."""
    _dt.check_dtype(dtype)
