"""Chapter 1's exercises (why position): binary codes, circles, the first return of
(sin pos, cos pos), the position's share of the norm, a linear probe, the scalar's readout."""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from .checking import exercise
from .comparing import close, exact_int


def _bits(n: int, n_bits: int, msb_first: bool = False, first: int = 0) -> np.ndarray:
    out = np.array([[(pos >> k) & 1 for k in range(n_bits)] for pos in range(first, first + n)])
    return out.reshape(n, n_bits)[:, ::-1] if msb_first else out.reshape(n, n_bits)


exercise(
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
        "most significant bit first (column 0 must be the fastest bit)": dict(msb_first=True),
        "positions counted from 1": dict(first=1),
    },
)(_bits)


def _first_return(tol: float = 0.01) -> int:
    pos = np.arange(1, 100_000)
    return int(pos[np.argmax(np.hypot(np.sin(pos), np.cos(pos) - 1.0) < tol)])


exercise(
    "first-return",
    "The first position pos >= 1 whose point (sin pos, cos pos) lies within 0.01 of the "
    "point of position 0 (an integer).",
    mistakes={
        "the first return within 0.1 or 0.05 (section 1.6's 0.018 apart), not 0.01; "
        "or the squared distance compared with 0.01, the distance with 0.1": _first_return(0.1),
        "355 = 113 pi is half a turn: sin 355 ~ 0 but cos 355 ~ -1, the far side of the "
        "circle (compare both coordinates)": 355,
        "only the sine compared with 0: it is 0 at every half turn too": 22,
        "the first return within 0.001, not 0.01": _first_return(0.001),
        "only the cosine compared with 1: the sine is -0.13 there, the point 0.13 away": 25,
        "one turn, 2 pi ~ 6 radians (the circle never closes exactly)": 6,
        "off by one, an index and not a position: in an array that starts at pos = 1, "
        "index i holds position i + 1": _first_return() - 1,
    },
    compare=exact_int,
)(_first_return)


def _share(n: int, d: int, every_channel: bool = True, n_minus_1: bool = False) -> float:
    # Per channel and averaged over pos, E[(pos/N)^2] = p2 against E[e^2] = 1: a copy of the
    # position in all d channels gives d p2 / (d p2 + d), in one channel p2 / (p2 + d).
    p2 = np.mean([(pos / (n - 1 if n_minus_1 and n > 1 else n)) ** 2 for pos in range(n)])
    return float(p2 / (1 + p2)) if every_channel else float(p2 / (d + p2))


exercise(
    "position-share",
    "f(N, d) -> the expected share of ||x||^2 carried by the position when pos/N is added "
    "to every one of the d channels of an N(0, 1) embedding (averaged over pos = 0..N-1).",
    inputs=lambda rng: (int(rng.integers(1, 200)), int(rng.integers(1, 2049))),
    edge_cases={"one position": (1, 8), "one channel": (10, 1)},
    mistakes={
        "the one-channel share p^2/(d + p^2): a copy in every channel scales the "
        "position's energy by d too": dict(every_channel=False),
        "positions scaled by N - 1 instead of N": dict(n_minus_1=True),
    },
)(_share)


def _probe_inputs(rng: np.random.Generator) -> tuple:
    n, d, m = int(rng.integers(20, 60)), int(rng.integers(1, 6)), int(rng.integers(10, 30))
    w, b = rng.normal(size=d), rng.normal(0, 3)
    x, x_test = rng.normal(size=(n, d)), rng.normal(size=(m, d))
    noise = rng.uniform(0.1, 2.0)
    y, y_test = x @ w + b + noise * rng.normal(size=n), x_test @ w + b + noise * rng.normal(size=m)
    return x, y, x_test, y_test


def _probe_r2(x, y, x_test, y_test, intercept: bool = True, in_sample: bool = False) -> float:
    if in_sample:
        x_test, y_test = x, y
    if intercept:  # a column of ones: the probe need not pass through the origin
        x, x_test = np.c_[x, np.ones(len(x))], np.c_[x_test, np.ones(len(x_test))]
    pred = x_test @ np.linalg.lstsq(x, y, rcond=None)[0]
    return float(1 - np.sum((y_test - pred) ** 2) / np.sum((y_test - np.mean(y_test)) ** 2))


exercise(
    "probe-r2",
    "f(x, y, x_test, y_test) -> the held-out R^2 of a least-squares linear probe (with an "
    "intercept) fitted on (x, y) and scored on (x_test, y_test).",
    inputs=_probe_inputs,
    mistakes={
        "no intercept (the probe is forced through the origin)": dict(intercept=False),
        "scored on the training data (in-sample R^2)": dict(in_sample=True),
    },
)(_probe_r2)


def _circles(
    n: int, thetas: np.ndarray, swap: bool = False, concat: bool = False, first: int = 0
) -> np.ndarray:
    # columns 2i and 2i + 1: sin(pos * thetas[i]) and cos(pos * thetas[i])
    ang = np.arange(first, first + n)[:, None] * np.asarray(thetas, dtype=float)[None, :]
    a, b = (np.cos(ang), np.sin(ang)) if swap else (np.sin(ang), np.cos(ang))
    if concat:
        return np.concatenate([a, b], axis=1)
    return np.stack([a, b], axis=-1).reshape(n, -1)


exercise(
    "circle-code",
    "f(n, thetas) -> the (n, 2 * len(thetas)) array whose columns 2i and 2i + 1 hold "
    "sin(pos * thetas[i]) and cos(pos * thetas[i]) for pos = 0..n-1: one circle per speed.",
    inputs=lambda rng: (
        int(rng.integers(1, 60)),
        rng.uniform(0.01, 3.0, size=int(rng.integers(2, 6))),
    ),
    edge_cases={
        "one position": (1, np.array([1.0])),
        "the sinusoid's four speeds at d_model = 8": (12, 10000.0 ** (-np.arange(0, 8, 2) / 8)),
    },
    mistakes={
        "cos before sin in each pair (column 2i must be the sine)": dict(swap=True),
        "all sines, then all cosines (the pairs must sit side by side: sin, cos, sin, cos)": dict(
            concat=True
        ),
        "positions counted from 1 (position 0 is the point (0, 1) of every circle)": dict(first=1),
    },
)(_circles)


def scalar_readout_accuracy(n_positions: int, half_gap: float | None = None) -> float:
    """The expected share of positions read back right from ``e + (pos/N) u_0`` by the
    nearest code, with ``e ~ N(0, I)``, whatever ``d_model`` is.

    Only channel 0 differs between the codes, so the other channels cancel in the
    comparison. Codes sit ``1/N`` apart: an inner position is read right when its noise
    is within ``1/(2N)`` of zero, the two end positions unless the noise carries them more
    than ``1/(2N)`` towards their only neighbour.

    >>> round(scalar_readout_accuracy(10), 3)
    0.136
    """
    if n_positions == 1:
        return 1.0
    half_gap = 1.0 / (2 * n_positions) if half_gap is None else half_gap  # of the codes' gap
    phi = 0.5 * (1.0 + math.erf(half_gap / math.sqrt(2.0)))  # Phi(1/(2N))
    return ((n_positions - 2) * (2 * phi - 1) + 2 * phi) / n_positions


exercise(
    "scalar-readout",
    "Predict, before measuring: the share of positions the nearest-code readout gets right "
    "for the scalar pos/N in channel 0 of x = e + (pos/N) u_0, e ~ N(0, I), with N = 20 "
    "positions and d_model = 4096 (a number between 0 and 1, within 0.003).",
    mistakes={
        "chance, 1/N = 0.05: the two end positions are read right about half the time": 0.05,
        "the share for N = 10 positions: with twice the positions, the codes are half as "
        "far apart": scalar_readout_accuracy(10),
        "a position read right when its noise is within the whole gap 1/N of zero; the "
        "nearest code is its own while the noise is within half the gap, 1/(2N)": (
            scalar_readout_accuracy(20, half_gap=1 / 20)
        ),
        "0, 'drowned': the share of the squared norm is tiny, but the readout only looks at "
        "the channel that differs": 0.0,
    },
    compare=close(rtol=0.0, atol=0.003),
    hint="only channel 0 differs between the codes, so the other channels add the same "
    "amount to every candidate's distance. In channel 0 the codes sit 1/N apart: how likely "
    "is N(0, 1) noise to leave an inner position nearest its own code, and an end position, "
    "which has one neighbour only?",
    explanation=(
        "the codes differ only in channel 0, so the other 4095 channels add the same noise to "
        "every candidate's distance and cancel: d_model does not matter. The 20 codes sit "
        "1/20 apart; an inner position is read right when its N(0, 1) noise is within 1/40 "
        "of zero (2.0 % of the time), each end position unless its noise carries it more than "
        "1/40 towards its only neighbour (51 %): (18 x 0.020 + 2 x 0.510) / 20 = 0.069."
    ),
)(partial(scalar_readout_accuracy, 20))
