"""Chapter 1's exercises (why position): binary codes, neighbour distances, the first
return of (sin pos, cos pos), the position's share of the norm, a linear probe.

One block per exercise: the reference (written from the formula, independently of
the package's modules), its random inputs, edge cases and named mistakes. Importing
this module registers its exercises (:func:`~mini_transformer.exercises.checking.exercise`).
"""

from __future__ import annotations

import math

import numpy as np

from .checking import exact_int, exercise


def _bits(n: int, n_bits: int, msb_first: bool = False, first: int = 0) -> np.ndarray:
    out = np.array([[(pos >> k) & 1 for k in range(n_bits)] for pos in range(first, first + n)])
    return out.reshape(n, n_bits)[:, ::-1] if msb_first else out.reshape(n, n_bits)


@exercise(
    "binary-encoding",
    "f(n, n_bits) -> the (n, n_bits) 0/1 matrix whose column k holds bit k of pos, least "
    "significant bit first (positions past 2**n_bits wrap around).",
    inputs=lambda rng: (int(rng.integers(1, 300)), int(rng.integers(1, 10))),
    edge_cases={
        "one position, one bit": (1, 1),
        "more positions than codes": (20, 3),
        "more bits than needed": (5, 12),
    },
    mistakes={
        "most significant bit first (column 0 must be the fastest bit)": lambda n, b: _bits(
            n, b, msb_first=True
        ),
        "positions counted from 1": lambda n, b: _bits(n, b, first=1),
    },
)
def _binary_encoding(n: int, n_bits: int) -> np.ndarray:
    return _bits(n, n_bits)


def _rows(rng: np.random.Generator) -> tuple:
    return (rng.standard_normal((int(rng.integers(2, 40)), int(rng.integers(1, 9)))),)


@exercise(
    "neighbour-distances",
    "f(pe) -> the Euclidean distances between consecutive rows of the (n, d) array pe, "
    "shape (n - 1,).",
    inputs=_rows,
    edge_cases={"two rows, one column": (np.array([[0.0], [-3.0]]),)},
    mistakes={
        "squared distances (no square root)": lambda pe: ((pe[1:] - pe[:-1]) ** 2).sum(axis=1),
        "distances to row 0 instead of to the previous row": lambda pe: np.linalg.norm(
            pe[1:] - pe[0], axis=1
        ),
    },
)
def _neighbour_distances(pe: np.ndarray) -> np.ndarray:
    return np.array(
        [
            math.sqrt(sum((b - a) ** 2 for a, b in zip(pe[p], pe[p + 1], strict=True)))
            for p in range(len(pe) - 1)
        ]
    )


def _first_return(tol: float) -> int:
    pos = np.arange(1, 100_000)
    return int(pos[np.argmax(np.hypot(np.sin(pos), np.cos(pos) - 1.0) < tol)])


@exercise(
    "first-return",
    "The first position pos >= 1 whose point (sin pos, cos pos) lies within 0.01 of the "
    "point of position 0 (an integer).",
    mistakes={
        "the first return within 0.05, not 0.01": _first_return(0.05),
        "one turn, 2 pi ~ 6 radians (the circle never closes exactly)": 6,
    },
    compare=exact_int,
)
def _first_return_answer() -> int:
    return _first_return(0.01)


def _share(n: int, d: int, every_channel: bool = True, n_minus_1: bool = False) -> float:
    p2 = np.mean([(pos / (n - 1 if n_minus_1 and n > 1 else n)) ** 2 for pos in range(n)])
    return float(p2 / (1 + p2)) if every_channel else float(p2 / (d + p2))


@exercise(
    "position-share",
    "f(N, d) -> the expected share of ||x||^2 carried by the position when pos/N is added "
    "to every one of the d channels of an N(0, 1) embedding (averaged over pos = 0..N-1).",
    inputs=lambda rng: (int(rng.integers(1, 200)), int(rng.integers(1, 2049))),
    edge_cases={"one position": (1, 8), "one channel": (10, 1)},
    mistakes={
        "the one-channel share p^2/(d + p^2): a copy in every channel scales the "
        "position's energy by d too": lambda n, d: _share(n, d, every_channel=False),
        "positions scaled by N - 1 instead of N": lambda n, d: _share(n, d, n_minus_1=True),
    },
)
def _position_share(n: int, d: int) -> float:
    signal_ = d * sum((pos / n) ** 2 for pos in range(n))  # sum over pos of E||p||^2
    noise = d * n  # sum over pos of E||e||^2
    return float(signal_ / (signal_ + noise))


def _probe_inputs(rng: np.random.Generator) -> tuple:
    n, d, m = int(rng.integers(20, 60)), int(rng.integers(1, 6)), int(rng.integers(10, 30))
    w, b = rng.normal(size=d), rng.normal(0, 3)
    x, x_test = rng.normal(size=(n, d)), rng.normal(size=(m, d))
    noise = rng.uniform(0.1, 2.0)
    return (
        x,
        x @ w + b + noise * rng.normal(size=n),
        x_test,
        x_test @ w + b + noise * rng.normal(size=m),
    )


def _lstsq_predict(x, y, x_test, intercept=True):
    if intercept:
        x, x_test = np.c_[x, np.ones(len(x))], np.c_[x_test, np.ones(len(x_test))]
    return x_test @ np.linalg.lstsq(x, y, rcond=None)[0]


def _r2(y, pred):
    return float(1 - np.sum((y - pred) ** 2) / np.sum((y - np.mean(y)) ** 2))


@exercise(
    "probe-r2",
    "f(x, y, x_test, y_test) -> the held-out R^2 of a least-squares linear probe (with an "
    "intercept) fitted on (x, y) and scored on (x_test, y_test).",
    inputs=_probe_inputs,
    mistakes={
        "no intercept (the probe is forced through the origin)": lambda x, y, xt, yt: _r2(
            yt, _lstsq_predict(x, y, xt, intercept=False)
        ),
        "scored on the training data (in-sample R^2)": lambda x, y, xt, yt: _r2(
            y, _lstsq_predict(x, y, x)
        ),
    },
)
def _probe_r2(x, y, x_test, y_test) -> float:
    a = np.column_stack([x, np.ones(len(x))])  # (n, d + 1)
    coef = np.linalg.solve(a.T @ a, a.T @ y)  # normal equations
    pred = np.column_stack([x_test, np.ones(len(x_test))]) @ coef
    ss_res = sum((t - p) ** 2 for t, p in zip(y_test, pred, strict=True))
    ss_tot = sum((t - np.mean(y_test)) ** 2 for t in y_test)
    return float(1 - ss_res / ss_tot)
