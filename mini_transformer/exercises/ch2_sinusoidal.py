"""Chapter 2's exercises (sinusoidal encoding): the encoding, near repeats, RoPE by halves,
two checked predictions (pairs that wrap, RoPE's symmetric case), the base of a stored table."""

from __future__ import annotations

import math

import numpy as np

from .ch1_position import _circles
from .checking import exercise
from .comparing import close, exact_int


def _omega(d_model: int, base: float = 10000.0, exponent: int = 2) -> np.ndarray:
    """The d_model/2 angular frequencies base^(-2i/d_model), i = 0..d_model/2 - 1."""
    return np.array([base ** (-exponent * i / d_model) for i in range(d_model // 2)])


def _pe(n: int, d_model: int, base: float = 10000.0, exponent: int = 2, **flags) -> np.ndarray:
    """The paper's encoding, interleaved layout: sin in column 2i, cos in column 2i+1 (chapter
    1's circle code at the speeds omega_i; ``flags`` give its mistakes)."""
    return _circles(n, _omega(d_model, base, exponent), **flags)


def _blog_slip(pos: np.ndarray, j: np.ndarray, d_model: int) -> np.ndarray:
    """The column-index slip: column j at speed 10000^(-2j/d_model), sin in even j, cos in odd."""
    angle = pos * 10000.0 ** (-2 * j / d_model)
    return np.where(j % 2 == 0, np.sin(angle), np.cos(angle))


def _even(rng: np.random.Generator, high: int = 17) -> int:
    return 2 * int(rng.integers(1, high))


exercise(
    "sinusoidal-encoding",
    "f(n_positions, d_model) -> the (n_positions, d_model) sinusoidal encoding, paper layout "
    "(sin in even columns, cos in odd columns, base 10000).",
    inputs=lambda rng: (int(rng.integers(1, 60)), _even(rng)),
    edge_cases={"one position": (1, 4), "two channels": (7, 2)},
    mistakes={
        "the concat layout (all sines, then all cosines)": dict(concat=True),
        "cos before sin in each pair (the paper puts sin in the even column 2i)": dict(swap=True),
        "exponent i/d_model instead of 2i/d_model (pair i's frequency is base^(-2i/d_model))": dict(
            exponent=1
        ),
        "the blog's slip: column j's exponent 2j/d_model (use 2*(j//2): both columns of a pair "
        "share one frequency)": lambda n, d: _blog_slip(np.arange(n)[:, None], np.arange(d), d),
    },
)(_pe)


def _near_repeat(d_model, base, n, tol, shift=0, exponent=2, argmax=False) -> int | None:
    pe = _pe(n, d_model, base, exponent)
    near = np.linalg.norm(pe[1:] - pe[0], axis=1) < tol  # positions 1..n-1
    hits = np.flatnonzero(near)
    return int(np.argmax(near)) + 1 if argmax else int(hits[0]) + 1 - shift if len(hits) else None


exercise(
    "near-repeat",
    "f(d_model, base, n, tol) -> the smallest pos in 1..n-1 with ||PE[pos] - PE[0]|| < tol "
    "for the sinusoidal encoding with that base (rows 0..n-1), or None if there is none.",
    inputs=lambda rng: (
        _even(rng, 5),
        float(10 ** rng.uniform(0.5, 4)),
        int(rng.integers(2, 3000)),
        float(rng.uniform(0.05, 0.6)),
    ),
    edge_cases={
        "d_model 2, the first return": (2, 10000.0, 400, 0.01),
        "no repeat in range (the first one is at pos = n, one past it)": (2, 10000.0, 333, 0.01),
        "one position": (4, 100.0, 1, 0.5),
    },
    mistakes={
        "an index into PE[1:], one less than the position": dict(shift=1),
        "exponent i/d_model instead of 2i/d_model": dict(exponent=1),
        "searched from position 0, which always repeats itself (distance 0)": lambda *a: (
            None if _near_repeat(*a) is None else 0
        ),
        "0 for 'no repeat': return None when no position qualifies": lambda *a: (
            _near_repeat(*a) if _near_repeat(*a) is not None else 0
        ),
        "searched pos = 1..n, one too far: PE has rows 0..n-1": lambda d, b, n, t: _near_repeat(
            d, b, n + 1, t
        ),
        "argmax of an all-False array is 0, so 'no hit' came back as position 1: check that "
        "there is a hit (None when there is none)": dict(argmax=True),
    },
    compare=exact_int,
)(_near_repeat)


def _rope_half(x, pos, base, sign=1, interleaved=False, exponent=2, stale=False) -> np.ndarray:
    # (u, v) -> (u cos a - v sin a, u sin a + v cos a), a = pos * base^(-2i/d)
    d = x.shape[1]
    ang = np.asarray(pos, dtype=np.float64)[:, None] * _omega(d, base, exponent)[None, :]
    c, s = np.cos(ang), sign * np.sin(ang)
    u, v = (slice(0, d, 2), slice(1, d, 2)) if interleaved else (slice(0, d // 2), slice(d // 2, d))
    out = np.empty_like(x, dtype=np.float64)
    out[:, u] = x[:, u] * c - x[:, v] * s
    out[:, v] = (out if stale else x)[:, u] * s + x[:, v] * c
    return out


def _rope_inputs(rng: np.random.Generator) -> tuple:
    t, d = int(rng.integers(1, 9)), _even(rng, 9)
    return (rng.normal(size=(t, d)), rng.integers(0, 500, size=t), float(rng.choice([100.0, 1e4])))


exercise(
    "rope-half",
    "f(x, pos, base) -> RoPE in the half-split (concat) layout: for x of shape (T, d), rotate "
    "each pair (x[:, i], x[:, i + d/2]) by the angle +pos * base^(-2i/d), counter-clockwise "
    "(RoFormer's sign; P.RotaryEmbedding rotates by -pos * omega, so compare it with -pos).",
    inputs=_rope_inputs,
    edge_cases={"position 0 (unchanged)": (np.arange(4.0)[None, :], np.array([0]), 1e4)},
    mistakes={
        "adjacent pairs (2i, 2i+1): the interleaved layout, not half-split": dict(interleaved=True),
        "rotated clockwise (by -pos * theta): that is the book's R(pos), the sign of "
        "P.RotaryEmbedding; "
        "this exercise asks for RoFormer's counter-clockwise sign": dict(sign=-1),
        "exponent i/d instead of 2i/d: the frequencies fall too slowly": dict(exponent=1),
        "the second half computed from the already rotated first half: keep the original "
        "x[:, :d/2] for both halves (a copy, or both halves in one expression)": dict(stale=True),
    },
)(_rope_half)


# --- checked predictions and the inverse problem (issue 25) ---------------------------


exercise(
    "pairs-that-wrap",
    "A prediction: for d_model = 128 and base 10000, how many of the 64 pairs complete a full "
    "turn within 512 positions (wavelength 2 pi / omega_i below 512)? An integer.",
    mistakes={
        "30 is the largest pair index that wraps; the pairs are i = 0..30, 31 of them": 30,
        "half of the 64 pairs: the fraction that wraps is log(512 / 2 pi) / log(10000), "
        "just under one half": 32,
    },
    compare=exact_int,
    hint="pair i turns once every 2 pi / omega_i = 2 pi * 10000^(2i/128) positions: solve "
    "2 pi * 10000^(2i/128) < 512 for i, and remember that i counts from 0.",
    explanation=(
        "lambda_i = 2 pi * 10000^(2i/128) is below 512 while 2i/128 is below "
        "log10(512 / (2 pi)) / 4 = 0.478 (the 4 is log10 of the base 10000), that is for "
        "i = 0..30: 31 pairs. That threshold 0.478 on 2i/d_model depends only on the base and "
        "the sequence length, not on d_model (the same 10000 and 512 in both places), "
        "which is why appendix A.1 found 48% of the 256 pairs wrapping at d_model = 512."
    ),
)(lambda: sum(1 for w in _omega(128) if 2 * math.pi / w < 512))


def _bool_answer(expected: bool, got) -> str | None:
    if not isinstance(got, (bool, np.bool_)):
        return f"expected an answer True or False, got {got!r}"
    return None if bool(got) == expected else "wrong"


exercise(
    "rope-same-token",
    "A prediction: with RoPE, W_Q = W_K and the same token at both positions (q = k before "
    "rotation), is the score of the key k positions after the query equal to the score of "
    "the key k positions before it, for every k? True or False.",
    mistakes={
        "R(k) differs from R(-k), but the score q^T R(k) q does not see the difference": False
    },
    compare=_bool_answer,
    hint="take one pair: q_i^T R_i(k) q_i with R_i(k) the 2 x 2 rotation by k omega_i. Write "
    "it out with cos and sin: which term would change sign with k, and what is it here?",
    explanation=(
        "Each pair contributes q_i^T R_i(k) q_i = |q_i|^2 cos(k w_i): the sine terms cancel "
        "because q_i is rotated against itself. The score is sum_i |q_i|^2 cos(k w_i), even "
        "in k. The same holds whenever query and key are parallel within every pair; RoPE tells "
        "before from after only for generic projections and content."
    ),
)(lambda: True)


def _infer_base_inputs(rng: np.random.Generator) -> tuple:
    d, base = 2 * int(rng.integers(2, 17)), float(10 ** rng.uniform(1, 5))
    return (_pe(int(rng.integers(2, 40)), d, base),)


def _base_from(pe: np.ndarray, pair: int = 1, swap: bool = False, exponent: int = 2) -> float:
    # position 1, pair 1: (sin w_1, cos w_1) with w_1 = base^(-2/d_model) < pi
    d = pe.shape[1]
    s, c = pe[1, 2 * pair], pe[1, 2 * pair + 1]
    w = math.atan2(c, s) if swap else math.atan2(s, c)
    return float(w ** (-d / (exponent * pair))) if pair else 1.0


exercise(
    "infer-base",
    "f(pe) -> the base of a sinusoidal encoding table pe of shape (n, d_model), paper layout "
    "(sin in column 2i, cos in 2i+1), n >= 2, d_model >= 4.",
    inputs=_infer_base_inputs,
    edge_cases={
        "the paper's base, two positions": (_pe(2, 4, 10000.0),),
        "a small base": (_pe(5, 8, 10.0),),
        "a large base, d_model 32": (_pe(3, 32, 1e6),),
    },
    mistakes={
        "read from pair 0, whose frequency is 1 for every base": dict(pair=0),
        "atan2(cos, sin): the angle pi/2 - omega, not omega": dict(swap=True),
        "exponent i/d_model instead of 2i/d_model: the base squared": dict(exponent=1),
    },
    compare=close(rtol=1e-6, atol=0.0),
)(_base_from)
