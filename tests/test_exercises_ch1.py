"""Chapter 1's new exercises: a right answer passes, and each named mistake is named.

``circle-code`` (several circles at once) and ``scalar-readout`` (a checked prediction).
The older chapter 1 exercises keep their wrong-answer tests in test_exercises_answers.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from mini_transformer import exercises
from mini_transformer.exercises import checking
from mini_transformer.exercises.ch1_position import scalar_readout_accuracy

SEED = 20261125


@pytest.fixture(autouse=True)
def first_try():
    """Every test starts with no wrong predictions made (the second try is per process)."""
    checking._WRONG.clear()


def circles(n, thetas):
    angles = np.arange(n)[:, None] * np.asarray(thetas)[None, :]
    out = np.empty((n, 2 * len(thetas)))
    out[:, 0::2], out[:, 1::2] = np.sin(angles), np.cos(angles)
    return out


def test_circle_code_accepts_a_right_answer(capsys):
    assert exercises.check("circle-code", circles, seed=SEED)
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda n, t: circles(n, t)[:, [i ^ 1 for i in range(2 * len(t))]], "cos before sin"),
        (
            lambda n, t: np.concatenate(
                [np.sin(np.arange(n)[:, None] * t), np.cos(np.arange(n)[:, None] * t)], axis=1
            ),
            "all sines, then all cosines",
        ),
        (lambda n, t: circles(n + 1, t)[1:], "counted from 1"),
    ],
    ids=["swapped", "concat", "from-1"],
)
def test_circle_code_names_each_mistake(wrong, words):
    verdict = exercises.check("circle-code", wrong, seed=SEED)
    assert not verdict
    assert words in verdict.message


def test_circle_code_with_the_sinusoid_speeds_is_the_sinusoidal_encoding():
    from mini_transformer import positional

    speeds = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    assert np.allclose(circles(12, speeds), positional.sinusoidal_encoding(12, 8), atol=1e-12)


def test_scalar_readout_theory_matches_a_measurement():
    gen = np.random.default_rng(0)
    N, d = 20, 32
    codes = np.zeros((N, d))
    codes[:, 0] = np.arange(N) / N
    x = gen.standard_normal((500, N, d)) + codes
    score = x @ codes.T - 0.5 * (codes**2).sum(axis=1)
    measured = np.mean(score.argmax(axis=-1) == np.arange(N))
    assert abs(measured - scalar_readout_accuracy(N)) < 0.015
    assert scalar_readout_accuracy(1) == 1.0


def test_scalar_readout_accepts_a_close_prediction_and_explains(capsys):
    assert exercises.check("scalar-readout", 0.07)
    out = capsys.readouterr().out
    assert "✓" in out and "Why:" in out and "cancel" in out


@pytest.mark.parametrize(
    "answer, words",
    [
        (0.05, "chance"),
        (0.136, "N = 10 positions"),
        (0.088, "within half the gap"),
        (0.0, "drowned"),
        (0.06, "too small"),  # near chance: outside the tolerance of 0.003 (issue 34)
        (0.5, "too large"),
    ],
)
def test_scalar_readout_names_each_mistake_and_hints_before_the_why(capsys, answer, words):
    verdict = exercises.check("scalar-readout", answer)
    assert not verdict
    assert words in verdict.message
    out = capsys.readouterr().out
    assert "Hint:" in out and "Why:" not in out and "0.069" not in out
    assert not exercises.check("scalar-readout", 0.9)  # a second wrong answer: the why
    assert "Why:" in capsys.readouterr().out


def test_scalar_readout_no_answer_gives_no_explanation(capsys):
    assert not exercises.check("scalar-readout", None)
    out = capsys.readouterr().out
    assert "no answer yet" in out and "Why:" not in out


def test_first_return_names_the_index_for_position_slip(capsys):
    pos = np.arange(1, 2000)
    index = int(np.argmax(np.hypot(np.sin(pos), np.cos(pos) - 1.0) < 0.01))  # not pos[...]
    assert not exercises.check("first-return", index)
    assert "off by one, an index and not a position" in capsys.readouterr().out


def test_scalar_readout_does_not_depend_on_the_chapters_numbers():
    """The prompt states N = 20 and d_model = 4096 itself; the reference is the formula at
    N = 20 and the mistakes are named without the chapter's table: 0.069 +- 0.003."""
    from mini_transformer.exercises import checking as c

    ex = c._get("scalar-readout")
    assert abs(ex.reference() - 0.0689) < 1e-4
    assert "section" not in ex.task + "".join(ex.mistakes) + ex.hint


# the student persona's run on the reworked checkers (p34b): each wrong value is named
@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (44, "the first return within 0.1 or 0.05 (section 1.6's 0.018 apart), not 0.01"),
        (355, "355 = 113 pi is half a turn"),  # was "too large" and nothing else
        (22, "only the sine"),
        (25, "only the cosine"),
        (710, "the first return within 0.001"),
    ],
)
def test_first_return_names_the_personas_wrong_values(answer, words, capsys):
    assert not exercises.check("first-return", answer)
    assert f"This looks like: {words}" in capsys.readouterr().out
