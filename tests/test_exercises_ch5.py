"""Chapter 5's new exercises: the right answer passes, and each named mistake is caught by name.

The exercises of chapter 5 that predate this file (layer-norm, batch-norm-stats, pre-ln-block,
rms-norm, ln-jacobian) are tested in ``test_exercises_answers.py``; this file covers the ones
added with the chapter's rewrite: ``parallel-block``, ``deepnorm-block`` and the checked
prediction ``adam-first-step``.
"""

from __future__ import annotations

import pytest

from mini_transformer import exercises

SEED = 20261125


def parallel(x, attn, ffn, ln):
    h = ln(x)
    return x + attn(h) + ffn(h)


def deepnorm(x, attn, ffn, ln1, ln2, alpha):
    h = ln1(alpha * x + attn(x))
    return ln2(alpha * h + ffn(h))


WRONG = {
    "parallel-block": {
        "sequential Pre-LN": (
            lambda x, a, f, ln: (lambda h: h + f(ln(h)))(x + a(ln(x))),
            "sequential Pre-LN",
        ),
        "no residual": (lambda x, a, f, ln: a(ln(x)) + f(ln(x)), "no residual connection"),
        "FFN reads x": (lambda x, a, f, ln: x + a(ln(x)) + f(x), "the FFN read x"),
        "Post-LN style": (lambda x, a, f, ln: ln(x + a(x) + f(x)), "Post-LN style"),
        "two LayerNorm calls, one on the sum": (
            lambda x, a, f, ln: x + ln(a(x) + f(x)),
            None,
        ),
    },
    "deepnorm-block": {
        "alpha on the sub-layer": (
            lambda x, a, f, l1, l2, al: (lambda h: l2(h + al * f(h)))(l1(x + al * a(x))),
            "alpha on the sub-layer",
        ),
        "alpha outside": (
            lambda x, a, f, l1, l2, al: (lambda h: al * l2(h + f(h)))(al * l1(x + a(x))),
            "alpha outside the LayerNorm",
        ),
        "alpha forgotten": (
            lambda x, a, f, l1, l2, al: (lambda h: l2(h + f(h)))(l1(x + a(x))),
            "alpha forgotten",
        ),
        "alpha only first": (
            lambda x, a, f, l1, l2, al: (lambda h: l2(h + f(h)))(l1(al * x + a(x))),
            "alpha only in the first sub-layer",
        ),
        "Pre-LN with alpha": (
            lambda x, a, f, l1, l2, al: (lambda h: al * h + f(l2(h)))(al * x + a(l1(x))),
            None,
        ),
    },
}

WRONG_CASES = [(name, m) for name in WRONG for m in WRONG[name]]


@pytest.mark.parametrize(
    ("name", "answer"), [("parallel-block", parallel), ("deepnorm-block", deepnorm)]
)
def test_right_answer_passes(name, answer, capsys):
    assert exercises.check(name, answer, seed=SEED), capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "mistake"), WRONG_CASES, ids=[f"{n}: {m}" for n, m in WRONG_CASES]
)
def test_named_mistake_is_caught(name, mistake, capsys):
    answer, words = WRONG[name][mistake]
    verdict = exercises.check(name, answer, seed=SEED)
    out = capsys.readouterr().out
    assert not verdict, f"{name} accepted {mistake!r}"
    assert out.startswith(f"✗ {name}:") and "Module(" not in out
    if words is not None:
        assert f"This looks like: {words}" in out, out


def test_adam_first_step_prediction(capsys):
    assert exercises.check("adam-first-step", 0.096)  # lr * sqrt(32 * 32)
    out = capsys.readouterr().out
    assert "Why:" in out and "sign(g)" in out  # the explanation follows a committed answer


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (3e-3 * 1e-3, "plain gradient descent"),
        (3e-3, "Adam moves each *entry*"),
        (3e-3 * 1024, "norms add in squares"),
        (0.5, None),
    ],
)
def test_adam_first_step_wrong_predictions(answer, words, capsys):
    assert not exercises.check("adam-first-step", answer)
    out = capsys.readouterr().out
    assert "0.09" not in out.split("Why:")[0]  # the verdict gives no spoiler before the why
    if words is not None:
        assert words in out, out


def test_adam_first_step_no_answer_gives_no_explanation(capsys):
    assert not exercises.check("adam-first-step", None)
    assert "Why:" not in capsys.readouterr().out


def _ln_jacobian_constants(x, eps):  # the learner's first try: mu and sigma held constant
    import torch

    return torch.eye(len(x), dtype=x.dtype) / torch.sqrt(x.var(unbiased=False) + eps)


def _ln_jacobian_no_eps(x, eps):
    import torch

    d, z = len(x), x - x.mean()
    sigma = torch.sqrt(z.pow(2).mean())
    y = z / sigma
    return (torch.eye(d, dtype=x.dtype) - 1.0 / d - torch.outer(y, y) / d) / sigma


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (_ln_jacobian_constants, "both the mean and the standard deviation treated as constants"),
        (_ln_jacobian_no_eps, "eps left out"),
    ],
)
def test_ln_jacobian_names_the_learners_mistakes(answer, words, capsys):
    assert not exercises.check("ln-jacobian", answer, seed=SEED)
    assert f"This looks like: {words}" in capsys.readouterr().out


def test_the_ln_jacobian_reference_is_symmetric():
    import torch

    from mini_transformer.exercises.ch5_layernorm import _ln_jac

    j = _ln_jac(torch.tensor([1.0, 3.0, -2.0], dtype=torch.float64), 1e-5)
    torch.testing.assert_close(j, j.T, rtol=0, atol=1e-10)
