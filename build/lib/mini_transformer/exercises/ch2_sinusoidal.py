"""Chapter 2's exercises (sinusoidal encoding): the encoding, the dot product as a function
of the offset, the rotation matrix, near repeats, RoPE by halves.

One block per exercise: the reference (written from the formula, independently of
the package's modules), its random inputs, edge cases and named mistakes. Importing
this module registers its exercises (:func:`~mini_transformer.exercises.checking.exercise`).
"""

from __future__ import annotations

import math

import numpy as np

from .checking import exact_int, exercise


def _omega(d_model: int, base: float = 10000.0) -> np.ndarray:
    """The d_model/2 angular frequencies base^(-2i/d_model), i = 0..d_model/2 - 1."""
    return np.array([base ** (-2 * i / d_model) for i in range(d_model // 2)])


def _pe(n: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The paper's encoding, interleaved layout: sin in column 2i, cos in column 2i+1."""
    pe = np.zeros((n, d_model))
    for pos in range(n):
        for i, w in enumerate(_omega(d_model, base)):
            pe[pos, 2 * i], pe[pos, 2 * i + 1] = math.sin(pos * w), math.cos(pos * w)
    return pe


def _even(rng: np.random.Generator, high: int = 17) -> int:
    return 2 * int(rng.integers(1, high))


@exercise(
    "sinusoidal-encoding",
    "f(n_positions, d_model) -> the (n_positions, d_model) sinusoidal encoding, paper layout "
    "(sin in even columns, cos in odd columns, base 10000).",
    inputs=lambda rng: (int(rng.integers(1, 60)), _even(rng)),
    edge_cases={"one position": (1, 4), "two channels": (7, 2)},
    mistakes={
        "the concat layout (all sines, then all cosines)": lambda n, d: np.concatenate(
            [_pe(n, d)[:, 0::2], _pe(n, d)[:, 1::2]], axis=1
        )
    },
)
def _sinusoidal_encoding(n_positions: int, d_model: int) -> np.ndarray:
    return _pe(n_positions, d_model)


@exercise(
    "sinusoidal-dot-offset",
    "f(k, d_model) -> PE[pos] . PE[pos + k] (a float) for the paper's encoding, without "
    "building the encoding.",
    inputs=lambda rng: (int(rng.integers(-200, 201)), _even(rng)),
    edge_cases={"offset 0": (0, 8), "negative offset": (-5, 6), "two channels": (3, 2)},
    mistakes={
        "sines instead of cosines": lambda k, d: float(np.sin(k * _omega(d)).sum()),
        "one frequency per column (d_model terms with exponent 2i/d_model for every "
        "column i)": lambda k, d: float(
            sum(math.cos(k * 10000.0 ** (-2 * i / d)) for i in range(d))
        ),
        "exponent i/d_model instead of 2i/d_model": lambda k, d: float(
            sum(math.cos(k * 10000.0 ** (-i / d)) for i in range(d // 2))
        ),
    },
)
def _dot_offset(k: int, d_model: int) -> float:
    return float(sum(math.cos(k * w) for w in _omega(d_model)))


def _rotation(offset: int, d_model: int, sign: int = 1) -> np.ndarray:
    r = np.zeros((d_model, d_model))
    for i, w in enumerate(_omega(d_model)):
        c, s = math.cos(offset * w), sign * math.sin(offset * w)
        r[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
    return r


@exercise(
    "rotation-matrix",
    "f(offset, d_model) -> the (d_model, d_model) matrix R with PE[pos + offset] = R @ PE[pos] "
    "for every pos (paper layout, base 10000).",
    inputs=lambda rng: (int(rng.integers(-100, 101)), _even(rng)),
    edge_cases={"offset 0 (the identity)": (0, 4), "offset 1, two channels": (1, 2)},
    mistakes={
        "the transpose R(-offset): rotates the wrong way (PE[pos - offset])": lambda k, d: (
            _rotation(k, d, sign=-1)
        ),
        "frequencies in reverse order (slowest pair first)": lambda k, d: _rotation(k, d)[
            ::-1, ::-1
        ].copy(),
    },
)
def _rotation_matrix(offset: int, d_model: int) -> np.ndarray:
    # PE[pos + k] in block i from PE[pos]: sin(a + b) = sin a cos b + cos a sin b,
    # cos(a + b) = cos a cos b - sin a sin b.
    return _rotation(offset, d_model)


def _near_repeat(d_model, base, n, tol, shift=0, exponent=2):
    pe = np.zeros((n, d_model))
    w = np.array([base ** (-exponent * i / d_model) for i in range(d_model // 2)])
    pe[:, 0::2], pe[:, 1::2] = np.sin(np.arange(n)[:, None] * w), np.cos(np.arange(n)[:, None] * w)
    hits = np.flatnonzero(np.linalg.norm(pe[1:] - pe[0], axis=1) < tol)
    return int(hits[0]) + 1 - shift if len(hits) else None


def _near_repeat_inputs(rng: np.random.Generator) -> tuple:
    return (
        _even(rng, 5),
        float(10 ** rng.uniform(0.5, 4)),
        int(rng.integers(2, 3000)),
        float(rng.uniform(0.05, 0.6)),
    )


@exercise(
    "near-repeat",
    "f(d_model, base, n, tol) -> the smallest pos in 1..n-1 with ||PE[pos] - PE[0]|| < tol "
    "for the sinusoidal encoding with that base, or None if there is none.",
    inputs=_near_repeat_inputs,
    edge_cases={
        "d_model 2, the first return": (2, 10000.0, 400, 0.01),
        "no repeat in range": (2, 10000.0, 300, 0.01),
        "one position": (4, 100.0, 1, 0.5),
    },
    mistakes={
        "an index into PE[1:], one less than the position": lambda d, b, n, t: _near_repeat(
            d, b, n, t, shift=1
        ),
        "exponent i/d_model instead of 2i/d_model": lambda d, b, n, t: _near_repeat(
            d, b, n, t, exponent=1
        ),
    },
    compare=exact_int,
)
def _near_repeat_ref(d_model: int, base: float, n: int, tol: float) -> int | None:
    pe = _pe(n, d_model, base)
    for pos in range(1, n):
        if math.dist(pe[pos], pe[0]) < tol:
            return pos
    return None


def _rope_half(x, pos, base, sign=1, interleaved=False):
    t, d = x.shape
    h = d // 2
    ang = (
        np.asarray(pos, dtype=np.float64)[:, None]
        * np.array([base ** (-2 * i / d) for i in range(h)])[None, :]
    )
    c, s = np.cos(ang), sign * np.sin(ang)
    out = np.empty_like(x, dtype=np.float64)
    a_idx, b_idx = (
        (np.arange(0, d, 2), np.arange(1, d, 2)) if interleaved else (np.arange(h), np.arange(h, d))
    )
    out[:, a_idx] = x[:, a_idx] * c - x[:, b_idx] * s
    out[:, b_idx] = x[:, a_idx] * s + x[:, b_idx] * c
    return out


def _rope_inputs(rng: np.random.Generator) -> tuple:
    t, d = int(rng.integers(1, 9)), _even(rng, 9)
    return (rng.normal(size=(t, d)), rng.integers(0, 500, size=t), float(rng.choice([100.0, 1e4])))


@exercise(
    "rope-half",
    "f(x, pos, base) -> RoPE in the half-split (concat) layout: for x of shape (T, d), rotate "
    "each pair (x[:, i], x[:, i + d/2]) by the angle pos * base^(-2i/d), counter-clockwise.",
    inputs=_rope_inputs,
    edge_cases={"position 0 (unchanged)": (np.arange(4.0)[None, :], np.array([0]), 1e4)},
    mistakes={
        "adjacent pairs (2i, 2i+1): the interleaved layout, not half-split": lambda x, p, b: (
            _rope_half(x, p, b, interleaved=True)
        ),
        "rotated clockwise (by -pos * theta)": lambda x, p, b: _rope_half(x, p, b, sign=-1),
    },
)
def _rope_half_ref(x: np.ndarray, pos: np.ndarray, base: float) -> np.ndarray:
    t, d = x.shape
    out = np.array(x, dtype=np.float64)
    for row in range(t):
        for i in range(d // 2):
            a = pos[row] * base ** (-2 * i / d)
            u, v = x[row, i], x[row, i + d // 2]
            out[row, i], out[row, i + d // 2] = (
                u * math.cos(a) - v * math.sin(a),
                u * math.sin(a) + v * math.cos(a),
            )
    return out
