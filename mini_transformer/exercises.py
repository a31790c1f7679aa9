"""Self-checking exercises: ``check(name, answer)`` tells a reader whether their answer is right.

How it works. Each exercise is registered with a *reference* (the book's own answer, a
function), a *make_inputs* function that draws random arguments from a NumPy generator,
and a comparison. ``check`` calls the reader's function and the reference on the same
fresh inputs and stops at the first disagreement, printing the inputs, the expected
value and the reader's value, so the reader sees exactly what is wrong. A reader's bug
(an exception, a wrong shape, a NaN) is reported, never raised, so a notebook keeps
running. An answer that is a value rather than a function is compared with the
reference called with no arguments.

The inputs are drawn from a generator seeded by the exercise's name, so a verdict is
the same on every run (the book's stored outputs are compared by nbval in CI), yet the
inputs are not ones the reader has seen in the chapter.

In a chapter::

    from mini_transformer import exercises

    def my_norm(pe):
        ...  # your code here
    exercises.check("sinusoidal-norm", my_norm)

The solution cell that follows is hidden in the book and calls ``assert
exercises.check(...)`` so that every solution and every checker is executed by CI.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["Exercise", "register", "check", "available", "describe", "default_compare"]


@dataclass(frozen=True)
class Exercise:
    """One registered exercise.

    Attributes:
        name: the identifier readers pass to :func:`check`, e.g. ``"sinusoidal-norm"``.
        reference: the book's answer; called with the same arguments as the reader's function.
        make_inputs: ``rng -> tuple`` of positional arguments for one test case, or ``None``
            for an exercise whose answer is a single value (the reference takes no arguments).
        description: one sentence saying what the answer must compute.
        compare: ``(expected, got) -> str | None``: ``None`` when they agree, otherwise a
            sentence saying how they differ. Defaults to :func:`default_compare`.
        n_cases: how many random cases to try.
    """

    name: str
    reference: Callable[..., Any]
    make_inputs: Callable[[np.random.Generator], tuple] | None
    description: str
    compare: Callable[[Any, Any], str | None] | None = None
    n_cases: int = 10


_REGISTRY: dict[str, Exercise] = {}


def register(
    name: str,
    reference: Callable[..., Any],
    make_inputs: Callable[[np.random.Generator], tuple] | None,
    description: str,
    compare: Callable[[Any, Any], str | None] | None = None,
    n_cases: int = 10,
) -> Exercise:
    """Add an exercise to the registry (used by this module; readers call :func:`check`)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if name in _REGISTRY:
        raise ValueError(f"an exercise named {name!r} is already registered")
    if not isinstance(n_cases, int) or n_cases < 1:
        raise ValueError(f"n_cases must be a positive integer, got {n_cases!r}")
    ex = Exercise(name, reference, make_inputs, description, compare, n_cases)
    _REGISTRY[name] = ex
    return ex


def available() -> list[str]:
    """The names of all registered exercises, sorted."""
    return sorted(_REGISTRY)


def describe(name: str) -> str:
    """The one-sentence task of exercise ``name``."""
    return _get(name).description


def _get(name: str) -> Exercise:
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown exercise {name!r}; available exercises: {', '.join(available())}"
        )
    return _REGISTRY[name]


def _as_array(x: Any) -> np.ndarray | None:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy() if x.is_floating_point() else x.cpu().numpy()
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (int, float, np.number, bool, np.bool_)):
        return np.asarray(x)
    if isinstance(x, (list, tuple)) and all(isinstance(e, (int, float, np.number)) for e in x):
        return np.asarray(x)
    return None


def default_compare(expected: Any, got: Any, rtol: float = 1e-5, atol: float = 1e-6) -> str | None:
    """Compare numbers, arrays and tensors with ``allclose``; anything else with ``==``.

    The tolerances are those of float32 arithmetic: a reader may compute in float32
    what the reference computes in float64.
    """
    if isinstance(expected, tuple) and isinstance(got, tuple):
        if len(expected) != len(got):
            return f"expected a tuple of {len(expected)} items, got {len(got)}"
        for i, (e, g) in enumerate(zip(expected, got)):
            msg = default_compare(e, g, rtol, atol)
            if msg is not None:
                return f"item {i}: {msg}"
        return None
    e, g = _as_array(expected), _as_array(got)
    if e is not None:
        if g is None:
            return f"expected an array-like value, got {type(got).__name__}"
        if e.shape != g.shape:
            return f"expected shape {tuple(e.shape)}, got shape {tuple(g.shape)}"
        if g.dtype.kind in "fc" and not np.isfinite(g).all():
            return "your answer contains NaN or inf"
        if e.dtype == bool or g.dtype == bool:
            bad = np.argwhere(e != g)
        else:
            bad = np.argwhere(~np.isclose(g, e, rtol=rtol, atol=atol))
        if bad.size:
            idx = tuple(int(i) for i in bad[0])
            return (
                f"first mismatch at index {idx}: expected {e[idx]!r}, got {g[idx]!r} "
                f"({len(bad)} of {e.size} entries differ)"
            )
        return None
    if expected != got:
        return f"expected {expected!r}, got {got!r}"
    return None


def _short(x: Any) -> str:
    a = _as_array(x)
    if a is not None and a.ndim > 0:
        return f"{type(x).__name__} of shape {tuple(a.shape)}"
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def check(name: str, answer: Any) -> bool:
    """Check a reader's answer to exercise ``name`` and print a verdict.

    Args:
        name: the exercise's name as given in the chapter (see :func:`available`).
        answer: a function (called on random inputs and compared with the reference) or,
            for value exercises, the value itself.

    Returns:
        ``True`` if every case agrees, else ``False``. Prints ``✓ ...`` or ``✗ ...`` with the
        first mismatch. Exceptions raised by the reader's function are reported, not raised.
    """
    ex = _get(name)
    compare = ex.compare or default_compare
    if ex.make_inputs is None:
        expected = ex.reference()
        got = answer() if callable(answer) else answer
        msg = compare(expected, got)
        if msg is None:
            print(f"✓ {name}: correct.")
            return True
        print(f"✗ {name}: {msg}.")
        return False
    if not callable(answer):
        print(f"✗ {name}: expected a function, got {type(answer).__name__}.")
        return False
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for case in range(1, ex.n_cases + 1):
        args = ex.make_inputs(rng)
        expected = ex.reference(*args)
        try:
            got = answer(*args)
        except NotImplementedError:
            print(f"✗ {name}: not implemented yet (your function raised NotImplementedError).")
            return False
        except Exception as err:  # a reader's bug is reported, not raised
            shown = ", ".join(_short(a) for a in args)
            print(f"✗ {name}: case {case} ({shown}) raised {type(err).__name__}: {err}")
            return False
        msg = compare(expected, got)
        if msg is not None:
            shown = ", ".join(_short(a) for a in args)
            print(f"✗ {name}: case {case} with arguments ({shown}): {msg}.")
            return False
    print(f"✓ {name}: all {ex.n_cases} random cases agree with the reference.")
    return True


# Each chapter registers its exercises in its own section below. ------------------------

# === Chapter 1 ===
# References are written out here (not imported from `positional`) so that a checker and
# the package are two independent statements of the same formula.


def _ch1_normalized_position(n: int) -> np.ndarray:
    """pos / N for pos = 0..N-1, as a column (N, 1)."""
    return (np.arange(n, dtype=np.float64) / n)[:, None]


def _ch1_binary_encoding(n: int, n_bits: int) -> np.ndarray:
    """Bit k of pos in column k (least significant bit first), as floats (n, n_bits)."""
    pos = np.arange(n)[:, None]
    return ((pos >> np.arange(n_bits)[None, :]) & 1).astype(np.float64)


def _ch1_neighbour_distances(pe: np.ndarray) -> np.ndarray:
    """Euclidean distance between rows pos and pos+1 of ``pe``, shape (n-1,)."""
    return np.linalg.norm(np.diff(np.asarray(pe, dtype=np.float64), axis=0), axis=1)


def _ch1_first_return() -> int:
    """First pos >= 1 whose point (sin pos, cos pos) is within 0.05 of the point of pos 0."""
    pos = np.arange(1, 10_000)
    dist = np.hypot(np.sin(pos), np.cos(pos) - 1.0)
    return int(pos[np.argmax(dist < 0.05)])


register(
    "normalized-position",
    _ch1_normalized_position,
    lambda rng: (int(rng.integers(1, 200)),),
    "Return pos/N for pos = 0, ..., N-1 as a float array of shape (N, 1).",
)
register(
    "binary-encoding",
    _ch1_binary_encoding,
    lambda rng: (int(rng.integers(1, 300)), int(rng.integers(1, 10))),
    "Return the (n, n_bits) 0/1 matrix whose column k holds bit k of pos "
    "(least significant bit first).",
)
register(
    "neighbour-distances",
    _ch1_neighbour_distances,
    lambda rng: (rng.standard_normal((int(rng.integers(2, 40)), int(rng.integers(1, 9)))),),
    "Return the Euclidean distances between consecutive rows of pe, shape (n - 1,).",
)
def _ch1_same_integer(expected: int, got: Any) -> str | None:
    """Exact comparison for an integer answer (a position is not approximately right)."""
    if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
        return f"expected an integer position, got {type(got).__name__} {got!r}"
    return None if int(got) == expected else f"expected {expected}, got {int(got)}"


register(
    "first-return",
    _ch1_first_return,
    None,
    "The first position pos >= 1 whose point (sin pos, cos pos) on the unit circle lies "
    "within 0.05 of the point of position 0.",
    compare=_ch1_same_integer,
)

# === Chapter 2 ===

# === Chapter 3 ===

# === Chapter 4 ===

# === Chapter 5 ===

# === Chapter 6 ===
