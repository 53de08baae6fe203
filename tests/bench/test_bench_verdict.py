"""The benchmark's verdict uses the unrounded figure, and the printed figure never contradicts it."""

from __future__ import annotations

import pytest

from demos.bench import check_target, format_checked, table_rows, value_record


@pytest.mark.parametrize(
    "x, target, ok, shown",
    [
        (0.84996, ">= 0.85", False, "0.84996"),  # 0.850 would read as met
        (0.8499999, ">= 0.85", False, "0.8499999"),
        (0.85, ">= 0.85", True, "0.850"),
        (0.8504, ">= 0.85", True, "0.850"),
        (0.858, ">= 0.85", True, "0.858"),
        (0.2000004, "<= 0.2", False, "0.2000004"),  # 0.200 would read as met
        (0.19996, "<= 0.2", True, "0.200"),  # met, and 0.200 <= 0.2 reads as met too
        (0.99996, "< 1", True, "0.99996"),  # 1.000 < 1 would read as missed
        (1.0, "< 1", False, "1.000"),
        (1.234, None, None, "1.234"),
    ],
)
def test_verdict_is_unrounded_and_the_shown_number_agrees(x, target, ok, shown):
    assert check_target(target, x) is ok
    text = format_checked(x, target)
    assert text == shown
    assert check_target(target, float(text)) is ok  # a reader comparing the printed number agrees


def test_a_value_within_float_precision_of_the_bound_prints_exactly():
    x = 0.85 - 1e-15
    assert check_target(">= 0.85", x) is False
    text = format_checked(x, ">= 0.85", max_digits=12)
    assert text == repr(x) and float(text) == x


def test_the_table_row_prints_the_checked_figure():
    rec = value_record("overlap", "hidden fraction, threads ht R=1", 0.84996, "fraction", ">= 0.85")
    row = table_rows([rec])[0]
    assert row[1] == "0.84996" and row[-2:] == [">= 0.85", "NO"]
    timing = {**rec, "value": 12.3, "ratio": 0.2000004, "target": "<= 0.2", "ok": check_target("<= 0.2", 0.2000004)}
    row = table_rows([timing])[0]
    assert row[1] == "12.300" and row[5] == "0.2000004" and row[-1] == "NO"
