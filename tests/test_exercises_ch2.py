"""Chapter 2's new exercises: a right answer passes, and every named mistake is caught and named.

The older chapter-2 exercises (sinusoidal-encoding, near-repeat, rope-half) are covered in
tests/test_exercises_answers.py. Each check runs with a fixed seed so that a failure replays.
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


def infer_base(pe):
    d = pe.shape[1]
    return float(np.arctan2(pe[1, 2], pe[1, 3]) ** (-d / 2))


def infer_base_slowest_pair(pe):
    # another right answer: the slowest pair, w = base^(-(d - 2)/d)
    d = pe.shape[1]
    return float(np.arctan2(pe[1, -2], pe[1, -1]) ** (-d / (d - 2)))


RIGHT = [
    ("rope-half", lambda x, p, b: rope_half(x, p, b)),
    ("pairs-that-wrap", 31),
    ("rope-same-token", True),
    ("infer-base", infer_base),
    ("infer-base", infer_base_slowest_pair),
]

# (exercise, wrong answer, words the message must contain)
WRONG = {
    "pairs-that-wrap: largest index": ("pairs-that-wrap", 30, "largest pair index"),
    "pairs-that-wrap: half": ("pairs-that-wrap", 32, "half of the 64 pairs"),
    "pairs-that-wrap: a float": ("pairs-that-wrap", 31.0, "expected an integer"),
    "rope-same-token: R(k) != R(-k)": ("rope-same-token", False, "does not see the difference"),
    "rope-same-token: not a bool": ("rope-same-token", "yes", "True or False"),
    "infer-base: pair 0": (
        "infer-base",
        lambda pe: float(np.arctan2(pe[1, 0], pe[1, 1]) ** (-pe.shape[1] / 2)),
        "pair 0",
    ),
    "infer-base: atan2 swapped": (
        "infer-base",
        lambda pe: float(np.arctan2(pe[1, 3], pe[1, 2]) ** (-pe.shape[1] / 2)),
        "atan2(cos, sin)",
    ),
    "infer-base: exponent i/d": (
        "infer-base",
        lambda pe: float(np.arctan2(pe[1, 2], pe[1, 3]) ** (-pe.shape[1])),
        "the base squared",
    ),
    "infer-base: concat layout read": (
        "infer-base",
        lambda pe: float(np.arctan2(pe[1, 1], pe[1, pe.shape[1] // 2 + 1]) ** (-pe.shape[1] / 2)),
        None,
    ),
    # mistakes the learner review (2026-11-24) found unnamed in the older exercises
    "near-repeat: searched from position 0": (
        "near-repeat",
        lambda d, b, n, t: (lambda h: int(h[0]) if len(h) else None)(
            np.flatnonzero(
                np.linalg.norm(P.sinusoidal_encoding(n, d, base=b) - [0, 1] * (d // 2), axis=1) < t
            )
        ),
        "searched from position 0",
    ),
    "rope-half: the package's sign": (
        "rope-half",
        lambda x, p, b: rope_half(x, -np.asarray(p), b),
        "P.RotaryEmbedding",
    ),
    "rope-half: exponent i/d": (
        "rope-half",
        lambda x, p, b: rope_half(x, p, b, exponent=1),
        "exponent i/d instead of 2i/d",
    ),
}


def rope_half(x, pos, base, exponent=2):
    h = x.shape[1] // 2
    angle = np.asarray(pos)[:, None] * base ** (-exponent * np.arange(h) / (2 * h))
    a, b = x[:, :h], x[:, h:]
    return np.concatenate(
        [a * np.cos(angle) - b * np.sin(angle), a * np.sin(angle) + b * np.cos(angle)], axis=1
    )


@pytest.mark.parametrize(
    ("name", "answer"), RIGHT, ids=[f"{n}-{i}" for i, (n, _) in enumerate(RIGHT)]
)
def test_right_answer_passes(name, answer, capsys):
    assert exercises.check(name, answer, seed=SEED), capsys.readouterr().out


@pytest.mark.parametrize("case", sorted(WRONG))
def test_named_mistake_is_caught_and_named(case, capsys):
    name, answer, words = WRONG[case]
    verdict = exercises.check(name, answer, seed=SEED)
    out = capsys.readouterr().out
    assert not verdict, f"{name} accepted {case!r}"
    assert out.startswith(f"✗ {name}:")
    if words is not None:
        assert words in out, out


def test_predictions_hint_then_explain_after_a_committed_answer(capsys):
    for name, answers in [("pairs-that-wrap", (30, 32)), ("rope-same-token", (True,))]:
        for i, answer in enumerate(answers):
            exercises.check(name, answer)
            out = capsys.readouterr().out
            assert ("  Why: " in out) == (i == len(answers) - 1)
            assert ("  Hint: " in out) == (i < len(answers) - 1)
    exercises.check("pairs-that-wrap", None)  # nothing committed yet: no explanation
    assert "Why" not in capsys.readouterr().out


def test_the_wrong_value_never_shows_the_right_one(capsys):
    exercises.check("pairs-that-wrap", 17)
    verdict_line = capsys.readouterr().out.splitlines()[0]
    assert "31" not in verdict_line


def test_prediction_answers_agree_with_the_package():
    lam = 2 * math.pi / P.sinusoidal_frequencies(128)
    assert int((lam < 512).sum()) == checking._get("pairs-that-wrap").reference()
    rope = P.RotaryEmbedding(8)
    import torch

    x = torch.randn(8, generator=torch.Generator().manual_seed(0)).expand(1, 1, 40, 8)
    r = rope(x)[0, 0].double()
    s = r @ r.T
    assert torch.allclose(s[20, 27], s[20, 13], atol=1e-5)  # the same token: symmetric
    y = torch.randn(8, generator=torch.Generator().manual_seed(1)).expand(1, 1, 40, 8)
    t = r @ rope(y)[0, 0].double().T
    assert abs(t[20, 27] - t[20, 13]) > 1e-3  # different tokens: not symmetric


def test_infer_base_recovers_the_packages_base():
    for base in (10.0, 500.0, 10000.0, 1e5):
        pe = P.sinusoidal_encoding(4, 16, base=base)
        assert math.isclose(checking._get("infer-base").reference(pe), base, rel_tol=1e-9)


# chapter 2's newer exercises in the format of tests/test_exercises_answers.py, which merges
# them into its CASES (every registered exercise: one right answer, at least two wrong ones)
NEW_EXERCISES = ("pairs-that-wrap", "rope-same-token", "infer-base")
CASES_CH2 = {
    name: (
        next(answer for n, answer in RIGHT if n == name),
        {case: (answer, words) for case, (n, answer, words) in WRONG.items() if n == name},
    )
    for name in NEW_EXERCISES
}


def test_rope_half_is_the_package_rope_with_the_opposite_sign():
    # Exercise 6 asks for RoFormer's counter-clockwise rotation; the package's RotaryEmbedding
    # uses the book's R(pos). After the channel permutation they differ by the sign of pos.
    import torch

    x = np.random.default_rng(SEED).standard_normal((9, 16))
    perm = np.r_[0:16:2, 1:16:2]
    pkg = P.RotaryEmbedding(16)(torch.from_numpy(x).float().view(1, 1, 9, 16))[0, 0]
    pkg = pkg.double().numpy()[:, perm]
    assert np.allclose(rope_half(x[:, perm], -np.arange(9), 1e4), pkg, atol=1e-5)
    assert np.abs(rope_half(x[:, perm], np.arange(9), 1e4) - pkg).max() > 0.1


def _pe_with(n, d, exponent, cos_first=False):
    """The learner's versions: pair i at base^(-exponent(i)), optionally cos before sin."""
    pe = np.zeros((n, d))
    for pos in range(n):
        for i in range(d // 2):
            a = pos * 10000.0 ** -exponent(i, d)
            pe[pos, 2 * i], pe[pos, 2 * i + 1] = (
                (np.cos(a), np.sin(a))
                if cos_first
                else (
                    np.sin(a),
                    np.cos(a),
                )
            )
    return pe


def blog_slip(n, d):  # section 2.5's dropdown: 2*i where 2*(i//2) belongs, i the column
    angle = np.arange(n)[:, None] / 10000 ** (2 * np.arange(d) / d)
    out = np.sin(angle)
    out[:, 1::2] = np.cos(angle[:, 1::2])
    return out


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (lambda n, d: _pe_with(n, d, lambda i, d: i / d), "exponent i/d_model instead of 2i"),
        (lambda n, d: _pe_with(n, d, lambda i, d: 2 * i / d, True), "cos before sin in each pair"),
        (blog_slip, "the blog's slip: column j's exponent 2j/d_model"),
    ],
)
def test_sinusoidal_encoding_names_the_learners_mistakes(answer, words, capsys):
    assert not exercises.check("sinusoidal-encoding", answer, seed=1)
    assert f"This looks like: {words}" in capsys.readouterr().out


def rope_half_stale(x, pos, base):  # the learner review's second attempt
    x = x.copy()
    h = x.shape[1] // 2
    angle = np.asarray(pos)[:, None] * base ** (-2 * np.arange(h) / (2 * h))
    a, b = x[:, :h], x[:, h:]
    a[:] = a * np.cos(angle) - b * np.sin(angle)
    b[:] = a * np.sin(angle) + b * np.cos(angle)  # a is already rotated here
    return x


def near_repeat_argmax(d, base, n, tol):  # no check for "no hit"
    dist = np.linalg.norm(P.sinusoidal_encoding(n, d, base=base)[1:] - [0, 1] * (d // 2), axis=1)
    return int(np.argmax(dist < tol)) + 1


@pytest.mark.parametrize(
    ("name", "answer", "words"),
    [
        ("rope-half", rope_half_stale, "the second half computed from the already rotated"),
        ("near-repeat", near_repeat_argmax, "argmax of an all-False array is 0"),
    ],
)
def test_the_learner_reviews_unnamed_slips_are_named(name, answer, words, capsys):
    assert not exercises.check(name, answer, seed=SEED)
    assert f"This looks like: {words}" in capsys.readouterr().out


def test_rope_half_states_the_sign_to_compare_with_the_package():
    assert "compare it with -pos" in checking._get("rope-half").task


def near_repeat_through_n(d, base, n, tol):  # the persona's: positions 1..n, one too far
    pe = P.sinusoidal_encoding(n + 1, d, base=base)
    hits = [p for p in range(1, n + 1) if np.linalg.norm(pe[p] - pe[0]) < tol]
    return hits[0] if hits else None


def near_repeat_zero_for_none(d, base, n, tol):  # 0, not None, when nothing repeats
    return near_repeat_through_n(d, base, n - 1, tol) or 0


def test_near_repeat_rejects_a_search_one_past_the_table(capsys):
    assert near_repeat_through_n(2, 1e4, 333, 0.01) == 333  # the first return sits at n
    assert not exercises.check("near-repeat", near_repeat_through_n, seed=SEED)
    assert "This looks like: searched pos = 1..n, one too far" in capsys.readouterr().out


def test_near_repeat_names_0_for_none_and_not_a_search_from_0(capsys):
    assert not exercises.check("near-repeat", near_repeat_zero_for_none, seed=SEED)
    out = capsys.readouterr().out
    assert "This looks like: 0 for 'no repeat': return None" in out
    assert "searched from position 0" not in out
