"""Chapter 3's newer exercises accept a right answer and name each plausible mistake.

One test per named mistake of ``alibi-slopes`` and ``memn2n-append`` (the older chapter 3
exercises are covered in ``test_exercises_answers.py``). Fixed seeds: a failure replays.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mini_transformer import exercises
from mini_transformer import positional as P
from mini_transformer.exercises import checking

SEED = 20261125


@pytest.fixture(autouse=True)
def first_try():
    """Every test starts with no wrong predictions made (the second try is per process)."""
    checking._WRONG.clear()


def slopes(n):
    """ALiBi's slopes, vectorised as a reader would write them (the paper's recipe)."""
    p = 2 ** int(math.log2(n))
    pow2 = lambda m: 2.0 ** (-8.0 * np.arange(1, m + 1) / m)  # noqa: E731
    return pow2(n) if p == n else np.r_[pow2(p), pow2(2 * p)[0::2][: n - p]]


def test_alibi_slopes_accepts_the_papers_recipe_and_the_package(capsys):
    assert exercises.check("alibi-slopes", slopes, seed=SEED)
    assert exercises.check("alibi-slopes", lambda n: P.alibi_slopes(n).double(), seed=SEED)


SLOPE_MISTAKES = {
    "2^(-8h/n)": lambda n: 2.0 ** (-8.0 * np.arange(1, n + 1) / n),
    "the first n - p slopes of 2p": lambda n: np.r_[
        slopes(2 ** int(math.log2(n))),
        slopes(2 ** (int(math.log2(n)) + 1))[: n - 2 ** int(math.log2(n))],
    ],
    "sorted from steep to shallow": lambda n: np.sort(slopes(n))[::-1],
}


@pytest.mark.parametrize("words", sorted(SLOPE_MISTAKES))
def test_alibi_slopes_names_each_mistake(words, capsys):
    verdict = exercises.check("alibi-slopes", SLOPE_MISTAKES[words], seed=SEED)
    out = capsys.readouterr().out
    assert not verdict
    assert "edge case '6 heads" in out  # the paper's own example already shows the mistake
    assert words in out, out


def test_memn2n_append_accepts_the_prediction_and_explains(capsys):
    assert exercises.check("memn2n-append", (8, 1))
    out = capsys.readouterr().out
    assert out.startswith("✓ memn2n-append") and "not prefix-stable" in out


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ((0, 16), "a causal scheme"),
        ((8, 0), "middle dimension"),
        ((1, 15), "only the word that was last"),
        ((7, 1), "is not right ((a) wrong, (b) right)"),
        (8, "expected a tuple of 2 items, got 8"),  # a bare number instead of the tuple
    ],
)
def test_memn2n_append_names_each_mistake(answer, words, capsys):
    verdict = exercises.check("memn2n-append", answer)
    out = capsys.readouterr().out
    assert not verdict
    assert words in out, out
    # A prediction of the right kind is committed: a hint follows (the explanation after a
    # second wrong one). A value of the wrong kind is refused with neither (no spoiler).
    assert ("Hint:" in out) == isinstance(answer, tuple) and "Why:" not in out


def test_memn2n_append_matches_the_package_encoding():
    before, after = P.memn2n_encoding(8, 16), P.memn2n_encoding(9, 16)[:8]
    same = np.isclose(before, after, rtol=0, atol=1e-12)
    answer = (int((~same.all(axis=1)).sum()), int(same[0].sum()))
    assert exercises.check("memn2n-append", answer)


def _window_infinite(m, T, w):  # a geometric series to infinity as the normaliser
    return sum(math.exp(-m * r) for r in range(w)) * (1 - math.exp(-m))


def _window_plus(m, T, w):  # the bias with the wrong sign
    z = sum(math.exp(m * r) for r in range(T))
    return sum(math.exp(m * r) for r in range(w)) / z


def _slopes_even(n):  # every other slope of 2p, but starting with the second
    p = 2 ** int(math.floor(math.log2(n)))

    def geo(k):
        return [(2 ** (-8 / k)) ** (h + 1) for h in range(k)]

    return geo(p) if p == n else geo(p) + geo(2 * p)[1::2][: n - p]


@pytest.mark.parametrize(
    ("name", "answer", "words"),
    [
        ("alibi-window", _window_infinite, "normalised over infinitely many offsets"),
        ("alibi-window", _window_plus, "the bias with the wrong sign"),
        ("alibi-slopes", _slopes_even, "the even-numbered slopes of 2p"),
    ],
)
def test_alibi_checkers_name_the_learners_mistakes(name, answer, words, capsys):
    assert not exercises.check(name, answer, seed=1)
    assert f"This looks like: {words}" in capsys.readouterr().out
