"""The one P = X parser: every stated number is read the same way; unparseable is None, never 0."""
import pytest

from martingale.beliefs.parse import parse_p, parse_totals


@pytest.mark.parametrize("text,expected", [
    ("think 0 c1 +2 -> +2 P = 0.62 end", 0.62),
    ("P = .5", 0.5),
    ("P=1", 1.0),
    ("P = 0", 0.0),
    ("P = 35%", 0.35),
    ("first P = 0.2 then P = 0.7", 0.7),
])
def test_stated_probability_is_read_from_the_last_p_equals(text, expected):
    assert parse_p(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", [None, "", "P = ", "no number here", "P = 1.5", "P = -0.2",
                                  "P = nan", "P = maybe", "probability 0.3"])
def test_unparseable_answer_is_none_not_zero(text):
    assert parse_p(text) is None


def test_trace_totals_are_the_start_and_each_running_total():
    assert parse_totals("think -3 c1 +2 -> -1 c4 -5 -> -6 P = 0.2") == [-3, -1, -6]


def test_trace_without_think_has_no_totals():
    assert parse_totals("snap P = 0.3 end") is None
