"""Chapter 6's new checkers (2026-11-25): each accepts a right answer and names each new mistake.

One wrong answer per named mistake added in this round: the unstable log of a softmax
(perplexity, review m11), the three clipping mistakes (grad-clip) and the two wrong
predictions (se-prediction). Fixed seeds, so a failure replays.
"""

from __future__ import annotations

import math

import pytest
import torch

from mini_transformer import exercises
from mini_transformer.exercises import checking

SEED = 20261125


@pytest.fixture(autouse=True)
def first_try():
    """Every test starts with no wrong predictions made (the second try is per process)."""
    checking._WRONG.clear()


def _ppl_right(z, t):
    logp = z.double() - torch.logsumexp(z.double(), dim=-1, keepdim=True)
    return math.exp(-logp.gather(-1, t[..., None]).mean().item())


def _ppl_log_of_softmax(z, t):  # what review m11 found passing
    return math.exp(-z.softmax(-1).gather(-1, t[..., None]).log().mean().item())


def _global_norm(grads):
    return math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))


def _clip_right(grads, max_norm):
    norm = _global_norm(grads)
    return [g * min(1.0, max_norm / norm) for g in grads], norm


def _clip_per_tensor(grads, max_norm):
    return [g * min(1.0, max_norm / float(g.norm())) for g in grads], _global_norm(grads)


def _clip_norm_after(grads, max_norm):
    clipped, norm = _clip_right(grads, max_norm)
    return clipped, min(norm, max_norm)


def _clip_always(grads, max_norm):
    norm = _global_norm(grads)
    return [g * (max_norm / norm) for g in grads], norm


RIGHT = {"perplexity": _ppl_right, "grad-clip": _clip_right, "se-prediction": 4}

WRONG = [
    ("perplexity", _ppl_log_of_softmax, "log of the softmax"),
    ("grad-clip", _clip_per_tensor, "its own norm"),
    ("grad-clip", _clip_norm_after, "after clipping"),
    ("grad-clip", _clip_always, "scaled up"),
    ("se-prediction", 2, "1 / sqrt(n)"),
    ("se-prediction", 16, "a quarter"),
]


@pytest.mark.parametrize("name", sorted(RIGHT))
def test_checker_accepts_a_right_answer(name, capsys):
    assert exercises.check(name, RIGHT[name], seed=SEED), capsys.readouterr().out


@pytest.mark.parametrize(("name", "answer", "words"), WRONG, ids=[w[2] for w in WRONG])
def test_checker_names_the_mistake(name, answer, words, capsys):
    verdict = exercises.check(name, answer, seed=SEED)
    out = capsys.readouterr().out
    assert not verdict and out.startswith(f"✗ {name}:")
    assert words in out, out


def test_the_prediction_explains_itself_after_a_second_wrong_answer(capsys):
    exercises.check("se-prediction", 3)
    out = capsys.readouterr().out
    assert out.startswith("✗ se-prediction: 3 is not right (too small).")
    assert "Hint:" in out and "Why:" not in out
    exercises.check("se-prediction", 8)
    out = capsys.readouterr().out
    assert "Why:" in out and "sqrt(n)" in out


def test_the_unstable_answer_is_finite_on_the_stable_path():
    # the edge case of m11: a stable answer is finite, softmax-then-log is not
    z = torch.tensor([[[0.0, -200.0, -1.0]]])
    t = torch.tensor([[1]])
    assert math.isfinite(_ppl_right(z, t))
    assert math.isinf(_ppl_log_of_softmax(z, t))  # log(0) = -inf, so the perplexity is inf


def _count_like_the_learner(V, block, d, L, d_ff, positional, bias, table=True, beta=False):
    b, ln = int(bias), int(bias or beta)
    layer = 4 * (d * d + b * d) + 2 * d * d_ff + b * (d_ff + d) + 2 * (1 + ln) * d
    pos = block * d if positional == "learned" and table else 0
    return V * d + pos + L * layer + (1 + ln) * d


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (lambda *a: _count_like_the_learner(*a, table=False), "the learned position table"),
        (lambda *a: _count_like_the_learner(*a, beta=True), "LayerNorm shifts (beta) counted"),
    ],
)
def test_param_count_names_the_learners_mistakes(answer, words, capsys):
    assert not exercises.check("param-count", answer, seed=1)
    assert f"This looks like: {words}" in capsys.readouterr().out


def noam(step, d_model, warmup):
    n = step + 1
    return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)


NOAM_MISTAKES = [
    (lambda s, d, w: d**-0.5 * min(s**-0.5 if s else math.inf, s * w**-1.5), "counts from 1"),
    (lambda s, d, w: d**-0.5 * min((s + 1) ** -0.5, (s + 1) / w), "^-1 instead of ^-1.5"),
    (lambda s, d, w: d**-0.5 * max((s + 1) ** -0.5, (s + 1) * w**-1.5), "max instead of min"),
    (lambda s, d, w: min((s + 1) ** -0.5, (s + 1) * w**-1.5), "d_model^-0.5 left out"),
]


def noam_float32(step, d_model, warmup):  # float32 arithmetic: right too (issue 34)
    n = torch.tensor(step + 1.0)
    return float(d_model**-0.5 * torch.minimum(n**-0.5, n * torch.tensor(warmup) ** -1.5))


def test_noam_schedule_accepts_a_right_answer_and_peaks_at_warmup(capsys):
    assert exercises.check("noam-schedule", noam, seed=SEED)
    assert exercises.check("noam-schedule", noam_float32, seed=SEED), capsys.readouterr().out
    rates = [noam(s, 512, 4000) for s in range(8000)]
    assert max(range(8000), key=rates.__getitem__) == 3999 and abs(max(rates) - 7.0e-4) < 1e-5


@pytest.mark.parametrize(("answer", "words"), NOAM_MISTAKES, ids=[w for _, w in NOAM_MISTAKES])
def test_noam_schedule_names_each_mistake(answer, words, capsys):
    assert not exercises.check("noam-schedule", answer, seed=SEED)
    assert words in capsys.readouterr().out


@pytest.mark.parametrize(("axis", "words"), [(1, "over the positions"), (0, "over the batch")])
def test_perplexity_names_a_log_softmax_over_the_wrong_axis(axis, words, capsys):
    def wrong_axis(z, t):
        logp = z.double() - torch.logsumexp(z.double(), dim=axis, keepdim=True)
        return math.exp(-logp.gather(-1, t[..., None]).mean().item())

    assert not exercises.check("perplexity", wrong_axis, seed=SEED)
    assert f"This looks like: log-softmax {words}" in capsys.readouterr().out


def test_grad_clip_refuses_clipping_the_callers_tensors_in_place(capsys):
    def clip_in_place(grads, max_norm):
        norm = _global_norm(grads)
        for g in grads:
            g.mul_(min(1.0, max_norm / norm))
        return grads, norm

    assert not exercises.check("grad-clip", clip_in_place, seed=SEED)
    out = capsys.readouterr().out
    assert "modified its argument grads in place" in out
    assert "inputs (a list of 2 tensors of shapes (2,), (2, 1), 0.9)" in out  # not "a list object"


class _LyingInt(int):
    def __int__(self):
        return 4


def test_se_prediction_reads_the_value_of_an_int_subclass(capsys):
    assert not exercises.check("se-prediction", _LyingInt(2))
    assert "2 is not right" in capsys.readouterr().out


def _ppl_max_over(axis):  # the persona's: the shift's maximum over the wrong axis
    def ppl(z, t):
        s = z - z.max(dim=axis, keepdim=True).values
        logp = s - torch.log(torch.exp(s).sum(-1, keepdim=True))
        return math.exp(-logp.gather(-1, t[..., None]).mean().item())

    return ppl


@pytest.mark.parametrize(("axis", "words"), [(1, "over the positions"), (0, "over the batch")])
def test_perplexity_names_a_maximum_over_the_wrong_axis(axis, words, capsys):
    assert not exercises.check("perplexity", _ppl_max_over(axis), seed=SEED)
    assert f"This looks like: the maximum taken {words}" in capsys.readouterr().out


def _clip_adding_norms(grads, max_norm):  # the persona's: norms added, not squares
    norm = sum(float(g.norm()) for g in grads)
    return [g * min(1.0, max_norm / norm) for g in grads], norm


def test_grad_clip_shows_the_norm_first_and_names_added_norms(capsys):
    assert not exercises.check("grad-clip", _clip_adding_norms, seed=SEED)
    out = capsys.readouterr().out
    assert "the norm: expected 1, got 1.4. This looks like: the tensors' norms added" in out


def _clip_like_pytorch(grads, max_norm):  # torch's factor max_norm / (norm + 1e-6)
    norm = _global_norm(grads)
    return [g * min(1.0, max_norm / (norm + 1e-6)) for g in grads], norm


def _clip_with_pytorch(grads, max_norm):
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return [p.grad for p in params], float(norm)


@pytest.mark.parametrize("answer", [_clip_like_pytorch, _clip_with_pytorch])
def test_grad_clip_accepts_pytorchs_own_formula(answer, capsys):
    assert exercises.check("grad-clip", answer, seed=SEED), capsys.readouterr().out
