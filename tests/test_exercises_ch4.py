"""Chapter 4's new named mistakes: each wrong answer fails its checker, named for the mistake.

The older chapter 4 mistakes are tested in ``tests/test_exercises_answers.py``; this file
covers the edge cases and exercises added for the pitfalls the chapter teaches (the blog
post's -2**30 fill in float16, an overflowing softmax, the checked predictions of the spread of
q . k and of the zeros of a prefix-LM's Jacobian). Each check runs with a fixed seed.
"""

from __future__ import annotations

import pytest
import torch

from mini_transformer import exercises
from mini_transformer.exercises import checking

SEED = 20261125


@pytest.fixture(autouse=True)
def first_try():
    """Every test starts with no wrong predictions made (the second try is per process)."""
    checking._WRONG.clear()


def masked_softmax(s, m):
    return s.masked_fill(~m, torch.finfo(s.dtype).min).softmax(-1) * m.any(-1, keepdim=True)


def softmax_jacobian(s):
    p = s.softmax(0)
    return torch.diag(p) - torch.outer(p, p)


def masked_log_softmax(s, m):
    lse = s.masked_fill(~m, float("-inf")).logsumexp(-1, keepdim=True)
    return (s - lse).masked_fill(~m, float("-inf"))


def head_scores(q, k, h):  # section 4.8's split, then section 4.3's scale with d_k = d_head
    B, _, d = q.shape
    qh, kh = (t.view(B, t.shape[1], h, d // h).transpose(1, 2) for t in (q, k))
    return qh @ kh.transpose(-2, -1) / (d // h) ** 0.5


def head_scores_loop(q, k, h):  # an independent reference: one head at a time, by slicing
    d_head = q.shape[-1] // h
    heads = [q[..., i * d_head : (i + 1) * d_head] @ k[..., i * d_head : (i + 1) * d_head].mT
             for i in range(h)]  # fmt: skip
    return torch.stack(heads, dim=1) / d_head**0.5


def split_wrong(q, k, h, how):  # section 4.8's reshape bug, or head i taking every h-th feature
    B, _, d = q.shape
    if how == "reshape":
        qh, kh = (t.reshape(B, h, t.shape[1], d // h) for t in (q, k))
    else:
        qh, kh = (t.view(B, t.shape[1], d // h, h).permute(0, 3, 1, 2) for t in (q, k))
    return qh @ kh.transpose(-2, -1) / (d // h) ** 0.5


RIGHT = {
    "head-scores": head_scores_loop,
    "masked-log-softmax": masked_log_softmax,
    "softmax-jacobian": softmax_jacobian,
    "score-std": 20,
    "prefix-lm-zeros": 39,
}


def fill_2_30(s, m):  # the blog post's TensorFlow recipe, zeroing empty rows afterwards
    return (s + (~m) * -(2**30)).softmax(-1) * m.any(-1, keepdim=True)


def masked_fill_2_30(s, m):  # masked_fill refuses -2**30 in float16
    return s.masked_fill(~m, -(2**30)).log_softmax(-1).masked_fill(~m, float("-inf"))


def jacobian_unstable(s):
    e = s.exp()
    p = e / e.sum()
    return torch.diag(p) - torch.outer(p, p)


WRONG = [
    ("masked-log-softmax", masked_fill_2_30, "without overflow"),
    ("softmax-jacobian", jacobian_unstable, "without subtracting the maximum"),
    ("score-std", 400, "the variance d_k"),
    ("score-std", 1, "the scaled score's"),
    ("prefix-lm-zeros", 45, "plain causal count"),
    ("prefix-lm-zeros", 61, "non-zero blocks"),
    ("prefix-lm-zeros", 55, "T(T + 1)/2"),
    ("head-scores", lambda q, k, h: head_scores(q, k, h) / h**0.5, "divided by sqrt(d_model)"),
    ("head-scores", lambda q, k, h: head_scores(q, k, h) * (q.shape[-1] // h) ** 0.5, "unscaled"),
    ("head-scores", lambda q, k, h: split_wrong(q, k, h, "reshape"), "without the transpose"),
    ("head-scores", lambda q, k, h: split_wrong(q, k, h, "interleaved"), "interleaved heads"),
]


@pytest.mark.parametrize("name", sorted(RIGHT))
def test_right_answer_passes(name, capsys):
    assert exercises.check(name, RIGHT[name], seed=SEED)


@pytest.mark.parametrize("name, wrong, words", WRONG, ids=[w[2] for w in WRONG])
def test_wrong_answer_fails_and_is_named(name, wrong, words, capsys):
    verdict = exercises.check(name, wrong, seed=SEED)
    assert not verdict
    assert words in verdict.message


def test_float16_case_passes_the_finite_fill_and_fails_the_2_30_fill():
    # the pitfall of section 4.5, as the checker sees it: only float16 tells the two apart
    s = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], dtype=torch.float16)
    m = torch.tensor([[True, False, True], [False, False, False]])
    assert torch.isfinite(masked_softmax(s, m)).all()
    assert fill_2_30(s, m)[1].isnan().all()
    assert torch.isfinite(fill_2_30(s.float(), m)).all()  # float32 alone would not catch it


def test_prediction_hints_then_explains(capsys):
    exercises.check("prefix-lm-zeros", 45)
    out = capsys.readouterr().out
    assert "Hint:" in out and "Why:" not in out and "39" not in out
    exercises.check("prefix-lm-zeros", 61)
    out = capsys.readouterr().out
    assert "Why:" in out and "39" in out


# In the format of tests/test_exercises_answers.py's CASES (right answer, {label: (wrong answer,
# words of its message or None)}), which merges these so that every registered exercise is there.
CASES_CH4 = {
    "score-std": (
        20,
        {words: (wrong, words) for name, wrong, words in WRONG if name == "score-std"},
    ),
    "head-scores": (
        head_scores,
        {words: (wrong, words) for name, wrong, words in WRONG if name == "head-scores"},
    ),
    "prefix-lm-zeros": (
        39,
        {
            label: (wrong, words)
            for name, wrong, words in WRONG
            if name == "prefix-lm-zeros"
            for label in [words]
        },
    ),
}


def test_softmax_jacobian_written_out_with_the_maximum_subtracted_passes(capsys):
    # Exercise 5's Jacobian written out by hand (section 4.1's caution): the subtraction of the
    # row maximum is what separates it from the unstable version above.
    def by_hand(s):
        e = (s - s.max()).exp()
        p = e / e.sum()
        return torch.diag(p) - torch.outer(p, p)

    assert exercises.check("softmax-jacobian", by_hand, seed=SEED)
    assert not exercises.check("softmax-jacobian", jacobian_unstable, seed=SEED)


def fill_1e4_in_float16(s, m):  # finfo.min in float32, a fixed fill in float16
    fill = -1e4 if s.dtype == torch.float16 else torch.finfo(s.dtype).min
    return s.masked_fill(~m, fill).log_softmax(-1).masked_fill(~m, float("-inf"))


def mean_shift_jacobian(s):
    e = (s - s.mean()).exp()
    p = e / e.sum()
    return torch.diag(p) - torch.outer(p, p)


NEW_WRONG = [
    ("masked-log-softmax", fill_1e4_in_float16, "a fixed fill (-1e4)", "float16 scores near"),
    ("softmax-jacobian", mean_shift_jacobian, "the mean subtracted", "spread both ways"),
    (
        "masked-log-softmax",
        lambda s, m: s.masked_fill(~m, float("-inf")).log_softmax(-1),
        "-inf - (-inf) = NaN",
        "a fully masked row",
    ),
    (
        "masked-log-softmax",
        lambda s, m: s.masked_fill(~m, torch.finfo(s.dtype).min).log_softmax(-1),
        "the masked entries left finite",
        "a fully masked row",
    ),
    (
        "masked-log-softmax",
        lambda s, m: masked_softmax(s, m).log(),
        "the log of the softmax",
        "200 below",
    ),
    (
        "masked-log-softmax",
        lambda s, m: s.masked_fill(~m, -1e4).log_softmax(-1).masked_fill(~m, float("-inf")),
        "a fixed fill (-1e4)",
        "near -20000 in float32",
    ),
]


@pytest.mark.parametrize(("name", "answer", "words", "case"), NEW_WRONG)
def test_new_edge_cases_name_each_mistake(name, answer, words, case, capsys):
    verdict = exercises.check(name, answer, seed=SEED)
    out = capsys.readouterr().out
    assert not verdict and case in verdict.case
    assert "This looks like: " in out and words in out, out


def test_masked_log_softmax_agrees_with_the_masked_softmax():
    s = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.0, 1.0]], dtype=torch.float64)
    m = torch.tensor([[True, False, True], [False, False, False]])
    assert torch.allclose(masked_log_softmax(s, m).exp(), masked_softmax(s, m))


def softmax_jacobian_float32(s):  # the persona's: float32 arithmetic for float64 scores
    p = s.float().softmax(-1)
    return torch.diag(p) - torch.outer(p, p)


def test_softmax_jacobian_wants_the_scores_dtype(capsys):
    s = torch.tensor([0.0, -104.0], dtype=torch.float64)
    assert softmax_jacobian_float32(s)[1, 1] == 0 < softmax_jacobian(s)[1, 1]  # 6.8e-46 lost
    assert not exercises.check("softmax-jacobian", softmax_jacobian_float32, seed=SEED)
    assert "expected a float64 tensor, got float32" in capsys.readouterr().out


def test_score_std_prediction_is_the_measured_spread():
    # an independent reference for the right answer: 20,000 random pairs at d_k = 400
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(20_000, 400, dtype=torch.float64, generator=g) for _ in range(2))
    dots = (q * k).sum(-1)
    assert abs(dots.std().item() - 20) < 0.5 and abs((dots / 20).std().item() - 1) < 0.025
