"""``schemas.records.check_json_value``: its one-pass path for flat objects and its general
path decide alike, for every JSON value hypothesis draws and at the bounds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.records import check_json_value

INT64 = 2**63
scalars = st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=8) | st.integers(
    min_value=-2 * INT64, max_value=2 * INT64)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
                           max_leaves=30)


def general(value, **bounds):
    """The general path alone: the value wrapped in a list, one level deeper."""
    depth = bounds.pop("max_depth", 32)
    values = bounds.pop("max_values", 100_000)
    return check_json_value([value], max_depth=depth + 1, max_values=values + 1)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6), st.integers(min_value=1, max_value=4),
       st.integers(min_value=1, max_value=40))
@pytest.mark.slow
def test_the_flat_path_and_the_general_path_agree(value, depth, values) -> None:
    outcomes = []
    for check in (lambda: check_json_value(value, max_depth=depth, max_values=values),
                  lambda: general(value, max_depth=depth, max_values=values)):
        try:
            check()
            outcomes.append("ok")
        except ValueError as exc:
            outcomes.append(str(exc).split(" ")[0])
    assert outcomes[0] == outcomes[1], (value, depth, values, outcomes)


def test_bounds_of_a_flat_object() -> None:
    assert check_json_value({"a": INT64 - 1, "b": -INT64, "c": 1.5, "d": None, "e": True}) == {
        "a": INT64 - 1, "b": -INT64, "c": 1.5, "d": None, "e": True}
    with pytest.raises(ValueError, match="out of the Int64 range"):
        check_json_value({"a": 1, "b": INT64})
    with pytest.raises(ValueError, match="nested deeper than 1"):
        check_json_value({"a": 1}, max_depth=1)
    with pytest.raises(ValueError, match="more than 2 values"):
        check_json_value({"a": 1, "b": 2}, max_values=2)
