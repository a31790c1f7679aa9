"""Chapter 1's exercises (why position): binary codes, neighbour distances, the first
return of (sin pos, cos pos), the position's share of the norm, a linear probe.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from .checking import exercise
from .comparing import close, exact_int


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
        "most significant bit first (column 0 must be the fastest bit)": partial(
            _bits, msb_first=True
        ),
        "positions counted from 1": partial(_bits, first=1),
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
        "position's energy by d too": partial(_share, every_channel=False),
        "positions scaled by N - 1 instead of N": partial(_share, n_minus_1=True),
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


def _circles(
    n: int, thetas: np.ndarray, swap: bool = False, concat: bool = False, first: int = 0
) -> np.ndarray:
    ang = np.arange(first, first + n)[:, None] * np.asarray(thetas, dtype=float)[None, :]
    a, b = (np.cos(ang), np.sin(ang)) if swap else (np.sin(ang), np.cos(ang))
    if concat:
        return np.concatenate([a, b], axis=1)
    return np.stack([a, b], axis=-1).reshape(n, -1)


def _circle_inputs(rng: np.random.Generator) -> tuple:
    return int(rng.integers(1, 60)), rng.uniform(0.01, 3.0, size=int(rng.integers(2, 6)))


@exercise(
    "circle-code",
    "f(n, thetas) -> the (n, 2 * len(thetas)) array whose columns 2i and 2i + 1 hold "
    "sin(pos * thetas[i]) and cos(pos * thetas[i]) for pos = 0..n-1: one circle per speed.",
    inputs=_circle_inputs,
    edge_cases={
        "one position": (1, np.array([1.0])),
        "the sinusoid's four speeds at d_model = 8": (12, 10000.0 ** (-np.arange(0, 8, 2) / 8)),
    },
    mistakes={
        "cos before sin in each pair (column 2i must be the sine)": partial(_circles, swap=True),
        "all sines, then all cosines (the pairs must sit side by side: sin, cos, sin, cos)": (
            partial(_circles, concat=True)
        ),
        "positions counted from 1 (position 0 is the point (0, 1) of every circle)": partial(
            _circles, first=1
        ),
    },
)
def _circle_code(n: int, thetas) -> np.ndarray:
    out = np.zeros((n, 2 * len(thetas)))
    for pos in range(n):
        for i, theta in enumerate(thetas):
            out[pos, 2 * i] = math.sin(pos * theta)
            out[pos, 2 * i + 1] = math.cos(pos * theta)
    return out


def _phi(x: float) -> float:
    """The standard normal CDF."""
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def scalar_readout_accuracy(n_positions: int) -> float:
    """The expected share of positions read back right from ``e + (pos/N) u_0`` by the
    nearest code, with ``e ~ N(0, I)``, whatever ``d_model`` is.

    Only channel 0 differs between the codes, so the other channels cancel in the
    comparison. Codes sit ``1/N`` apart: an inner position is read right when its noise
    is within ``1/(2N)`` of zero, the two end positions unless the noise carries them more
    than ``1/(2N)`` towards their only neighbour.

    >>> round(scalar_readout_accuracy(10), 3)
    0.136
    """
    half = 1.0 / (2 * n_positions)
    inner = 2 * _phi(half) - 1
    if n_positions == 1:
        return 1.0
    return ((n_positions - 2) * inner + 2 * _phi(half)) / n_positions


@exercise(
    "scalar-readout",
    "Predict, before measuring: the share of positions the nearest-code readout gets right "
    "for the scalar pos/N in channel 0 of x = e + (pos/N) u_0, e ~ N(0, I), with N = 20 "
    "positions and d_model = 4096 (a number between 0 and 1, within 0.01).",
    mistakes={
        "chance, 1/N = 0.05: the two end positions are read right about half the time": 0.05,
        "the N = 10 value of the chapter's table (0.13): with twice the positions, the codes "
        "are half as far apart": 0.133,
        "0, 'drowned': the share of the squared norm is tiny, but the readout only looks at "
        "the channel that differs": 0.0,
    },
    compare=close(rtol=0.0, atol=0.01),
    explanation=(
        "the codes differ only in channel 0, so the other 4095 channels add the same noise to "
        "every candidate's distance and cancel: d_model does not matter. The 20 codes sit "
        "1/20 apart; an inner position is read right when its N(0, 1) noise is within 1/40 "
        "of zero (2.0 % of the time), each end position unless its noise carries it more than "
        "1/40 towards its only neighbour (51 %): (18 x 0.020 + 2 x 0.510) / 20 = 0.069."
    ),
)
def _scalar_readout() -> float:
    return scalar_readout_accuracy(20)
