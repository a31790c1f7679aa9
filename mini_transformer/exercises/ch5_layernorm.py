"""Chapter 5's exercises (LayerNorm, residuals): LayerNorm and its folding into a linear
layer, RMSNorm, the LayerNorm Jacobian, parallel and DeepNorm blocks, Adam's first step."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .checking import exercise, random_tensor
from .comparing import close


def _fold_inputs(rng: np.random.Generator) -> tuple:
    d, d_out = int(rng.integers(1, 7)), int(rng.integers(1, 7))
    gamma, beta = 1.0 + random_tensor(rng, d, scale=0.5), random_tensor(rng, d, scale=0.5)
    return gamma, beta, random_tensor(rng, d_out, d), random_tensor(rng, d_out)


def _fold(gamma, beta, weight, bias, rows=False, shift="W beta"):
    # W (gamma * n + beta) + b = (W * gamma) n + (W beta + b): gamma scales W's columns
    w = weight * (gamma[:, None] if rows else gamma)
    b = {"W beta": weight @ beta, "beta": beta, "none": 0.0, "W gb": weight @ (gamma * beta)}
    return w, bias + b[shift]


_g3 = torch.tensor([2.0, 0.5, -1.0], dtype=torch.float64)

exercise(
    "fold-layer-norm",
    "f(gamma, beta, weight, bias) -> (weight2, bias2) such that weight2 @ n + bias2 = "
    "weight @ (gamma * n + beta) + bias for every normalised token n: LayerNorm's gain and "
    "shift folded into the linear layer after it (weight (d_out, d), the others 1-D).",
    inputs=_fold_inputs,
    edge_cases={
        "a square layer": (_g3, -_g3, torch.arange(9.0).double().reshape(3, 3), _g3.abs()),
        "d_out = 2, d = 3": (_g3, _g3 + 1, torch.ones(2, 3).double(), torch.zeros(2).double()),
    },
    mistakes={
        "gamma scaled the rows of weight (weight * gamma[:, None]); it multiplies the input, "
        "so it scales the columns: weight * gamma": dict(rows=True),
        "bias + beta: beta passes through the layer too (weight @ beta + bias)": dict(shift="beta"),
        "beta forgotten (bias2 = bias)": dict(shift="none"),
        "beta scaled by gamma too (weight @ (gamma * beta)): the shift comes after the gain": dict(
            shift="W gb"
        ),
    },
)(_fold)


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention built on PyTorch's own module: attn(h) -> (B, T, d)."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, n_heads, batch_first=True)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        T = h.shape[1]
        future = torch.ones(T, T, dtype=torch.bool).triu(1)  # True = may NOT attend
        return self.mha(h, h, h, attn_mask=future, need_weights=False)[0]


_TUPLE = "attn(h)[0]: here attn returns a tensor, so [0] takes batch element 0 for every batch"


def _block_inputs(rng: np.random.Generator) -> tuple:
    d, seed = 4 * int(rng.integers(1, 5)), int(rng.integers(2**31))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        attn = CausalSelfAttention(d, 2)
        ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        ln1, ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        with torch.no_grad():
            for ln in (ln1, ln2):
                ln.weight.normal_(1.0, 0.3)
                ln.bias.normal_(0.0, 0.3)
        x = 2.0 * torch.randn(int(rng.integers(2, 4)), int(rng.integers(1, 7)), d)  # B >= 2
    return x, attn, ffn, ln1, ln2


def _rms(x, g, eps, center=False, l2=False, eps_outside=False):
    # x / sqrt(mean x^2 + eps) * gain: no mean subtracted, no shift
    if center:
        x = x - x.mean(-1, keepdim=True)
    ms = (x * x).sum(-1, keepdim=True) if l2 else (x * x).mean(-1, keepdim=True)
    return g * x / (ms.sqrt() + eps if eps_outside else (ms + eps).sqrt())


def _rms_inputs(rng: np.random.Generator) -> tuple:
    B, T, d = int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(2, 9))
    x = random_tensor(rng, B, T, d, scale=float(rng.uniform(0.2, 4))) + float(rng.normal(0, 2))
    return x, 1.0 + random_tensor(rng, d, scale=0.5), float(rng.choice([1e-6, 1e-2, 0.5]))


exercise(
    "rms-norm",
    "f(x, gain, eps) -> RMSNorm of x (..., d): x / sqrt(mean(x^2 over d) + eps) * gain, "
    "with no mean subtraction and no shift.",
    inputs=_rms_inputs,
    edge_cases={
        "eps = 1 (where eps goes matters)": (
            torch.tensor([[3.0, 4.0]]).double(),
            torch.ones(2).double(),
            1.0,
        ),
        "a token with a large mean": (
            torch.tensor([[10.0, 11.0, 12.0]]).double(),
            torch.ones(3).double(),
            1e-6,
        ),
    },
    mistakes={
        "subtracted the mean: that is LayerNorm without beta": dict(center=True),
        "divided by the L2 norm (the 1/d inside the root is missing)": dict(l2=True),
        "eps added outside the square root": dict(eps_outside=True),
    },
)(_rms)


def _ln_jac(x, eps, drop_mean=False, drop_scale=False, unbiased=False, outer_d=1, sign=1):
    # J = (I - 1/d - y y^T / d) / sigma with y = (x - mean) / sigma, sigma = sqrt(var + eps):
    # the mean gives the -1/d term, the standard deviation the -y y^T / d term
    d, sigma = x.shape[0], torch.sqrt(x.var(unbiased=unbiased) + eps)
    y = (x - x.mean()) / sigma
    j = torch.eye(d, dtype=x.dtype) - (0.0 if drop_mean else 1.0 / d)
    return (j - (0.0 if drop_scale else sign * torch.outer(y, y) / d**outer_d)) / sigma


exercise(
    "ln-jacobian",
    "f(x, eps) -> the (d, d) Jacobian J[i, j] = d y_i / d x_j of y = (x - mean(x)) / "
    "sqrt(var(x) + eps) (biased variance, no gain or shift) for a vector x of shape (d,).",
    inputs=lambda rng: (
        random_tensor(rng, int(rng.integers(2, 9)), scale=float(rng.uniform(0.3, 3))),
        float(rng.choice([1e-5, 0.1])),
    ),
    edge_cases={  # d = 4 first: at d = 2 many wrong formulas are a multiple of the right one
        "d = 4": (torch.tensor([1.0, 3.0, -2.0, 0.5], dtype=torch.float64), 1e-5),
        "d = 2": (torch.tensor([1.0, 3.0], dtype=torch.float64), 1e-5),
    },
    mistakes={
        "the mean treated as a constant (no -1/d term)": dict(drop_mean=True),
        "the standard deviation treated as a constant (no -y y^T / d term)": dict(drop_scale=True),
        "unbiased variance": dict(unbiased=True),
        "both the mean and the standard deviation treated as constants (J = I / sigma: the "
        "-1/d and -y y^T / d terms are missing)": dict(drop_mean=True, drop_scale=True),
        "eps left out of sigma = sqrt(var + eps)": lambda x, e: _ln_jac(x, 0.0),
        "the 1/d missing on the y y^T term (d sigma / d x_j = y_j / d)": dict(outer_d=0),
        "the y y^T / d term with the wrong sign": dict(sign=-1),
    },
    compare=close(same_dtype=True),  # float64 x: a float64 J (as softmax-jacobian)
)(_ln_jac)


# --- Beyond the text: a parallel block, a DeepNorm block, Adam's first step ------------------


@exercise(
    "parallel-block",
    "f(x, attn, ffn, ln) -> one parallel Transformer block (GPT-J, PaLM): both sub-layers read "
    "the same normalised input, x + attn(ln(x)) + ffn(ln(x)); attn(h) returns a tensor like h.",
    inputs=lambda rng: _block_inputs(rng)[:4],
    mistakes={
        "sequential Pre-LN: the FFN read h = x + attn(ln(x)), not x": lambda x, a, f, ln: (
            lambda h: h + f(ln(h))
        )(x + a(ln(x))),
        "no residual connection: attn(ln(x)) + ffn(ln(x))": lambda x, a, f, ln: a(ln(x)) + f(ln(x)),
        "the FFN read x, not ln(x)": lambda x, a, f, ln: x + a(ln(x)) + f(x),
        "Post-LN style: ln(x + attn(x) + ffn(x))": lambda x, a, f, ln: ln(x + a(x) + f(x)),
        _TUPLE: lambda x, a, f, ln: x + a(ln(x))[0] + f(ln(x)),
    },
    compare=close(rtol=1e-4, atol=1e-5),
    n_random=6,
)
def _parallel_block(x, attn, ffn, ln):
    h = ln(x)  # one LayerNorm, read by both sub-layers
    return x + attn(h) + ffn(h)


def _deepnorm_inputs(rng: np.random.Generator) -> tuple:
    x, attn, ffn, ln1, ln2 = _block_inputs(rng)
    return x, attn, ffn, ln1, ln2, float(rng.choice([1.5, 2.0, 3.0]))


@exercise(
    "deepnorm-block",
    "f(x, attn, ffn, ln1, ln2, alpha) -> one DeepNorm block (Post-LN with an up-weighted "
    "shortcut): h = ln1(alpha * x + attn(x)), then ln2(alpha * h + ffn(h)).",
    inputs=_deepnorm_inputs,
    mistakes={
        "alpha on the sub-layer instead of the shortcut: ln(x + alpha * "
        "G(x))": lambda x, a, f, l1, l2, al: (lambda h: l2(h + al * f(h)))(l1(x + al * a(x))),
        "alpha outside the LayerNorm: alpha * ln(x + G(x))": lambda x, a, f, l1, l2, al: (
            lambda h: al * l2(h + f(h))
        )(al * l1(x + a(x))),
        "alpha forgotten: a plain Post-LN block": lambda x, a, f, l1, l2, al: (
            lambda h: l2(h + f(h))
        )(l1(x + a(x))),
        "alpha only in the first sub-layer": lambda x, a, f, l1, l2, al: (lambda h: l2(h + f(h)))(
            l1(al * x + a(x))
        ),
        _TUPLE: lambda x, a, f, l1, l2, al: (lambda h: l2(al * h + f(h)))(l1(al * x + a(x)[0])),
    },
    compare=close(rtol=1e-4, atol=1e-5),
    n_random=6,
)
def _deepnorm_block(x, attn, ffn, ln1, ln2, alpha):
    h = ln1(alpha * x + attn(x))  # LN(alpha x + G(x)), Wang et al. 2022
    return ln2(alpha * h + ffn(h))


_ADAM_SHAPE, _ADAM_GRAD_NORM, _ADAM_LR = (32, 32), 1e-3, 3e-3


def warm_up_optimizers() -> None:
    """An optimizer's first construction imports ``torch._dynamo`` (seconds): done here, in the
    reader's process, before the checking child starts the reader's clock."""
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


@exercise(
    "adam-first-step",
    "A number: the Frobenius norm of Adam's first update of a 32 x 32 weight matrix whose "
    "gradient has Frobenius norm 1e-3 (every entry non-zero), at lr = 3e-3 with PyTorch's "
    "default betas and eps.",
    mistakes={
        "lr times the gradient's norm: plain gradient descent, not Adam": _ADAM_LR
        * _ADAM_GRAD_NORM,
        "lr: Adam moves each *entry* by about lr, not the whole matrix": _ADAM_LR,
        "lr times the number of entries: norms add in squares": _ADAM_LR * 32 * 32,
        "no bias correction: m = (1 - b1) g and v = (1 - b2) g^2 must be divided by 1 - b1 "
        "and 1 - b2 at step 1": _ADAM_LR * 32 * 0.1 / 0.001**0.5,
    },
    compare=close(rtol=0.02, atol=0.0),
    hint="write the first step for one entry: after the bias correction m = g and v = g^2. "
    "How far does that entry move, and how do 32 x 32 such moves add up in the norm?",
    explanation=(
        "Adam's first step is lr * m / (sqrt(v) + eps) with m = (1 - b1) g and v = (1 - b2) g^2, "
        "bias-corrected to m = g and v = g^2: every entry moves by lr * g / |g| = lr * sign(g) "
        "(eps = 1e-8 is far below |g| ~ 3e-5 here). The update's norm is lr * sqrt(32 * 32) = "
        "3e-3 * 32 = 0.096, whatever the gradient's size as long as its entries are well above "
        "eps: a gradient 1,000 times larger gives the same first step. That is why Xiong et "
        "al.'s gradient-size argument does not carry over to Adam directly (section 5.10)."
    ),
    warm_up=warm_up_optimizers,  # for an answer that runs an optimizer
)
def _adam_first_step(gradient: np.ndarray | None = None) -> float:
    # bias-corrected m / (sqrt(v) + eps) = g / (|g| + eps) per entry (tests: = torch's Adam)
    g = np.random.default_rng(0).standard_normal(_ADAM_SHAPE) if gradient is None else gradient
    g = g * (_ADAM_GRAD_NORM / np.linalg.norm(g))
    return float(np.linalg.norm(_ADAM_LR * g / (np.abs(g) + 1e-8)))
