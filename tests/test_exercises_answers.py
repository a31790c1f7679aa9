"""Every chapter checker accepts a right answer and rejects plausible wrong ones.

For each exercise: one right answer written here (as a reader would write it, apart from
the checker's reference) and at least two wrong answers, each named for the mistake it
represents. A checker that accepts any wrong answer fails this file.
Where the checker should recognise the mistake, the expected words of its message are
given too. Each check runs with a fixed seed so a failure here is reproducible.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mini_transformer import exercises
from mini_transformer.exercises import checking, comparing

SEED = 20261123

# --- right answers ----------------------------------------------------------------------


def binary(n, n_bits):
    return (np.arange(n)[:, None] >> np.arange(n_bits)[None, :]) & 1


def share(N, d):
    p2 = np.mean((np.arange(N) / N) ** 2)
    return p2 / (1 + p2)


def probe(x, y, xt, yt):
    a = np.c_[x, np.ones(len(x))]
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    pred = np.c_[xt, np.ones(len(xt))] @ coef
    return 1 - ((yt - pred) ** 2).sum() / ((yt - yt.mean()) ** 2).sum()


def omega(d, base=10000.0):
    return base ** (-np.arange(0, d, 2) / d)


def pe(n, d, base=10000.0):
    out = np.zeros((n, d))
    ang = np.arange(n)[:, None] * omega(d, base)
    out[:, 0::2], out[:, 1::2] = np.sin(ang), np.cos(ang)
    return out


def near_repeat(d, base, n, tol):
    hits = np.flatnonzero(np.linalg.norm(pe(n, d, base)[1:] - pe(1, d, base)[0], axis=1) < tol)
    return int(hits[0]) + 1 if len(hits) else None


def rope_half(x, pos, base):
    h = x.shape[1] // 2
    ang = np.asarray(pos)[:, None] * omega(2 * h, base)[None, :]
    a, b = x[:, :h], x[:, h:]
    return np.concatenate([a * np.cos(ang) - b * np.sin(ang), a * np.sin(ang) + b * np.cos(ang)], 1)


def alibi(n_heads, T):
    m = 2.0 ** (-8.0 * np.arange(1, n_heads + 1) / n_heads)
    return -m[:, None, None] * np.abs(np.arange(T)[:, None] - np.arange(T)[None, :])


def unseen(T, L):
    r = np.arange(T)
    return ((T - r) * (r >= L)).sum() / (T * (T + 1) / 2)


def window(m, T, w):
    wt = np.exp(-m * np.arange(T))
    return wt[:w].sum() / wt.sum()


def masked_log_softmax(s, m):
    lse = s.masked_fill(~m, float("-inf")).logsumexp(-1, keepdim=True)
    return (s - lse).masked_fill(~m, float("-inf"))


def noam(step, d_model, warmup):
    return d_model**-0.5 * min((step + 1) ** -0.5, (step + 1) * warmup**-1.5)


def softmax_jacobian(s):
    p = s.softmax(0)
    return torch.diag(p) - torch.outer(p, p)


def rms_norm(x, g, eps):
    return g * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def ln_jacobian(x, eps):
    d = x.shape[0]
    sigma = torch.sqrt(x.var(unbiased=False) + eps)
    y = (x - x.mean()) / sigma
    return (torch.eye(d, dtype=x.dtype) - 1 / d - torch.outer(y, y) / d) / sigma


def perplexity(z, t):
    logp = z.double().log_softmax(-1)
    return math.exp(-logp.gather(-1, t[..., None]).mean().item())


def param_count(V, block, d, L, d_ff, positional, bias):
    b = int(bias)
    layer = 4 * d * d + 4 * b * d + 2 * d * d_ff + b * (d_ff + d) + 2 * (1 + b) * d
    return V * d + (block * d if positional == "learned" else 0) + L * layer + (1 + b) * d


def top_k(z, k):
    kth = z.topk(min(k, z.shape[-1]), dim=-1).values[..., -1:]
    return z.masked_fill(z < kth, float("-inf"))


def prefix_mask(T, P):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (j <= i) | (j < P)


# --- wrong answers ------------------------------------------------------------------------


def top_k_in_place(z, k):
    kth = z.topk(min(k, z.shape[-1]), dim=-1).values[..., -1:]
    z[z < kth] = float("-inf")
    return z


def memorised_first_answer(*args):
    return 0.5  # one number for every input


# name: (right answer, {mistake: (wrong answer, words the message must contain or None)})
CASES = {
    "binary-encoding": (
        binary,
        {
            "MSB first": (lambda n, b: binary(n, b)[:, ::-1], "most significant bit first"),
            "positions from 1": (lambda n, b: binary(n + 1, b)[1:], "counted from 1"),
            "bits of pos // 2": (lambda n, b: binary(n, b + 1)[:, 1:], None),
        },
    ),
    "first-return": (
        333,
        {
            "tolerance 0.05": (44, "0.05"),
            "one turn": (6, "one turn"),
            "a float": (333.0, "integer"),
            "no answer": (None, "no answer yet"),
            "a wrong position": (332, "too small"),
        },
    ),
    "position-share": (
        share,
        {
            "one-channel share": (
                lambda N, d: share(N, d) / (d - (d - 1) * share(N, d)),
                "one-channel",
            ),
            "N - 1": (lambda N, d: share(N - 1, d) if N > 1 else 0.0, None),
            "forgot the embedding": (lambda N, d: np.mean((np.arange(N) / N) ** 2), None),
        },
    ),
    "probe-r2": (
        probe,
        {
            "no intercept": (
                lambda x, y, xt, yt: (
                    1
                    - ((yt - xt @ np.linalg.lstsq(x, y, rcond=None)[0]) ** 2).sum()
                    / ((yt - yt.mean()) ** 2).sum()
                ),
                "no intercept",
            ),
            "in-sample": (lambda x, y, xt, yt: probe(x, y, x, y), "in-sample"),
            "squared correlation": (
                lambda x, y, xt, yt: (
                    np.corrcoef(
                        np.c_[xt, np.ones(len(xt))]
                        @ np.linalg.lstsq(np.c_[x, np.ones(len(x))], y, rcond=None)[0],
                        yt,
                    )[0, 1]
                    ** 2
                ),
                None,
            ),
        },
    ),
    "circle-code": (
        lambda n, t: np.stack(
            [np.sin(np.arange(n)[:, None] * t), np.cos(np.arange(n)[:, None] * t)], axis=-1
        ).reshape(n, -1),
        {
            "cos first": (
                lambda n, t: np.stack(
                    [np.cos(np.arange(n)[:, None] * t), np.sin(np.arange(n)[:, None] * t)],
                    axis=-1,
                ).reshape(n, -1),
                "cos before sin",
            ),
            "degrees": (
                lambda n, t: np.stack(
                    [
                        np.sin(np.arange(n)[:, None] * np.radians(t)),
                        np.cos(np.arange(n)[:, None] * np.radians(t)),
                    ],
                    axis=-1,
                ).reshape(n, -1),
                None,
            ),
        },
    ),
    "scalar-readout": (
        0.069,
        {
            "chance": (0.05, "chance"),
            "one position": (1.0, "too large"),
            "no answer": (None, "no answer yet"),
        },
    ),
    "sinusoidal-encoding": (
        pe,
        {
            "concat layout": (
                lambda n, d: np.concatenate([pe(n, d)[:, 0::2], pe(n, d)[:, 1::2]], 1),
                "concat",
            ),
            "cos and sin swapped": (
                lambda n, d: pe(n, d).reshape(n, d // 2, 2)[:, :, ::-1].reshape(n, d),
                None,
            ),
        },
    ),
    "near-repeat": (
        near_repeat,
        {
            "index into PE[1:]": (
                lambda d, b, n, t: (lambda r: None if r is None else r - 1)(
                    near_repeat(d, b, n, t)
                ),
                "one less",
            ),
            "distance to the previous position": (
                lambda d, b, n, t: (lambda h: int(h[0]) + 1 if len(h) else None)(
                    np.flatnonzero(np.linalg.norm(np.diff(pe(n, d, b), axis=0), axis=1) < t)
                ),
                None,
            ),
            "-1 for none": (
                lambda d, b, n, t: (lambda r: -1 if r is None else r)(near_repeat(d, b, n, t)),
                None,
            ),
        },
    ),
    "rope-half": (
        rope_half,
        {
            "interleaved pairs": (
                lambda x, p, b: rope_half(
                    x[:, np.r_[0 : x.shape[1] : 2, 1 : x.shape[1] : 2]], p, b
                )[:, np.argsort(np.r_[0 : x.shape[1] : 2, 1 : x.shape[1] : 2])],
                "interleaved",
            ),
            "clockwise": (lambda x, p, b: rope_half(x, -np.asarray(p), b), "clockwise"),
        },
    ),
    "alibi-bias": (
        alibi,
        {
            "slopes from h = 0": (lambda n, T: alibi(n, T) * 2.0 ** (8 / n), "h = 0"),
            "positive": (lambda n, T: -alibi(n, T), "positive"),
            "signed distance": (
                lambda n, T: (
                    alibi(n, T) * np.sign(np.arange(T)[:, None] - np.arange(T)[None, :] + 0.5)
                ),
                "signed",
            ),
        },
    ),
    "memn2n-blind": (
        lambda J, d: [d // 2] if d % 2 == 0 else [],
        {
            "0-based": (lambda J, d: [d // 2 - 1] if d % 2 == 0 else [], "0-based"),
            "always d/2": (lambda J, d: [d // 2], None),
            "none": (lambda J, d: [], None),
        },
    ),
    "unseen-offsets": (
        unseen,
        {
            "all pairs": (
                lambda T, L: np.mean(np.abs(np.arange(T)[:, None] - np.arange(T)) >= L),
                "all T^2",
            ),
            "offsets > L": (lambda T, L: unseen(T, L + 1), "offsets > L"),
            "positions": (lambda T, L: max(0, T - L) / T, "query positions"),
        },
    ),
    "alibi-window": (
        window,
        {
            "base 2": (lambda m, T, w: window(m * math.log(2), T, w), "2^(-m r)"),
            "w + 1 keys": (lambda m, T, w: window(m, T, w + 1), "w + 1"),
            "memorised": (memorised_first_answer, None),
        },
    ),
    "prefix-lm-mask": (
        prefix_mask,
        {
            "off by one": (
                lambda T, P: prefix_mask(T, min(T, P + 1)) if P < T else prefix_mask(T, P) & False,
                None,
            ),
            "prefix sees all": (
                lambda T, P: prefix_mask(T, P) | (torch.arange(T)[:, None] < P),
                "prompt reads",
            ),
            "transpose": (lambda T, P: prefix_mask(T, P).T, "transpose"),
            "float": (lambda T, P: prefix_mask(T, P).float(), "dtype"),
        },
    ),
    "masked-log-softmax": (
        masked_log_softmax,
        {
            "-inf fill": (lambda s, m: s.masked_fill(~m, float("-inf")).log_softmax(-1), "NaN"),
            "log of the softmax": (
                lambda s, m: masked_log_softmax(s, m).exp().log(),
                "log of the softmax",
            ),
            "float64 output": (lambda s, m: masked_log_softmax(s.double(), m), "dtype"),
        },
    ),
    "fold-layer-norm": (
        lambda g, b, w, c: (w * g, w @ b + c),
        {
            "rows": (lambda g, b, w, c: (w * g[:, None], w @ b + c), "columns"),
            "beta forgotten": (lambda g, b, w, c: (w * g, c), "beta forgotten"),
        },
    ),
    "noam-schedule": (
        noam,
        {
            "no d_model factor": (lambda s, d, w: noam(s, 1, w), "left out"),
            "from zero": (lambda s, d, w: noam(s - 1, d, w) if s else 0.0, "counts from 1"),
        },
    ),
    "softmax-jacobian": (
        softmax_jacobian,
        {
            "sign flipped": (lambda s: -softmax_jacobian(s), "sign flipped"),
            "diagonal only": (
                lambda s: torch.diag(torch.diagonal(softmax_jacobian(s))),
                "diagonal only",
            ),
            "scores instead of probabilities": (lambda s: torch.diag(s) - torch.outer(s, s), None),
        },
    ),
    "rms-norm": (
        rms_norm,
        {
            "mean subtracted": (
                lambda x, g, e: rms_norm(x - x.mean(-1, keepdim=True), g, e),
                "LayerNorm",
            ),
            "L2 norm": (
                lambda x, g, e: g * x / torch.sqrt((x * x).sum(-1, keepdim=True) + e),
                "L2 norm",
            ),
            "eps outside": (
                lambda x, g, e: g * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + e),
                "outside",
            ),
        },
    ),
    "ln-jacobian": (
        ln_jacobian,
        {
            "mean constant": (
                lambda x, e: ln_jacobian(x, e) + 1 / len(x) / torch.sqrt(x.var(unbiased=False) + e),
                "mean treated as a constant",
            ),
            "sigma constant": (
                lambda x, e: (
                    (torch.eye(len(x), dtype=x.dtype) - 1 / len(x))
                    / torch.sqrt(x.var(unbiased=False) + e)
                ),
                "standard deviation treated",
            ),
            "the identity (the normalisation forgotten)": (
                lambda x, e: torch.eye(len(x), dtype=x.dtype),
                None,
            ),
        },
    ),
    # chapter 5's exercises added with its rewrite (more wrong answers: test_exercises_ch5.py)
    "parallel-block": (
        lambda x, a, f, ln: x + a(ln(x)) + f(ln(x)),
        {
            "sequential": (
                lambda x, a, f, ln: (lambda h: h + f(ln(h)))(x + a(ln(x))),
                "sequential",
            ),
            "no residual": (lambda x, a, f, ln: a(ln(x)) + f(ln(x)), "no residual"),
        },
    ),
    "deepnorm-block": (
        lambda x, a, f, l1, l2, al: (lambda h: l2(al * h + f(h)))(l1(al * x + a(x))),
        {
            "alpha forgotten": (
                lambda x, a, f, l1, l2, al: (lambda h: l2(h + f(h)))(l1(x + a(x))),
                "alpha forgotten",
            ),
            "alpha on the sub-layer": (
                lambda x, a, f, l1, l2, al: (lambda h: l2(h + al * f(h)))(l1(x + al * a(x))),
                "alpha on the sub-layer",
            ),
        },
    ),
    "adam-first-step": (
        3e-3 * 32,
        {"plain gradient descent": (3e-6, "plain gradient descent"), "lr": (3e-3, "each *entry*")},
    ),
    "perplexity": (
        perplexity,
        {
            "naive exp": (
                lambda z, t: math.exp(
                    -(z.exp() / z.exp().sum(-1, keepdim=True))
                    .gather(-1, t[..., None])
                    .log()
                    .mean()
                    .item()
                ),
                "without subtracting the maximum",
            ),
            "2 ** nats": (lambda z, t: 2 ** math.log(perplexity(z, t)), "mixing the bases"),
            "cross-entropy only": (lambda z, t: math.log(perplexity(z, t)), "itself"),
            "per-token mean": (
                lambda z, t: (
                    (-z.double().log_softmax(-1).gather(-1, t[..., None])).exp().mean().item()
                ),
                "per-token",
            ),
        },
    ),
    # chapter 6's exercises added with its rewrite (more wrong answers: test_exercises_ch6.py)
    "grad-clip": (
        lambda gs, c: (lambda n: ([g * min(1.0, c / n) for g in gs], n))(
            math.sqrt(sum(float((g**2).sum()) for g in gs))
        ),
        {
            "per-tensor clipping": (
                lambda gs, c: (
                    [g * min(1.0, c / float(g.norm())) for g in gs],
                    math.sqrt(sum(float((g**2).sum()) for g in gs)),
                ),
                "its own norm",
            ),
            "norm after clipping": (
                lambda gs, c: (lambda n: ([g * min(1.0, c / n) for g in gs], min(n, c)))(
                    math.sqrt(sum(float((g**2).sum()) for g in gs))
                ),
                "after clipping",
            ),
        },
    ),
    "se-prediction": (4, {"1/n": (2, "1 / sqrt(n)"), "a quarter": (16, "a quarter")}),
    "param-count": (
        param_count,
        {
            "head counted twice": (lambda V, *a: param_count(V, *a) + V * a[1], "a second time"),
            "no final LayerNorm": (
                lambda V, bl, d, L, f, p, b: param_count(V, bl, d, L, f, p, b) - (1 + b) * d,
                "final LayerNorm",
            ),
            "float": (lambda *a: float(param_count(*a)), "integer"),
        },
    ),
    "train-flops": (
        lambda N, L, d, T, n: (6 * N + 12 * L * d * T) * n,
        {
            "forward only": (lambda N, L, d, T, n: (2 * N + 4 * L * d * T) * n, None),
            "no attention": (lambda N, L, d, T, n: 6 * N * n, "left out"),
            "T squared": (lambda N, L, d, T, n: (6 * N + 12 * L * d * T * T) * n, "per sequence"),
        },
    ),
    "top-k": (
        top_k,
        {
            "in place": (top_k_in_place, "in place"),
            "fill 0": (lambda z, k: top_k(z, k).nan_to_num(neginf=0.0), "not -inf"),
            "ties dropped": (
                lambda z, k: z.masked_fill(
                    torch.ones_like(z, dtype=torch.bool).scatter(
                        -1, z.topk(min(k, z.shape[-1]), -1).indices, False
                    ),
                    float("-inf"),
                ),
                None,
            ),
            "k smallest": (lambda z, k: -top_k(-z, k), None),
        },
    ),
}

# chapter 4's newer exercises (score-std, prefix-lm-zeros) live in their own test file
from test_exercises_ch4 import CASES_CH4  # noqa: E402

CASES.update(CASES_CH4)

# chapter 2's newer exercises (pairs-that-wrap, rope-same-token, infer-base) likewise
from test_exercises_ch2 import CASES_CH2  # noqa: E402

CASES.update(CASES_CH2)


def test_every_exercise_has_a_right_and_two_wrong_answers():
    # exercises added later are tested in their chapter's tests/test_exercises_chN.py
    assert set(CASES) <= set(exercises.available())
    assert all(len(wrong) >= 2 for _, wrong in CASES.values())


@pytest.mark.parametrize("name", sorted(CASES))
def test_checker_accepts_a_right_answer(name, capsys):
    verdict = exercises.check(name, CASES[name][0], seed=SEED)
    out = capsys.readouterr().out
    assert verdict, out
    assert out.startswith(f"✓ {name}:")


WRONG = [(name, mistake) for name in sorted(CASES) for mistake in CASES[name][1]]


@pytest.mark.parametrize(("name", "mistake"), WRONG, ids=[f"{n}: {m}" for n, m in WRONG])
def test_checker_rejects_a_wrong_answer(name, mistake, capsys):
    answer, words = CASES[name][1][mistake]
    verdict = exercises.check(name, answer, seed=SEED)
    out = capsys.readouterr().out
    assert not verdict, f"the checker of {name!r} accepted the mistake {mistake!r}"
    assert out.startswith(f"✗ {name}:")
    assert "Module(" not in out and "Linear(" not in out  # never a module repr
    if words is not None:
        assert words in out, out


# the block exercises are left out: their inputs are modules, slow to build twice over.
@pytest.mark.parametrize(
    "name",
    [n for n in sorted(CASES) if checking._get(n).inputs is not None and "block" not in n],
)
def test_a_memorised_answer_fails_on_fresh_cases(name, capsys):
    """An answer that replays the outputs of one call fails on the cases of another call."""
    ex = checking._get(name)
    rng = np.random.default_rng(1)
    all_args = [ex.inputs(rng) for _ in range(ex.n_random)] + list(ex.edge_cases.values())
    seen = {_key(args): ex.reference(*comparing._copy(args)) for args in all_args}

    def memorised(*args):
        return seen[_key(args)]

    assert exercises.check(name, memorised, seed=1)  # the cases it memorised
    assert not exercises.check(name, memorised, seed=2)  # fresh cases


def _key(args):
    def one(a):
        if isinstance(a, torch.Tensor):
            return (str(a.dtype), tuple(a.shape), a.detach().numpy().tobytes())
        if isinstance(a, np.ndarray):
            return (str(a.dtype), a.shape, a.tobytes())
        if isinstance(a, torch.nn.Module):
            return tuple(one(t) for t in a.state_dict().values())
        return repr(a)

    return tuple(one(a) for a in args)


@pytest.mark.parametrize(
    ("name", "answer"),
    [
        ("prefix-lm-mask", lambda T, P: prefix_mask(T, P).float()),
        ("prefix-lm-mask", lambda T, P: prefix_mask(T, P).long()),
    ],
    ids=["prefix float", "prefix int64"],
)
def test_right_values_in_the_wrong_dtype_are_told_so_and_no_value_mistake_is_named(
    name, answer, capsys
):
    """The learner review: a correct float mask was told "the transpose" or "prefix one
    token too long", mistakes that equal the right mask on the first edge case."""
    assert not exercises.check(name, answer, seed=SEED)
    out = capsys.readouterr().out
    assert "only the dtype is wrong, the values agree" in out
    named = [m for m in checking._get(name).mistakes if m in out]
    assert all(m.startswith("a float") for m in named), named
