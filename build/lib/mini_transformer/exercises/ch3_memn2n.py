"""Chapter 3's exercises (MemN2N, learned and relative encodings): ALiBi biases, MemN2N's
blind positions, unseen offsets, ALiBi's effective window.

One block per exercise: the reference (written from the formula, independently of
the package's modules), its random inputs, edge cases and named mistakes. Importing
this module registers its exercises (:func:`~mini_transformer.exercises.checking.exercise`).
"""

from __future__ import annotations

import math

import numpy as np

from .checking import exercise, int_list


def _alibi(n_heads, t, first=1, sign=-1, signed=False):
    out = np.empty((n_heads, t, t))
    for h in range(n_heads):
        m = 2.0 ** (-8.0 * (h + first) / n_heads)
        for i in range(t):
            for j in range(t):
                out[h, i, j] = sign * m * ((i - j) if signed else abs(i - j))
    return out


@exercise(
    "alibi-bias",
    "f(n_heads, T) -> the (n_heads, T, T) ALiBi bias -m_h |i - j| with slopes "
    "m_h = 2^(-8h/n_heads) for h = 1..n_heads (n_heads a power of two).",
    inputs=lambda rng: (int(2 ** rng.integers(0, 5)), int(rng.integers(1, 13))),
    edge_cases={"one head": (1, 4), "one position": (4, 1)},
    mistakes={
        "slopes from h = 0 (the first head gets slope 1)": lambda n, t: _alibi(n, t, first=0),
        "a positive bias (+m|i - j| rewards distant keys)": lambda n, t: _alibi(n, t, sign=1),
        "signed distance i - j instead of |i - j|": lambda n, t: _alibi(n, t, signed=True),
    },
)
def _alibi_ref(n_heads: int, T: int) -> np.ndarray:
    return _alibi(n_heads, T)


def _memn2n(J, d):
    """MemN2N's l_kj = (1 - j/J) - (k/d)(1 - 2j/J), 1-based j, k; row j-1, column k-1."""
    return np.array(
        [
            [(1 - j / J) - (k / d) * (1 - 2 * j / J) for k in range(1, d + 1)]
            for j in range(1, J + 1)
        ]
    )


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


def _unseen(T, L, causal=True, strict=False):
    pairs = [(i, j) for i in range(T) for j in range(T) if (j <= i or not causal)]
    bad = [1 for i, j in pairs if (abs(i - j) > L if strict else abs(i - j) >= L)]
    return len(bad) / len(pairs)


@exercise(
    "unseen-offsets",
    "f(T, L) -> the share of causal (query i, key j <= i) pairs in a sequence of length T whose "
    "offset i - j was never seen when training on sequences of length L.",
    inputs=lambda rng: (int(rng.integers(1, 80)), int(rng.integers(1, 40))),
    edge_cases={"T = L (nothing unseen)": (16, 16), "T = 2L": (32, 16), "T = L + 1": (9, 8)},
    mistakes={
        "all T^2 pairs, not only causal ones": lambda T, L: _unseen(T, L, causal=False),
        "offsets > L: the longest trained offset is L - 1, so L is unseen": lambda T, L: _unseen(
            T, L, strict=True
        ),
        "share of unseen query positions (i >= L) instead of pairs": lambda T, L: max(0, T - L) / T,
    },
)
def _unseen_offsets(T: int, L: int) -> float:
    pairs = T * (T + 1) // 2  # offsets r = 0..T-1, T - r pairs each
    unseen = sum(T - r for r in range(L, T))  # offsets r >= L
    return unseen / pairs


def _window_inputs(rng: np.random.Generator) -> tuple:
    T = int(rng.integers(1, 300))
    return float(2.0 ** -rng.integers(1, 9)), T, int(rng.integers(1, T + 1))


def _window(m, T, w, base2=False, plus=0):
    wts = np.array([(2.0 if base2 else math.e) ** (-m * r) for r in range(T)])
    return float(wts[: w + plus].sum() / wts.sum())


@exercise(
    "alibi-window",
    "f(slope, T, w) -> the attention mass the last query of a causal ALiBi head with equal "
    "content scores puts on its w nearest keys (offsets 0..w-1) out of T keys.",
    inputs=_window_inputs,
    edge_cases={"one key": (0.5, 1, 1), "window = T": (0.25, 10, 10)},
    mistakes={
        "2^(-m r) instead of e^(-m r): softmax exponentiates with base e": lambda m, T, w: _window(
            m, T, w, base2=True
        ),
        "w + 1 keys (offsets 0..w)": lambda m, T, w: _window(m, T, w, plus=1),
    },
)
def _alibi_window(slope: float, T: int, w: int) -> float:
    scores = [-slope * r for r in range(T)]  # bias -m * offset
    z = sum(math.exp(s) for s in scores)
    return sum(math.exp(s) for s in scores[:w]) / z
