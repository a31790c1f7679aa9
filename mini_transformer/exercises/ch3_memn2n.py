"""Chapter 3's exercises (MemN2N, learned and relative encodings): ALiBi biases, MemN2N's
blind positions, unseen offsets, ALiBi's effective window.
"""

from __future__ import annotations

import math

import numpy as np

from .checking import exercise
from .comparing import close, int_list


def _alibi(n_heads, t, first=1, sign=-1, signed=False) -> np.ndarray:
    # -m_h |i - j|, slopes m_h = 2^(-8h/n_heads), h = 1..n_heads
    m = 2.0 ** (-8.0 * np.arange(first, first + n_heads) / n_heads)
    offset = np.arange(t)[:, None] - np.arange(t)[None, :]  # i - j
    return sign * m[:, None, None] * (offset if signed else np.abs(offset))


exercise(
    "alibi-bias",
    "f(n_heads, T) -> the (n_heads, T, T) ALiBi bias -m_h |i - j| with slopes "
    "m_h = 2^(-8h/n_heads) for h = 1..n_heads (n_heads a power of two).",
    inputs=lambda rng: (int(2 ** rng.integers(0, 5)), int(rng.integers(1, 13))),
    edge_cases={"one head": (1, 4), "one position": (4, 1)},
    mistakes={
        "slopes from h = 0 (the first head gets slope 1)": dict(first=0),
        "a positive bias (+m|i - j| rewards distant keys)": dict(sign=1),
        "signed distance i - j instead of |i - j|": dict(signed=True),
    },
)(_alibi)


def _memn2n(J, d):
    """MemN2N's l_kj = (1 - j/J) - (k/d)(1 - 2j/J), 1-based j, k; row j-1, column k-1."""
    j, k = np.arange(1, J + 1)[:, None], np.arange(1, d + 1)[None, :]
    return (1 - j / J) - (k / d) * (1 - 2 * j / J)


@exercise(
    "memn2n-blind",
    "f(J, d) -> the sorted 1-based dimensions k of MemN2N's sentence vector that no swap of "
    "two words (J >= 2) can change, for any embedding.",
    inputs=lambda rng: (int(rng.integers(2, 13)), int(rng.integers(1, 41))),
    edge_cases={"odd d": (5, 7), "even d": (3, 10), "d = 2": (2, 2)},
    mistakes={
        "0-based index": lambda J, d: [d // 2 - 1] if d % 2 == 0 else [],
        "d/2 rounded for odd d": lambda J, d: [max(1, round(d / 2))],
    },
    compare=int_list,
)
def _memn2n_blind(J: int, d: int) -> list[int]:
    l_ = _memn2n(J, d)
    return [k + 1 for k in range(d) if np.ptp(l_[:, k]) < 1e-12]  # l_kj the same for every j


def _unseen(T, L, causal=True, strict=False) -> float:
    # the longest offset i - j seen in training is L - 1: offsets >= L are unseen
    pairs = [(i, j) for i in range(T) for j in range(T) if (j <= i or not causal)]
    bad = [1 for i, j in pairs if (abs(i - j) > L if strict else abs(i - j) >= L)]
    return len(bad) / len(pairs)


exercise(
    "unseen-offsets",
    "f(T, L) -> the share of causal (query i, key j <= i) pairs in a sequence of length T whose "
    "offset i - j was never seen when training on sequences of length L.",
    inputs=lambda rng: (int(rng.integers(1, 80)), int(rng.integers(1, 40))),
    edge_cases={"T = L (nothing unseen)": (16, 16), "T = 2L": (32, 16), "T = L + 1": (9, 8)},
    mistakes={
        "all T^2 pairs, not only causal ones": dict(causal=False),
        "offsets > L: the longest trained offset is L - 1, so L is unseen": dict(strict=True),
        "share of unseen query positions (i >= L) instead of pairs": lambda T, L: max(0, T - L) / T,
    },
)(_unseen)


def _window_inputs(rng: np.random.Generator) -> tuple:
    T = int(rng.integers(1, 300))
    return float(2.0 ** -rng.integers(1, 9)), T, int(rng.integers(1, T + 1))


def _window(m, T, w, base2=False, plus=0, infinite=False, sign=-1) -> float:
    # equal content scores: the softmax weights of offsets r = 0..T-1 are e^(-m r) (bias -m r)
    wts = np.array([(2.0 if base2 else math.e) ** (sign * m * r) for r in range(T)])
    z = 1.0 / (1.0 - math.exp(-m)) if infinite else wts.sum()  # a geometric series to infinity
    return float(wts[: w + plus].sum() / z)


exercise(
    "alibi-window",
    "f(slope, T, w) -> the attention mass the last query of a causal ALiBi head with equal "
    "content scores puts on its w nearest keys (offsets 0..w-1) out of T keys.",
    inputs=_window_inputs,
    edge_cases={"one key": (0.5, 1, 1), "window = T": (0.25, 10, 10)},
    mistakes={
        "2^(-m r) instead of e^(-m r): softmax exponentiates with base e": dict(base2=True),
        "w + 1 keys (offsets 0..w)": dict(plus=1),
        "normalised over infinitely many offsets: the softmax runs over the T keys r = 0..T-1 "
        "only": dict(infinite=True),
        "the bias with the wrong sign (e^(+m r)): ALiBi penalises distance": dict(sign=1),
    },
)(_window)


def _slopes(n_heads: int, how: str = "odd") -> list[float]:
    """ALiBi's slopes: for a power of two the geometric sequence 2^(-8/n), 2^(-16/n), ...;
    otherwise those of the closest smaller power of two p, then the odd-numbered slopes of
    2p. ``how`` other than "odd" gives a named mistake."""
    p = 2 ** int(math.floor(math.log2(n_heads)))
    if p == n_heads or how == "formula":
        start = 2.0 ** (-8.0 / n_heads)
        return [start ** (h + 1) for h in range(n_heads)]
    if how == "sorted":
        return sorted(_slopes(n_heads), reverse=True)
    extra = {"odd": slice(0, None, 2), "first": slice(None), "even": slice(1, None, 2)}[how]
    return _slopes(p) + _slopes(2 * p)[extra][: n_heads - p]


exercise(
    "alibi-slopes",
    "f(n_heads) -> ALiBi's n_heads slopes for any head count: for a power of two the "
    "geometric sequence 2^(-8h/n), h = 1..n; otherwise the slopes of the closest smaller "
    "power of two p, followed by the first n - p odd-numbered slopes (h = 1, 3, 5, ...) of 2p.",
    inputs=lambda rng: (int(rng.integers(1, 33)),),
    edge_cases={"6 heads (the paper's example)": (6,), "3 heads": (3,), "8 heads": (8,)},
    mistakes={
        "the power-of-two formula 2^(-8h/n) used for a head count that is not one": dict(
            how="formula"
        ),
        "the first n - p slopes of 2p instead of its odd-numbered ones": dict(how="first"),
        "sorted from steep to shallow: the paper appends the extra slopes after the first p": dict(
            how="sorted"
        ),
        "the even-numbered slopes of 2p ([1::2]: 2^-2, 2^-4, ... repeat the first p slopes); "
        "take every other slope starting with the first (h = 1, 3, 5, ...)": dict(how="even"),
    },
)(_slopes)


@exercise(
    "memn2n-append",
    "Predict before running anything: a MemN2N model encodes an input of T tokens with J = T "
    "and d = 16. When a 9th token is appended to 8 tokens, (a) for how many of the first 8 "
    "positions does the factor l_j change, and (b) how many of the 16 dimensions of l_1 keep "
    "their value? Answer with the tuple (a, b).",
    mistakes={
        "a causal scheme: nothing before the new token changes (true of sinusoidal, learned, "
        "RoPE, ALiBi; not of MemN2N with J = T)": (0, 16),
        "the middle dimension k = d/2 was forgotten: it is 1/2 for every J": (8, 0),
        "only the word that was last moves (its l_kJ = k/d)": (1, 15),
    },
    compare=close(rtol=0, atol=0),
    hint="write l_kj = (1 - k/d) + (j/J)(2k/d - 1) and set J = T: which of its parts change "
    "when T goes from 8 to 9, for which j, and is there a k where they cannot matter?",
    explanation=(
        "l_kj = (1 - k/d) + (j/J)(2k/d - 1). With J = T every fraction j/J changes when T grows "
        "from 8 to 9 (1/8 -> 1/9, ..., 8/8 -> 8/9), so all 8 factors change, in every dimension "
        "but k = d/2, where 2k/d - 1 = 0 keeps 1/2. The input at position t depends on how many "
        "tokens follow it: MemN2N with J = T is not prefix-stable, so generation must fix J in "
        "advance or recompute every earlier position at each new token."
    ),
)
def _memn2n_append() -> tuple[int, int]:
    before, after = _memn2n(8, 16), _memn2n(9, 16)[:8]
    same = np.isclose(before, after, rtol=0, atol=1e-12)  # (8, 16)
    return int((~same.all(axis=1)).sum()), int(same[0].sum())
