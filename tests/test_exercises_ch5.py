"""Chapter 5's new exercises: the right answer passes, and each named mistake is caught by name.

The exercises of chapter 5 that predate this file (layer-norm, rms-norm,
ln-jacobian) are tested in ``test_exercises_answers.py``; this file covers the ones
added with the chapter's rewrite: ``parallel-block``, ``deepnorm-block`` and the checked
prediction ``adam-first-step``.
"""

from __future__ import annotations

import pytest

from mini_transformer import exercises
from mini_transformer.exercises import checking

SEED = 20261125


@pytest.fixture(autouse=True)
def first_try():
    """Every test starts with no wrong predictions made (the second try is per process)."""
    checking._WRONG.clear()


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


def test_adam_first_step_in_a_cold_process_with_both_cores_busy():
    """Issue 34: the first optimizer in a process imports torch._dynamo (seconds on a loaded
    machine). The warm-up runs it before the reader's clock, so neither the value nor an
    answer that runs Adam itself times out, on a fresh process with both cores busy."""
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    code = textwrap.dedent(
        """
        import torch
        from mini_transformer import exercises

        def adam_step():
            w = torch.zeros(32, 32, requires_grad=True)
            w.grad = torch.full((32, 32), 1e-3 / 32)
            torch.optim.Adam([w], lr=3e-3).step()
            return float(w.detach().norm())

        assert exercises.check("adam-first-step", 0.096, time_limit=0.5)
        assert exercises.check("adam-first-step", adam_step, time_limit=0.5)
        """
    )
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
        )
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert run.returncode == 0, run.stdout + run.stderr
    assert "did not finish" not in run.stdout


def test_the_adam_reference_is_torchs_first_step():
    import numpy as np
    import torch

    from mini_transformer.exercises.ch5_layernorm import _adam_first_step

    g = np.random.default_rng(3).standard_normal((32, 32))
    w = torch.zeros(32, 32, dtype=torch.float64, requires_grad=True)
    w.grad = torch.from_numpy(g * (1e-3 / np.linalg.norm(g)))
    torch.optim.Adam([w], lr=3e-3).step()
    assert abs(float(w.detach().norm()) - _adam_first_step(g)) < 1e-12


def fold(gamma, beta, weight, bias):
    return weight * gamma, weight @ beta + bias


FOLD_MISTAKES = [
    (lambda g, b, w, c: (w * g[:, None], w @ b + c), "scales the columns"),
    (lambda g, b, w, c: (w * g, b + c), "beta passes through the layer too"),
    (lambda g, b, w, c: (w * g, c), "beta forgotten"),
    (lambda g, b, w, c: (w * g, w @ (g * b) + c), "the shift comes after the gain"),
    (lambda g, b, w, c: (w.mul_(g), w @ b + c), "in place"),
]


def test_fold_layer_norm_accepts_a_right_answer_and_an_nn_layer_check(capsys):
    import torch

    assert exercises.check("fold-layer-norm", fold, seed=SEED)
    ln, lin = torch.nn.LayerNorm(5).double(), torch.nn.Linear(5, 3).double()
    torch.nn.init.normal_(ln.weight), torch.nn.init.normal_(ln.bias)
    x = torch.randn(4, 5, dtype=torch.float64)
    w2, b2 = fold(ln.weight, ln.bias, lin.weight, lin.bias)
    plain = torch.nn.functional.layer_norm(x, (5,), eps=ln.eps)  # no gain, no shift
    assert torch.allclose(plain @ w2.T + b2, lin(ln(x)), atol=1e-12)


@pytest.mark.parametrize(("answer", "words"), FOLD_MISTAKES, ids=[w for _, w in FOLD_MISTAKES])
def test_fold_layer_norm_names_each_mistake(answer, words, capsys):
    assert not exercises.check("fold-layer-norm", answer, seed=SEED)
    assert words in capsys.readouterr().out


def _ln_jacobian(x, eps, outer_d=1, sign=1):
    import torch

    d, sigma = len(x), torch.sqrt(x.var(unbiased=False) + eps)
    y = (x - x.mean()) / sigma
    return (torch.eye(d, dtype=x.dtype) - 1 / d - sign * torch.outer(y, y) / d**outer_d) / sigma


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (lambda x, e: _ln_jacobian(x, e, outer_d=0), "the 1/d missing on the y y^T term"),
        (lambda x, e: _ln_jacobian(x, e, sign=-1), "the y y^T / d term with the wrong sign"),
    ],
)
def test_ln_jacobian_names_the_yy_term_mistakes_not_a_constant_factor(answer, words, capsys):
    assert not exercises.check("ln-jacobian", answer, seed=SEED)
    out = capsys.readouterr().out
    assert f"This looks like: {words}" in out and "constant factor" not in out
    assert "edge case 'd = 4'" in out  # the first case, where no formula is a factor of J


@pytest.mark.parametrize("name", ["parallel-block", "deepnorm-block"])
def test_the_tuple_habit_attn_x_0_is_caught_on_every_case(name, capsys):
    """attn(x)[0] takes batch element 0 and broadcasts it: every case has B >= 2."""
    if name == "parallel-block":

        def answer(x, a, f, ln):
            return x + a(ln(x))[0] + f(ln(x))
    else:

        def answer(x, a, f, l1, l2, al):
            h = l1(al * x + a(x)[0])
            return l2(al * h + f(h))

    for seed in range(3):
        assert not exercises.check(name, answer, seed=seed)
        assert "This looks like: attn(h)[0]" in capsys.readouterr().out


def test_ln_jacobian_wants_the_inputs_dtype(capsys):  # float32 passed before (persona)
    answer = lambda x, eps: _ln_jacobian(x.float(), eps)  # noqa: E731
    assert not exercises.check("ln-jacobian", answer, seed=0)
    assert "expected a float64 tensor, got float32" in capsys.readouterr().out


def test_adam_first_step_names_the_missing_bias_correction(capsys):
    assert not exercises.check("adam-first-step", 0.304)  # 0.096 * 0.1 / sqrt(0.001)
    assert "This looks like: no bias correction" in capsys.readouterr().out


def test_a_nan_prediction_is_called_nan_not_too_large(capsys):
    assert not exercises.check("adam-first-step", float("nan"))
    assert capsys.readouterr().out.startswith("✗ adam-first-step: nan is not right (NaN:")
