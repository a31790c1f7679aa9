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

SEED = 20261125


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


def test_the_prediction_explains_itself_after_the_verdict(capsys):
    exercises.check("se-prediction", 3)
    out = capsys.readouterr().out
    assert out.startswith("✗ se-prediction: 3 is not right (too small).")
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
