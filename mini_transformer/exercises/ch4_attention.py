"""Chapter 4's exercises (attention): masked softmax and its log, the spread of q . k (a
prediction), the prefix-LM mask, the softmax Jacobian, the zeros of a prefix-LM's Jacobian (a
prediction), the scaled scores of h heads (the head split and the 1/sqrt(d_head))."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import torch

from .checking import exercise, random_tensor
from .comparing import close, exact_int


def _bool_mask(T: int, allowed) -> torch.Tensor:
    """The (T, T) bool mask with ``allowed(i, j)`` at query i, key j (written out, no torch ops)."""
    return torch.tensor(
        [[bool(allowed(i, j)) for j in range(T)] for i in range(T)], dtype=torch.bool
    ).reshape(T, T)


def _softmax_rows(scores: torch.Tensor, mask: torch.Tensor, log: bool = False) -> torch.Tensor:
    """Row by row: softmax (or its log) over the allowed keys (shifted by their maximum), 0
    (log 0 = -inf) elsewhere."""
    out = torch.full(scores.shape, -math.inf if log else 0.0, dtype=torch.float64)
    for i in range(scores.shape[0]):
        allowed = mask[i]
        if allowed.any():
            s = scores[i, allowed].double() - scores[i, allowed].double().max()
            out[i, allowed] = s - s.exp().sum().log() if log else s.exp() / s.exp().sum()
    return out.to(scores.dtype)


def _masked_softmax_inputs(rng: np.random.Generator) -> tuple:
    T_q, T_k = (int(n) for n in rng.integers(1, 7, size=2))
    dtype = torch.float32 if rng.random() < 0.5 else torch.float64
    scores = random_tensor(rng, T_q, T_k, scale=3.0, dtype=dtype)
    mask = torch.from_numpy(rng.random((T_q, T_k)) < 0.6)
    if rng.random() < 0.5:
        mask[int(rng.integers(T_q))] = False
    return scores, mask


_FIXED_FILL = (  # a fill like -1e4 loses to allowed scores below it, in float32 and in float16
    "a fixed fill (-1e4): allowed scores below it lose to the masked ones; fill with "
    "torch.finfo(scores.dtype).min"
)
_T, _F = True, False
_LARGE = {  # allowed scores far below zero (float16: 16 apart, its spacing there)
    "allowed scores near -20000 in float32": (
        torch.tensor([[-20000.0, -20001.0, 5.0], [1.0, 2.0, 3.0]]),
        torch.tensor([[_T, _T, _F], [_F, _F, _F]]),
    ),
    "float16 scores near -20000, with a fully masked row": (
        torch.tensor([[-20000.0, -20016.0, 0.0], [0.5, -1.0, 2.0]], dtype=torch.float16),
        torch.tensor([[_T, _T, _F], [_F, _F, _F]]),
    ),
}


exercise(
    "masked-log-softmax",
    "f(scores, mask) -> the log of the masked softmax, computed without NaN: log-softmax over "
    "the True entries of each row, -inf (log 0) at the False ones and along a fully masked "
    "row; same dtype as scores.",
    inputs=_masked_softmax_inputs,
    edge_cases={
        "a fully masked row": (
            torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]]),
            torch.tensor([[_T, _F, _T], [_F, _F, _F]]),
        ),
        "float16, with a fully masked row": (
            torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], dtype=torch.float16),
            torch.tensor([[_T, _F, _T], [_F, _F, _F]]),
        ),
        "an allowed score 200 below its row's maximum (its probability underflows)": (
            torch.tensor([[0.0, -200.0, 1.0], [3.0, 1.0, -1.0]]),
            torch.tensor([[_T, _T, _F], [_T, _T, _T]]),
        ),
        **_LARGE,
    },
    mistakes={
        "masked scores filled with -inf: along a fully masked row, -inf - (-inf) = "
        "NaN": lambda s, m: s.masked_fill(~m, -math.inf).log_softmax(-1),
        "the masked entries left finite: a probability of 0 has log -inf": lambda s, m: (
            s.masked_fill(~m, torch.finfo(s.dtype).min).log_softmax(-1)
        ),
        _FIXED_FILL: lambda s, m: (
            s.masked_fill(~m, -1e4).log_softmax(-1).masked_fill(~m, -math.inf)
        ),
        "the log of the softmax: a probability that underflows to 0 gives -inf where the "
        "log-probability is finite; subtract the logsumexp instead": lambda s, m: _softmax_rows(
            s, m
        ).log(),
    },
    compare=close(atol=0.01, same_dtype=True),  # float32 scores near -20000 are 0.002 apart
)(partial(_softmax_rows, log=True))


def _prefix(T, P, plus=0, prefix_sees_all=False):
    return _bool_mask(T, lambda i, j: j <= i or j < P + plus or (prefix_sees_all and i < P))


exercise(
    "prefix-lm-mask",
    "f(T, n_prefix) -> the (T, T) bool mask of a prefix-LM: the first n_prefix tokens (the "
    "prompt) are seen by every query, the rest causally (key j visible from i when j <= i).",
    inputs=lambda rng: (lambda T: (T, int(rng.integers(0, T + 1))))(int(rng.integers(1, 12))),
    edge_cases={
        "no prefix (plain causal)": (4, 0),
        "all prefix (bidirectional)": (4, 4),
        "T = 5, prefix 2": (5, 2),
    },
    mistakes={
        "prefix one token too long (j <= n_prefix)": dict(plus=1),
        "prefix queries see every key: the prompt reads the answer": dict(prefix_sees_all=True),
        "the transpose (queries in columns)": lambda T, P: _prefix(T, P).T.contiguous(),
    },
    compare=close(same_dtype=True),
)(_prefix)


def _jacobian_inputs(rng: np.random.Generator) -> tuple:
    return (random_tensor(rng, int(rng.integers(1, 9)), scale=float(rng.choice([0.5, 3.0, 10.0]))),)


def _jacobian(s, unstable=False, sign=1, outer=True, diagonal_only=False, mean=False):
    # J[i, j] = d p_i / d s_j = p_i (delta_ij - p_j): J = diag(p) - p p^T
    e = s.exp() if unstable else (s - (s.mean() if mean else s.max())).exp()  # exp(800) = inf
    p = e / e.sum()
    if diagonal_only:
        return torch.diag(p * (1 - p))
    return sign * (torch.diag(p) - (torch.outer(p, p) if outer else 0))


exercise(
    "softmax-jacobian",
    "f(s) -> the (n, n) Jacobian J[i, j] = d p_i / d s_j of p = softmax(s) for a score vector "
    "s of shape (n,).",
    inputs=_jacobian_inputs,
    edge_cases={
        "one score (J = 0)": (torch.tensor([2.0], dtype=torch.float64),),
        "saturated scores": (torch.tensor([40.0, 0.0, -3.0], dtype=torch.float64),),
        "large scores (exp(800) overflows)": (
            torch.tensor([800.0, 798.0, 0.0], dtype=torch.float64),
        ),
        "scores spread both ways": (torch.tensor([1000.0, -1000.0], dtype=torch.float64),),
    },
    mistakes={
        "the mean subtracted, not the maximum: exp(s - mean) still overflows when the scores "
        "spread both ways ([1000, -1000])": dict(mean=True),
        "softmax without subtracting the maximum: exp overflows to inf, inf / inf = NaN": dict(
            unstable=True
        ),
        "sign flipped: p p^T - diag(p)": dict(sign=-1),
        "diagonal only: diag(p (1 - p))": dict(diagonal_only=True),
        "diag(p) alone (the -p p^T term forgotten)": dict(outer=False),
    },
    compare=close(same_dtype=True),  # float64 scores: a float32 J loses p_i below 1e-38
)(_jacobian)


_STD_D = 400


exercise(
    "score-std",
    f"a prediction: q and k have d_k = {_STD_D} independent components of mean 0 and variance "
    "1: what is the standard deviation of q . k, unscaled? (an integer)",
    mistakes={
        "the variance d_k: the standard deviation is its square root": _STD_D,
        "the scaled score's: divided by sqrt(d_k) the spread is 1, unscaled it is sqrt(d_k)": 1,
    },
    compare=exact_int,
    hint="q . k sums d_k independent products q_r k_r, each of mean 0 and variance 1: "
    "what do the variances of independent terms do when they are added?",
    explanation=(
        f"the variances add: Var(q . k) = d_k = {_STD_D}, so the standard deviation is "
        f"sqrt({_STD_D}) = {math.isqrt(_STD_D)}; divided by sqrt(d_k) it is 1 (section 4.3)."
    ),
)(lambda: math.isqrt(_STD_D))


_ZEROS_T, _ZEROS_PREFIX = 10, 4


exercise(
    "prefix-lm-zeros",
    f"a prediction: one prefix-LM attention layer with T = {_ZEROS_T} and n_prefix = "
    f"{_ZEROS_PREFIX}: how many of the T^2 blocks d out_t / d x_t' of its Jacobian are exactly "
    "zero? (an integer)",
    mistakes={
        "the plain causal count T(T - 1)/2: the prompt keys above the diagonal are visible too": (
            _ZEROS_T * (_ZEROS_T - 1) // 2
        ),
        "the number of non-zero blocks (the visible pairs), not the zero ones": (
            _ZEROS_T**2
            - (_ZEROS_T * (_ZEROS_T - 1) // 2 - _ZEROS_PREFIX * (_ZEROS_PREFIX - 1) // 2)
        ),
        "the causal count of visible pairs T(T + 1)/2": _ZEROS_T * (_ZEROS_T + 1) // 2,
    },
    compare=exact_int,
    hint="a block d out_t / d x_t' is exactly zero when query t cannot see key t' at all. "
    "Draw the 10 x 10 mask: which cells does the prompt open above the diagonal?",
    explanation=(
        "a block d out_t / d x_t' is zero exactly where the mask hides key t' from query t "
        "(query t always sees itself). The causal mask hides T(T - 1)/2 = 45 pairs; the prompt "
        "makes the n_prefix(n_prefix - 1)/2 = 6 prompt pairs above the diagonal visible, so "
        "45 - 6 = 39 blocks are zero."
    ),
)(lambda: int((~_prefix(_ZEROS_T, _ZEROS_PREFIX)).sum()))


def _head_scores_inputs(rng: np.random.Generator) -> tuple:
    B, T_q, T_k, h, d_head = (int(n) for n in rng.integers(1, 5, size=5))
    q, k = (random_tensor(rng, B, T, h * d_head) for T in (T_q, T_k))
    return q, k, h


def _head_scores(q, k, h, split="view", scale="head"):
    B, d = q.shape[0], q.shape[-1]
    views = {  # (B, T, d) -> (B, h, T, d_head); "reshape" is 4.8's bug, "interleaved" takes
        "view": lambda t: t.reshape(B, -1, h, d // h).transpose(1, 2),  # every h-th feature
        "reshape": lambda t: t.reshape(B, h, -1, d // h),
        "interleaved": lambda t: t.reshape(B, -1, d // h, h).permute(0, 3, 1, 2),
    }
    scores = views[split](q) @ views[split](k).transpose(-2, -1)
    return scores / {"head": math.sqrt(d // h), "model": math.sqrt(d), "none": 1}[scale]


exercise(
    "head-scores",
    "f(q, k, h) -> the (B, h, T_q, T_k) scaled scores of h heads, from queries q (B, T_q, d_model) "
    "and keys k (B, T_k, d_model); head i takes features i * d_head to (i + 1) * d_head - 1.",
    inputs=_head_scores_inputs,
    edge_cases={
        "two heads of one feature": (torch.tensor([[[1.0, 2.0]]]), torch.tensor([[[3.0, 1]]]), 2),
        "B = 1, T = 3, 2 heads of 2": (torch.arange(12.0).reshape(1, 3, 4),) * 2 + (2,),
    },
    mistakes={
        "reshape to (B, h, T, d_head) without the transpose: each 'head' is a run of memory "
        "spanning positions (section 4.8)": dict(split="reshape"),
        "interleaved heads (view(B, T, d_head, h)): head i must take a block of d_head "
        "consecutive features": dict(split="interleaved"),
        "divided by sqrt(d_model): each head's dot product has d_head terms, so its variance "
        "is d_head; divide by sqrt(d_head)": dict(scale="model"),
        "unscaled: divide by sqrt(d_head) (section 4.3)": dict(scale="none"),
    },
    compare=close(same_dtype=True),
)(_head_scores)
