"""The one P = X parser: every stated number is read the same way; unparseable is None, never 0."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


# --- a corpus of real-looking model answers: (id, answer, expected P or None) ---
CORPUS = [
    ("markdown-bold-after-prose",
     "Let me think... Considering the base rate and the two clues, I estimate **P = 0.35**.", 0.35),
    ("think-block-ignored", "<think>maybe 0.9</think>\nP = 0.2", 0.2),
    ("think-block-with-p-inside", "<think>First guess P = 0.9, but clue 4 cuts against it.</think>\n\nP = 0.4", 0.4),
    ("think-block-unclosed", "<think>The first clue suggests P = 0.7, then the second", None),
    ("think-orphan-close-r1-template",
     "Okay, so the clues point both ways. Maybe P = 0.8?\n</think>\n\n**Final answer:** P = 0.55", 0.55),
    ("thinking-tag", "<thinking>0.1 or 0.2?</thinking>\nP = 0.15", 0.15),
    ("decimal-comma-final-answer", "Final answer: P = 0,65", 0.65),
    ("decimal-comma-prose", "Ich schätze die Wahrscheinlichkeit auf P = 0,3.", 0.3),
    ("percent", "I'd put it at roughly P = 70%.", 0.7),
    ("percent-space", "P = 70 % (moderately confident)", 0.7),
    ("percent-fractional", "Given how rare this is, P = 7.5%.", 0.075),
    ("percent-word", "P = 15 percent, since only one clue supports it.", 0.15),
    ("percent-latex", r"$P = 40\%$", 0.4),
    ("scientific", "This is extremely unlikely: P = 1e-3", 0.001),
    ("scientific-upper", "P = 2E-1", 0.2),
    ("scientific-mantissa", "P = 1.5e-2 given the evidence.", 0.015),
    ("scientific-times-ten", "P ≈ 3 × 10^-2", 0.03),
    ("fraction", "It's a coin flip, so P = 1/2.", 0.5),
    ("fraction-spaced", "Three of the four clues agree: P = 3 / 4", 0.75),
    ("fraction-latex", r"Therefore $P = \frac{1}{4}$.", 0.25),
    ("markdown-bold-number", "My estimate: P = **0.82**", 0.82),
    ("markdown-code", "`P = 0.05`", 0.05),
    ("markdown-bold-label-colon", "**P**: 0.6", 0.6),
    ("latex-approx", r"So $P \approx 0.33$.", 0.33),
    ("colon", "P: 0.9", 0.9),
    ("approx-sign", "P ≈ 0.45 (hard to say more precisely)", 0.45),
    ("no-spaces", "P=0.12", 0.12),
    ("leading-dot", "P = .25", 0.25),
    ("trailing-words", "P = 0.7 end", 0.7),
    ("last-statement-wins", "Initially P = 0.2. After clue 3 I revise: P = 0.6.", 0.6),
    ("definition-then-answer", "Let P = the probability that the answer is yes. Then P = 0.3.", 0.3),
    ("dash-then-words", "P = 0.7 - fairly likely", 0.7),
    ("synthetic-trace", "think -3 c7 +2 -> -1 c12 -4 -> -5 P = 0.08 end", 0.08),
    ("synthetic-snap", "snap P = 0.35 end", 0.35),
    ("certain-one", "The clues settle it. P = 1", 1.0),
    ("impossible-zero", "P = 0", 0.0),
    ("refusal", "I cannot estimate this without more information.", None),
    ("refusal-with-p-word", "I'm not able to give P for this question.", None),
    ("no-p-only-number", "I think the probability is about 0.3.", None),
    ("lowercase-p-value", "The result was significant (p = 0.03).", None),
    ("range-hyphen", "P = 0.3-0.4", None),
    ("range-en-dash-percent", "P = 30–40%", None),
    ("range-to", "Somewhere around P = 0.3 to 0.4.", None),
    ("list", "P = 0.3, 0.4", None),
    ("list-decimal-comma", "P = 0,3, 0,4", None),
    ("alternatives-or", "P = 0.3 or 0.4, depending on clue 2.", None),
    ("plus-minus", "P = 0.7 ± 0.1", None),
    ("question-mark", "Is it P = 0.3? Hard to say.", None),
    ("question-then-answer", "Could it be P = 0.9? No, clue 5 rules that out. P = 0.25", 0.25),
    ("aside-after-number", "P = 0.5 (or maybe a bit higher)", 0.5),
    ("out-of-range-integer", "P = 7", None),
    ("out-of-range-percent", "P = 150%", None),
    ("negative", "P = -0.2", None),
    ("zero-denominator", "P = 1/0", None),
    ("bad-last-hides-earlier", "P = 0.4 at first; on reflection P = 40.", None),
    ("glued-word", "P = 0.7ish", None),
    ("two-dots", "P = 0.7.5", None),
    ("doubled-separator-getp-bug", "All things considered, P = 0..7", None),
    ("spaced-decimal-point", "So my final estimate is P = 0. 7 overall.", None),
    ("spaced-decimal-comma", "Meine Schätzung: P = 0, 7", None),
    ("sentence-end-after-integer", "The third clue rules it out, so P = 0. Nothing else fits.", 0.0),
    ("nan", "P = NaN", None),
    ("template-echo", "Answer in the form P = X. P = [your estimate]", None),
]


@pytest.mark.parametrize("text,expected", [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_real_looking_answer_parses_to_its_stated_probability_or_none(text, expected):
    got = parse_p(text)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-12)


def test_corpus_has_at_least_forty_answers_with_unique_ids():
    assert len(CORPUS) >= 40
    assert len({c[0] for c in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("text,expected", [
    ("0.7", 0.7), ("  0.7\n", 0.7), ("**0.7**", 0.7), ("0.7.", 0.7), ("`0.35`", 0.35),
    ("0,25", 0.25), ("70%", 0.7), ("1e-3", 0.001), ("1/4", 0.25), (".5", 0.5),
    ("<think>0.9?</think>0.2", 0.2), ("P = 0.3", 0.3), ("Sure! P = 0.3", 0.3),
    ("7", None), ("0.3 0.4", None), ("0.3-0.4", None), ("about 0.3", None),
    ("The answer is 0.3.", None), ("0.7 end", None), ("", None), ("I don't know", None),
])
def test_bare_judge_answer_is_one_lone_number(text, expected):
    got = parse_p(text, bare=True)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-12)


def test_bare_number_is_not_read_without_bare():
    assert parse_p("0.7") is None


def test_bare_word_think_starts_a_synthetic_trace_not_a_think_block():
    assert parse_p("think 0 c1 +2 -> +2 P = 0.62 end") == pytest.approx(0.62)
    assert parse_totals("think 0 c1 +2 -> +2 P = 0.62 end") == [0, 2]


# --- properties (hypothesis) ---

probabilities = st.floats(min_value=0.0, max_value=1.0, allow_nan=False, allow_infinity=False)
# Trailing prose: a separator, then words with no digits, no "?" and no "<" (no numbers, questions or tags).
prose = st.tuples(
    st.sampled_from(["", ".", " end", ". ", " (", " - ", "\n\n", ", ", " because "]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOQRSTUVWXYZ .,;:!()*'\"\n", max_size=40),
).map(lambda t: t[0] + t[1] if t[0] else "")
wrappers = st.sampled_from(["{}", "**{}**", "`{}`", "${}$", "Final answer: {}", "I estimate {}"])


@settings(max_examples=300, deadline=None)
@given(p=probabilities, wrap=wrappers, tail=prose)
def test_any_probability_written_as_p_equals_decimal_reads_back_exactly(p, wrap, tail):
    assert parse_p(wrap.format(f"P = {p}") + tail) == pytest.approx(p, abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(p=probabilities, tail=prose)
def test_any_probability_written_as_percent_reads_back(p, tail):
    assert parse_p(f"P = {p * 100}%" + tail) == pytest.approx(p, abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(p=probabilities, tail=prose)
def test_any_probability_written_with_decimal_comma_reads_back(p, tail):
    text = f"P = {p:.6f}".replace(".", ",") + tail
    assert parse_p(text) == pytest.approx(p, abs=5e-7 + 1e-12)


@settings(max_examples=300, deadline=None)
@given(p=probabilities, tail=prose)
def test_any_probability_in_scientific_notation_reads_back_to_its_rounding(p, tail):
    got = parse_p(f"P = {p:.3e}" + tail)
    assert got == pytest.approx(float(f"{p:.3e}"), rel=1e-12, abs=1e-300)
    assert got == pytest.approx(p, rel=5e-4, abs=1e-300)


@settings(max_examples=300, deadline=None)
@given(p=probabilities, wrap=st.sampled_from(["{}", "**{}**", "`{}`", " {}.\n", "$${}$$"]))
def test_any_probability_as_a_bare_judge_answer_reads_back(p, wrap):
    assert parse_p(wrap.format(p), bare=True) == pytest.approx(p, abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(p=probabilities, scratch=st.text(max_size=60).filter(lambda s: "think>" not in s.lower()))
def test_think_block_contents_never_change_the_answer(p, scratch):
    assert parse_p(f"<think>{scratch}</think>\nP = {p}") == pytest.approx(p, abs=1e-9)


@settings(max_examples=1000, deadline=None)
@given(text=st.text(), bare=st.booleans())
def test_any_text_parses_to_none_or_a_probability_and_never_raises(text, bare):
    got = parse_p(text, bare=bare)
    assert got is None or (type(got) is float and 0.0 <= got <= 1.0)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="P =:0123456789.,%/e-+*`$()<>think \n", max_size=40), bare=st.booleans())
def test_number_like_text_parses_to_none_or_a_probability_and_never_raises(text, bare):
    got = parse_p(text, bare=bare)
    assert got is None or (type(got) is float and 0.0 <= got <= 1.0)


out_of_range = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not 0.0 <= x <= 1.0),
    st.integers().filter(lambda n: not 0 <= n <= 1),
)


@settings(max_examples=300, deadline=None)
@given(x=out_of_range, earlier=st.none() | probabilities, tail=prose)
def test_out_of_range_number_after_p_equals_is_never_returned(x, earlier, tail):
    prefix = "" if earlier is None else f"P = {earlier}. "
    assert parse_p(prefix + f"P = {x}" + tail) is None
    assert parse_p(prefix + f"P = {x * 100}%" + tail) is None


@settings(max_examples=300, deadline=None)
@given(a=probabilities, b=probabilities,
       joint=st.sampled_from(["-", " - ", "–", " to ", ", ", ",", " or ", " ± ", "; "]))
def test_two_numbers_after_the_last_p_equals_are_ambiguous(a, b, joint):
    assert parse_p(f"P = {a}{joint}{b}") is None


# --- malformed numbers: None, never the part before the flaw (the getP bug read "0..7" as 0.0) ---

@pytest.mark.parametrize("x", ["0..7", "0,,7", "0.,7", "0,.7", "1..0", "0.7..5", "0.7.,5", "0,7,,5"])
def test_number_with_doubled_or_mixed_separators_is_none(x):
    assert parse_p(f"P = {x}") is None
    assert parse_p(f"Final answer: P = {x}.") is None


@pytest.mark.parametrize("x", ["0. 7", "0, 7", "0 .7", "0 ,7", "0 . 7", "0.. 7", "0.\t7", "0.\n7",
                               "0.\u00a07", "0. 7%", "1/2. 5"])
def test_separator_spaced_from_an_integer_part_is_none(x):
    assert parse_p(f"P = {x}") is None


@pytest.mark.parametrize("x", ["1.e-3", "0.e-3", "0,e-3", "1.%", "0.\\%", "1./2", "1,/2"])
def test_separator_glued_to_an_exponent_percent_or_fraction_bar_is_none(x):
    assert parse_p(f"P = {x}") is None


@pytest.mark.parametrize("text", ["P = 1/", "P = 1/.", "P = 1/ end", "P = 3 /"])
def test_fraction_bar_without_a_denominator_is_none(text):
    assert parse_p(text) is None


@pytest.mark.parametrize("text", ["P = 0.3 .. 0.4", "P = 0.3..0.4", "P = 0 .. 1"])
def test_range_written_with_two_dots_is_none(text):
    assert parse_p(text) is None


@pytest.mark.parametrize("text,expected", [
    ("P = 0.", 0.0), ("P = 1.", 1.0), ("P = 0. It is unlikely.", 0.0), ("P = 0.7...", 0.7),
    ("P = 0...", 0.0), ("P = 0.7..", 0.7), ("P = 0.7.,", 0.7), ("P = 0,7,", 0.7),
    ("P = 0.\n\nNext question.", 0.0),
])
def test_punctuation_with_no_digit_after_it_is_a_sentence_end(text, expected):
    assert parse_p(text) == expected


def test_a_sentence_starting_with_a_digit_after_a_decimal_is_trailing_text():
    assert parse_p("P = 0.7. 5 of the clues agree.") == 0.7


def test_malformed_last_number_hides_an_earlier_statement():
    assert parse_p("At first P = 0.4. On reflection P = 0..7") is None


@pytest.mark.parametrize("x", ["0..7", "0.,7", "0. 7", "0 .7", "1..0"])
def test_malformed_bare_judge_answer_is_none(x):
    assert parse_p(x, bare=True) is None


digit_runs = st.text(alphabet="0123456789", min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(whole=digit_runs, frac=st.none() | digit_runs, digits=digit_runs,
       seps=st.text(alphabet=".,", min_size=2, max_size=3), earlier=st.none() | probabilities,
       tail=prose)
def test_any_number_with_a_doubled_or_mixed_separator_is_never_read(whole, frac, digits, seps,
                                                                     earlier, tail):
    prefix = "" if earlier is None else f"P = {earlier}. "
    x = whole + ("" if frac is None else "." + frac) + seps + digits
    assert parse_p(prefix + f"P = {x}" + tail) is None


@settings(max_examples=300, deadline=None)
@given(whole=digit_runs, digits=digit_runs, sep=st.sampled_from([".", ","]),
       before=st.sampled_from(["", " ", "\t"]), after=st.sampled_from(["", " ", "  ", "\t", "\n"]),
       tail=prose)
def test_any_integer_part_with_a_spaced_separator_is_never_read(whole, digits, sep, before, after,
                                                                tail):
    if not before and not after:
        after = " "
    assert parse_p(f"P = {whole}{before}{sep}{after}{digits}" + tail) is None
