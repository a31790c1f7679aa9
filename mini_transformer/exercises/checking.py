"""The machinery of the exercises: registry, comparisons, running the reader's code, check.

See :mod:`mini_transformer.exercises` for how a verdict is reached. Each chapter's
module registers its exercises with :func:`exercise`; :func:`check` runs one, in a
forked child process where the platform has ``fork`` (see :func:`check`).

What no checker in the notebook's own machine can prevent: an answer written to do harm on
purpose can still delete files, open network connections or kill the notebook's process,
and in-process (no ``fork``) a C-level call that never returns cannot be stopped.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import gc
import io
import math
import os
import pickle
import random
import secrets
import select
import signal
import struct
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["Exercise", "Verdict", "exercise", "check", "available", "describe"]

# --------------------------------------------------------------------------------------
# The machinery
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exercise:
    """One exercise.

    Attributes:
        name: what readers pass to :func:`check`, e.g. ``"binary-encoding"``.
        task: one sentence saying what the answer must compute.
        reference: the answer. For a function exercise it takes the same arguments as the
            reader's function; for a value exercise it takes none.
        inputs: ``rng -> tuple`` of arguments for one random case; ``None`` for a value
            exercise.
        edge_cases: ``{description: arguments}`` tried before the random cases.
        mistakes: ``{name of the mistake: wrong function (or wrong value)}``; when the
            reader's output equals one of them the message names the mistake.
        compare: ``(expected, got) -> None | str`` (``None`` when they agree).
        n_random: how many random cases each call tries.
        explanation: for a *checked prediction* (a value exercise the reader answers before
            running anything): why the right answer is right, printed after the verdict,
            right or wrong, since the prediction is already committed.
    """

    name: str
    task: str
    reference: Callable[..., Any]
    inputs: Callable[[np.random.Generator], tuple] | None
    edge_cases: dict[str, tuple] = field(default_factory=dict)
    mistakes: dict[str, Any] = field(default_factory=dict)
    compare: Callable[[Any, Any], str | None] | None = None
    n_random: int = 10
    explanation: str | None = None


@dataclass(frozen=True)
class Verdict:
    """What :func:`check` found: true when the answer passed.

    ``seed`` replays the random cases (``check(name, answer, seed=verdict.seed)``). After
    a failure on a case, ``case`` names it (``"edge case 'T = 1'"``, ``"random case 3
    (seed 12)"``), ``inputs`` holds a copy of its arguments, ``expected`` the reference's
    result and ``got`` the answer's (a description where it could not be brought back
    from the checking process). They are ``None`` when the answer passed, and
    ``expected`` is always ``None`` for a value exercise (no spoiler).
    Jupyter does not echo a verdict (the message has already been printed).
    """

    name: str
    passed: bool
    message: str
    seed: int | None = None
    case: str | None = None
    inputs: tuple | None = None
    expected: Any = None
    got: Any = None

    def __bool__(self) -> bool:
        return self.passed

    def _ipython_display_(self) -> None:  # printed by check already; show nothing more
        pass


_REGISTRY: dict[str, Exercise] = {}


def exercise(
    name: str,
    task: str,
    *,
    inputs: Callable[[np.random.Generator], tuple] | None = None,
    edge_cases: dict[str, tuple] | None = None,
    mistakes: dict[str, Any] | None = None,
    compare: Callable[[Any, Any], str | None] | None = None,
    n_random: int = 10,
    explanation: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the reference answer of exercise ``name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if name in _REGISTRY:
        raise ValueError(f"an exercise named {name!r} is already registered")
    if explanation is not None and (inputs is not None or not isinstance(explanation, str)):
        raise ValueError("explanation is for value exercises (inputs=None) and must be a string")
    if not isinstance(n_random, int) or n_random < 0:
        raise ValueError(f"n_random must be a non-negative integer, got {n_random!r}")
    if inputs is not None and n_random == 0 and not edge_cases:
        raise ValueError(f"exercise {name!r} would check nothing: give n_random > 0 or edge_cases")

    def register(reference: Callable[..., Any]) -> Callable[..., Any]:
        _REGISTRY[name] = Exercise(
            name,
            task,
            reference,
            inputs,
            dict(edge_cases or {}),
            dict(mistakes or {}),
            compare,
            n_random,
            explanation,
        )
        return reference

    return register


def available() -> list[str]:
    """The names of all exercises, sorted."""
    return sorted(_REGISTRY)


def describe(name: str) -> str:
    """The one-sentence task of exercise ``name``."""
    return _get(name).task


def _get(name: str) -> Exercise:
    if name not in _REGISTRY:
        raise ValueError(f"unknown exercise {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name]


# --- describing values ------------------------------------------------------------------

_SMALL = 16  # arrays with at most this many entries are shown in full in a message


def _array(x: Any) -> np.ndarray | None:
    """x as a NumPy array when it is array-like (tensor, array, number, list of numbers).

    ``None`` for anything else, including tensors without values (meta) and tensors that
    cannot be read as numbers; never raises.
    """
    try:
        if isinstance(x, torch.Tensor):
            if x.is_meta or x.layout != torch.strided:
                return None
            x = x.detach().cpu().resolve_conj().resolve_neg()
            if x.is_complex():
                return x.numpy()
            return x.double().numpy() if x.is_floating_point() else x.numpy()
        if isinstance(x, np.ndarray):
            return x
        if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 2**62:
            return np.asarray(float(x))  # counts of FLOPs exceed int64
        if isinstance(x, (bool, int, float, np.number, np.bool_)):
            return np.asarray(x)
        if isinstance(x, (list, tuple)) and all(
            isinstance(e, (bool, int, float, np.number, np.bool_)) for e in x
        ):
            return np.asarray(x)
    except Exception:  # an exotic tensor (quantized, nested, ...): not comparable
        return None
    return None


def _numeric(a: np.ndarray | None) -> bool:
    return a is not None and a.dtype.kind in "biufc"


def _dtype_name(x: Any) -> str:
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return str(x.dtype).replace("torch.", "")
    return type(x).__name__


def _num(x: Any) -> str:
    x = x.item() if hasattr(x, "item") else x
    if isinstance(x, float) and not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return f"{x:.6g}" if isinstance(x, float) else repr(x)


_REPR_OK = (bool, int, float, complex, str, bytes, type(None))


def _safe_repr(x: Any, depth: int = 0) -> str | None:
    """repr of a value built from builtin scalars, lists, tuples and dicts; ``None``
    otherwise (a reader's object's ``__repr__`` is never called: it may never return)."""
    if type(x) in _REPR_OK or isinstance(x, (np.number, np.bool_)):
        return repr(x)
    if depth < 3 and type(x) in (list, tuple) and len(x) <= 8:
        items = [_safe_repr(e, depth + 1) for e in x]
        if all(i is not None for i in items):
            if type(x) is tuple:
                return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
            return "[" + ", ".join(items) + "]"
    if depth < 3 and type(x) is dict and len(x) <= 8:
        items = [(_safe_repr(k, depth + 1), _safe_repr(v, depth + 1)) for k, v in x.items()]
        if all(k is not None and v is not None for k, v in items):
            return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    return None


def _describe(x: Any) -> str:
    """A short description of a value for a message: never a module's full repr.

    Arrays and tensors with at most 16 entries are shown in full, larger ones by shape
    and dtype; a reader's own objects by their type (their ``__repr__`` is not called).
    """
    if isinstance(x, nn.Module):
        return f"a {type(x).__name__} module"
    if isinstance(x, (torch.Tensor, np.ndarray)):
        kind = "tensor" if isinstance(x, torch.Tensor) else "array"
        shape = tuple(x.shape)
        if isinstance(x, torch.Tensor) and x.is_meta:
            return f"a meta tensor of shape {shape} ({_dtype_name(x)}): a shape but no values"
        a = _array(x)
        if a is None or not _numeric(a):
            what = "strings" if a is not None and a.dtype.kind in "US" else "objects"
            if a is not None:
                return f"an array of {what} of shape {shape} (dtype {a.dtype})"
            return f"a {kind} of shape {shape} ({_dtype_name(x)}) that cannot be read as numbers"
        if x.ndim == 0:
            return f"a 0-d {kind} ({_dtype_name(x)}) {_num(a)}"
        if a.size <= _SMALL:
            return f"{kind} {_dtype_name(x)} {_values(a)}"
        article = "an" if kind == "array" else "a"
        return f"{article} {kind} of shape {shape} ({_dtype_name(x)}{_range(a)})"
    if isinstance(x, (list, tuple)) and len(x) > 8:
        return f"a {type(x).__name__} of {len(x)} items"
    text = _safe_repr(x)
    if text is None:
        if callable(x) and hasattr(x, "__name__") and isinstance(x.__name__, str):
            return f"the function {x.__name__}"
        return f"a {type(x).__name__} object"
    return text if len(text) <= 60 else text[:57] + "..."


def _range(a: np.ndarray) -> str:
    """ ", from LOW to HIGH" of the finite entries of a numeric array ("" for bool or none)."""
    if a.dtype.kind not in "iuf":
        return ""
    finite = a[np.isfinite(a)] if a.dtype.kind == "f" else a
    if finite.size == 0:
        return ""
    return f", from {_num(finite.min())} to {_num(finite.max())}"


def _values(a: np.ndarray) -> str:
    text = np.array2string(a, precision=4, separator=", ", threshold=_SMALL, max_line_width=10**6)
    return text.replace("\n", "")


def _small(x: Any) -> str | None:
    """x in full when it is an array-like (or a tuple of them) with 2..16 entries."""
    if isinstance(x, tuple) and x and all(_array(e) is not None for e in x):
        parts = [_small(e) or _describe(e) for e in x]
        return "(" + ", ".join(parts) + ")" if any(_small(e) for e in x) else None
    a = _array(x)
    if a is None or not _numeric(a) or not 1 < a.size <= _SMALL:
        return None
    return _values(a)


# --- comparing ------------------------------------------------------------------------


def _tolerances(expected: Any, rtol: float, atol: float) -> tuple[float, float]:
    """Tolerances widened to the resolution of a low-precision expected result (float16 or
    bfloat16 keep about 3 and 2 significant digits: a right answer differs in the last)."""
    name = _dtype_name(expected) if hasattr(expected, "dtype") else ""
    if name in ("float16", "bfloat16"):
        eps = float(torch.finfo(getattr(torch, name)).eps)
        return max(rtol, 4 * eps), max(atol, eps)
    return rtol, atol


def _not_numbers(expected: Any, got: Any, g: np.ndarray | None) -> str:
    kind = _describe_kind(expected)
    if got is None:
        return f"expected {kind}, got None (does your function return its result?)"
    return f"expected {kind}, got {_describe(got)}"


def _describe_kind(x: Any) -> str:
    """What kind of value x is, without its values (a value exercise's answer is secret)."""
    if isinstance(x, np.ndarray):
        return f"an array of shape {tuple(x.shape)}"
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)}"
    if isinstance(x, (bool, np.bool_)):
        return "a bool"
    if isinstance(x, (int, np.integer)):
        return "an integer"
    if isinstance(x, (float, np.floating)):
        return "a number"
    if isinstance(x, tuple):
        return f"a tuple of {len(x)} items"
    return f"a {type(x).__name__}"


def _value_difference(e: np.ndarray, g: np.ndarray, rtol: float, atol: float) -> str | None:
    """Where e and g (same shape) differ, or None when they agree."""
    if e.dtype.kind in "fc" or g.dtype.kind in "fc":
        ef, gf = e.astype(np.complex128 if "c" in e.dtype.kind + g.dtype.kind else np.float64), g
        gf = g.astype(ef.dtype)
        nonfinite = ~np.isfinite(gf) & np.isfinite(ef)
        if nonfinite.any():
            idx = tuple(int(i) for i in np.argwhere(nonfinite)[0])
            where = f" at index {idx}" if idx else ""
            count = int(nonfinite.sum())
            return (
                f"your answer has {_num(gf[idx])}{where} where the expected value is finite "
                f"({_num(e[idx])})"
                + (f"; {count} of {e.size} entries are NaN or inf" if e.size > 1 else "")
            )
        bad = ~np.isclose(gf, ef, rtol=rtol, atol=atol, equal_nan=True)
    else:
        bad = e != g
    if not bad.any():
        return None
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    where = f" at index {idx}" if idx else ""
    n = int(bad.sum())
    return f"expected {_num(e[idx])}{where}, got {_num(g[idx])}" + (
        f" ({n} of {e.size} entries differ)" if e.size > 1 else ""
    )


def _shape_hint(e_shape: tuple, g_shape: tuple) -> str:
    if len(e_shape) == 2 and g_shape == e_shape[::-1]:
        return " (the expected shape transposed)"
    if len(e_shape) == len(g_shape) and sorted(e_shape) == sorted(g_shape):
        return " (the expected axes in another order)"
    if g_shape == e_shape + (1,) or g_shape == (1,) + e_shape:
        return " (an extra axis of size 1)"
    if e_shape == g_shape + (1,) or e_shape == (1,) + g_shape:
        return " (an axis of size 1 is missing: keepdim?)"
    if int(np.prod(e_shape)) == int(np.prod(g_shape)):
        return " (the same number of entries, in another shape)"
    return ""


def close(rtol: float = 1e-5, atol: float = 1e-6, same_dtype: bool = False):
    """A comparison of numbers, arrays and tensors (and tuples of them) within tolerances.

    ``same_dtype``: a tensor or array answer must have the reference's dtype (a mask must
    be bool; a float32 input gives a float32 output).

    The message names the first difference in this order: not numbers at all (``None``,
    strings, a meta tensor), the shape, the dtype (saying whether the values agree), NaN
    or inf where the expected value is finite, then the first differing entry. Where the
    expected result is float16 or bfloat16 the tolerances widen to that dtype's resolution.
    """

    def compare(expected: Any, got: Any) -> str | None:
        if isinstance(expected, tuple):
            if not isinstance(got, tuple) or len(got) != len(expected):
                return f"expected a tuple of {len(expected)} items, got {_describe(got)}"
            for i, (e, g) in enumerate(zip(expected, got, strict=True)):
                msg = compare(e, g)
                if msg is not None:
                    return f"item {i} of the tuple: {msg}"
            return None
        e, g = _array(expected), _array(got)
        if not _numeric(g):
            return _not_numbers(expected, got, g)
        if e.shape != g.shape:
            msg = f"expected shape {tuple(e.shape)}, got shape {tuple(g.shape)}"
            msg += _shape_hint(tuple(e.shape), tuple(g.shape))
            if _dtype_differs(expected, got) and same_dtype:
                msg += f"; the dtype differs too ({_dtype_name(expected)} expected)"
            return msg
        r, a = _tolerances(expected, rtol, atol)
        values = _value_difference(e, g, r, a)
        if same_dtype and _dtype_differs(expected, got):
            kind = "tensor" if isinstance(expected, torch.Tensor) else "array"
            head = f"expected a {_dtype_name(expected)} {kind}, got {_dtype_name(got)}"
            if values is None:
                return f"{head}: only the dtype is wrong, the values agree"
            return f"{head} (the dtype is wrong), and the values differ too: {values}"
        if values is not None and _dtype_differs(expected, got) and g.dtype.kind == "f":
            low = _dtype_name(got) in ("float16", "bfloat16")
            if low and _dtype_name(expected) not in ("float16", "bfloat16"):
                values += (
                    f" (your answer is {_dtype_name(got)}, which keeps about 3 significant "
                    f"digits; the expected result is {_dtype_name(expected)})"
                )
        return values

    return compare


def _dtype_differs(expected: Any, got: Any) -> bool:
    return isinstance(expected, (torch.Tensor, np.ndarray)) and _dtype_name(got) != _dtype_name(
        expected
    )


def exact_int(expected: Any, got: Any) -> str | None:
    """An integer answer (a position, a count): exactly right or wrong. ``None`` allowed."""
    if expected is None or got is None:
        return None if got is expected else f"expected {expected!r}, got {_describe(got)}"
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, np.integer)):
        return f"expected an integer, got {_describe(got)}"
    if int(got) != expected:
        return f"expected {expected:,}, got {int(got):,}"
    return None


def int_list(expected: list[int], got: Any) -> str | None:
    """A list of integers, in order (a NumPy or torch vector is accepted)."""
    g = _array(got)
    if g is None or g.ndim != 1 or (g.size and g.dtype.kind not in "iu"):
        return f"expected a list of integers, got {_describe(got)}"
    return None if g.tolist() == list(expected) else f"expected {expected}, got {g.tolist()}"


def _same(a: Any, b: Any) -> bool:
    """True when a and b are equal values (NaN equal to NaN), whatever their dtypes."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    x, y = _array(a), _array(b)
    if x is None or y is None:
        if x is None and y is None and _safe_repr(a) is not None and _safe_repr(b) is not None:
            return bool(a == b)
        return False
    if x.shape != y.shape or not _numeric(x) or not _numeric(y):
        return False
    if x.dtype.kind in "fc" or y.dtype.kind in "fc":
        return bool(np.allclose(x, y, rtol=1e-4, atol=1e-6, equal_nan=True))
    return bool((x == y).all())


def _agrees(compare: Callable[[Any, Any], str | None], expected: Any, got: Any) -> bool | None:
    """compare(expected, got) is None; ``None`` when the comparison itself fails."""
    try:
        return compare(expected, got) is None
    except Exception:
        return None


def _diagnose(expected: Any, got: Any) -> str | None:
    """A generic description of how got relates to expected, for an unnamed mistake:
    transposed, normalised along another axis, sign flipped, a constant factor or
    offset, reversed or shifted along an axis. ``None`` when none of these holds."""
    if isinstance(expected, tuple) and isinstance(got, tuple) and len(got) == len(expected):
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            if not _same(e, g):
                found = _diagnose(e, g)
                if found:
                    return f"item {i} of the tuple: {found}" if len(expected) > 1 else found
        return None
    e, g = _array(expected), _array(got)
    if not (_numeric(e) and _numeric(g)) or e.shape != g.shape or e.size < 2:
        return None
    e, g = e.astype(np.float64), g.astype(np.float64)
    if np.allclose(g, e, rtol=1e-4, atol=1e-6, equal_nan=True):
        return None  # the values agree: nothing to diagnose (a dtype, say, differs)
    if not (np.isfinite(e).all() and np.isfinite(g).all()):
        return None
    rtol, atol = _tolerances(expected, 1e-4, 1e-6)

    def near(a, b):
        return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))

    if e.ndim >= 2 and e.shape[-1] == e.shape[-2] and near(g, np.swapaxes(e, -1, -2)):
        return "your result is the expected one transposed (rows and columns swapped)"
    if e.ndim >= 2 and (e >= -atol).all() and (g >= -atol).all():
        e_axes = [ax for ax in range(e.ndim) if _normalised(e, ax)]
        g_axes = [ax for ax in range(e.ndim) if _normalised(g, ax)]
        if e_axes and g_axes and not set(e_axes) & set(g_axes):
            return (
                f"your result sums to 1 along axis {g_axes[0]}, the expected one along axis "
                f"{e_axes[0]}: normalised over the wrong axis?"
            )
    scale = float(np.abs(e).max())
    if scale > atol and near(g, -e):
        return "your result is the expected one with the sign flipped"
    if (np.abs(e) > max(atol, 1e-12 * scale)).sum() >= 2:
        c = float((g * e).sum() / (e * e).sum())
        if not np.isclose(c, 1.0, rtol=rtol) and c != 0.0 and near(g, c * e):
            return f"your result is {c:.6g} times the expected one (off by a constant factor)"
    if not near(e, np.full_like(e, e.flat[0])):
        c = float((g - e).mean())
        if abs(c) > atol and near(g, e + c):
            return f"your result is the expected one plus {c:.6g} (off by a constant)"
    for ax in range(e.ndim):
        n = e.shape[ax]
        if n >= 2 and not near(e, np.flip(e, ax)) and near(g, np.flip(e, ax)):
            return f"your result is the expected one reversed along axis {ax}"
        if n >= 3:
            head, tail = (
                (slice(None),) * ax + (slice(1, None),),
                (slice(None),) * ax + (slice(None, -1),),
            )
            if not near(e[head], e[tail]):
                if near(g[head], e[tail]):
                    return f"your result is the expected one shifted by one along axis {ax}"
                if near(g[tail], e[head]):
                    return f"your result is the expected one shifted back by one along axis {ax}"
    return None


def _normalised(a: np.ndarray, axis: int) -> bool:
    """Every slice along ``axis`` sums to 1 (or 0: a fully masked row), at least one to 1."""
    if a.shape[axis] < 2:
        return False
    s = a.sum(axis=axis)
    ones = np.isclose(s, 1.0, atol=1e-4)
    return bool((ones | np.isclose(s, 0.0, atol=1e-4)).all() and ones.any())


def _copy(args: tuple) -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else copy.deepcopy(a) for a in args)


def _unchanged(before: Any, after: Any) -> bool:
    """True when the reader's copy of an argument still equals the original."""
    try:
        return _equal(before, after)
    except Exception:  # a dtype or device changed in place, say: not the same any more
        return False


def _equal(before: Any, after: Any) -> bool:
    if isinstance(before, torch.Tensor):
        return (
            isinstance(after, torch.Tensor)
            and before.dtype == after.dtype
            and before.shape == after.shape
            and torch.equal(before, after)
        )
    if isinstance(before, np.ndarray):
        return (
            isinstance(after, np.ndarray)
            and before.dtype == after.dtype
            and np.array_equal(before, after, equal_nan=before.dtype.kind in "fc")
        )
    if isinstance(before, nn.Module):
        s1, s2 = before.state_dict(), after.state_dict()
        return s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)
    return True


# --- random cases ---------------------------------------------------------------------


def random_tensor(
    rng: np.random.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """A tensor of the given shape with N(0, scale^2) entries drawn from ``rng`` (a case's
    generator, so the seed in a failure message replays it)."""
    return torch.from_numpy(rng.normal(0.0, scale, size=shape)).to(dtype)


def _cases(ex: Exercise, seed: int):
    """(index, label, arguments) of every case of a check, in order: the edge cases, then
    the random cases drawn from one generator seeded by ``seed``."""
    for i, (label, args) in enumerate(ex.edge_cases.items()):
        yield i, f"edge case '{label}'", args
    rng = np.random.default_rng(seed)
    for i in range(ex.n_random):
        yield len(ex.edge_cases) + i, f"random case {i + 1} (seed {seed})", ex.inputs(rng)


def _case(ex: Exercise, seed: int, index: int) -> tuple[str, tuple]:
    """The label and (a copy of) the arguments of case ``index``, drawn again."""
    for i, label, args in _cases(ex, seed):
        if i == index:
            return label, _copy(args)
    raise IndexError(index)


# --- running the reader's code --------------------------------------------------------


class _TimeUp(BaseException):
    """Raised inside the reader's code when its time is up (not an Exception: a bare
    ``except Exception`` in the reader's code cannot swallow it)."""


@contextlib.contextmanager
def _global_state_kept():
    """Restore what the reader's code may change globally: the random states of Python,
    NumPy and torch, torch's default dtype and device, grad mode, anomaly mode, deterministic flag,
    thread count and matmul precision, NumPy's error handling and print options, the
    warning filters, ``sys.stdout``/``sys.stderr`` and the recursion limit."""
    py_state, np_state = random.getstate(), np.random.get_state()
    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    anomaly, threads = torch.is_anomaly_enabled(), torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    matmul = torch.get_float32_matmul_precision()
    device = torch.get_default_device() if hasattr(torch, "get_default_device") else None
    np_err, np_print = np.geterr(), np.get_printoptions()
    out, err, recursion = sys.stdout, sys.stderr, sys.getrecursionlimit()
    try:
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        torch.set_anomaly_enabled(anomaly)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        if (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        ) != (deterministic, warn_only):
            torch.use_deterministic_algorithms(
                deterministic, warn_only=warn_only
            )  # slow: if changed
        if torch.get_float32_matmul_precision() != matmul:
            torch.set_float32_matmul_precision(matmul)
        if device is not None and torch.get_default_device() != device:
            torch.set_default_device(device)
        np.seterr(**np_err)
        np.set_printoptions(**np_print)
        sys.stdout, sys.stderr = out, err
        sys.setrecursionlimit(recursion)


def _run_limited(fn: Callable[..., Any], args: tuple, seconds: float) -> tuple[str, Any]:
    """Call fn(*args) within ``seconds``: ("ok", value), ("error", exception) or ("timeout", None).

    In the main thread (a script, a Jupyter kernel, the checking child process) a SIGALRM
    timer interrupts the call, and keeps interrupting it every 50 ms until it returns (a
    loop that swallows one interruption with a bare ``except:`` meets the next); elsewhere
    the call runs in a daemon thread that is abandoned when the time is up. The global
    state the call may change (:func:`_global_state_kept`) is restored afterwards.
    """
    with _global_state_kept():
        if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
            return _run_with_alarm(fn, args, seconds)
        return _run_in_thread(fn, args, seconds)


def _run_with_alarm(fn, args, seconds):
    def time_up(signum, frame):
        raise _TimeUp

    previous = signal.signal(signal.SIGALRM, time_up)
    try:
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3), 0.05)
        try:
            return "ok", fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _TimeUp:
        return "timeout", None
    except (Exception, SystemExit) as err:  # a reader's bug is reported, not raised
        return "error", err
    finally:
        signal.signal(signal.SIGALRM, previous)


def _run_in_thread(fn, args, seconds):
    box: dict[str, Any] = {}

    def target():
        try:
            box["ok"] = fn(*args)
        except BaseException as err:  # reported to the caller
            box["error"] = err

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        return "timeout", None
    return ("ok", box["ok"]) if "ok" in box else ("error", box["error"])


def _text(obj: Any) -> str:
    """str(obj) of a reader's object (an exception), given one second to return."""
    status, text = _run_limited(str, (obj,), 1.0)
    if status != "ok" or not isinstance(text, str):
        return "(its message could not be shown)"
    return text if len(text) <= 500 else text[:497] + "..."


# --- the checking child process ---------------------------------------------------------

#: Run each check in a forked child process where the platform has ``fork`` (Linux): the
#: child is killed when the time is up, whatever the reader's code does, and nothing it
#: changes reaches the notebook. Set to False to check in-process (a debugger, a profiler).
RUN_IN_CHILD = sys.platform.startswith("linux") and hasattr(os, "fork")

_GRACE = 1.0  # seconds the parent waits past the time limit before it kills the child
_MAX_ENTRIES = 10**6  # a larger result travels back as its description only
_MAX_OUTPUT = 20_000  # characters of the reader's printed output relayed to the notebook


@dataclass
class _Outcome:
    """What one check found, as it travels back from the child process."""

    passed: bool
    message: str
    index: int | None = None  # the case that failed (for the replay and verdict.inputs)
    expected: Any = None
    got: Any = None
    replay: bool = False  # the message should say how to replay the case
    stdout: str = ""
    stderr: str = ""
    committed: bool = False  # a prediction of the right kind was compared (show the why)


class _Capped(io.StringIO):
    """An output stream keeping the first ``_MAX_OUTPUT`` characters."""

    def write(self, s: str) -> int:
        room = _MAX_OUTPUT - self.tell()
        if room > 0:
            super().write(s[:room] if len(s) > room else s)
            if len(s) > room:
                super().write("\n[... the rest of your printed output was cut]\n")
        return len(s)


def _portable(x: Any, depth: int = 0) -> Any:
    """x made of builtin values, arrays and tensors only (it is sent back pickled; the
    parent never unpickles a reader's own class), or its description."""
    if x is None or isinstance(x, (bool, int, float, complex, str, bytes, np.number, np.bool_)):
        return x
    if isinstance(x, torch.Tensor):
        if x.is_meta or x.layout != torch.strided or x.numel() > _MAX_ENTRIES:
            return _describe(x)
        try:
            return x.detach().cpu().clone()
        except Exception:
            return _describe(x)
    if isinstance(x, np.ndarray):
        return x.copy() if x.dtype != object and x.size <= _MAX_ENTRIES else _describe(x)
    if type(x) in (tuple, list) and depth < 3 and len(x) <= 1000:
        return type(x)(_portable(e, depth + 1) for e in x)
    return _describe(x)


def _send(fd: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    data = struct.pack("!Q", len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def _child(work: Callable[[Callable[[int], None]], _Outcome], fd: int) -> None:
    """The body of the checking child process; never returns."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
        gc.freeze()  # the collector leaves the inherited objects alone (no copy-on-write)
        torch.set_num_threads(1)  # OpenMP's threads do not survive a fork
        sys.stdout, sys.stderr = _Capped(), _Capped()
        out, err = sys.stdout, sys.stderr
        _quiet_the_kernel()
        outcome = work(lambda index: _send(fd, ("case", index)))
        outcome.stdout, outcome.stderr = out.getvalue(), err.getvalue()
        outcome.expected, outcome.got = _portable(outcome.expected), _portable(outcome.got)
        try:
            _send(fd, ("done", outcome))
        except Exception:  # a value that does not pickle: send its description
            outcome.expected, outcome.got = _describe(outcome.expected), _describe(outcome.got)
            _send(fd, ("done", outcome))
    except BaseException as error:  # the checker's own failure: report it, do not hang
        try:
            _send(fd, ("crash", f"{type(error).__name__}: {error}"))
        except BaseException:
            pass
    finally:
        os._exit(0)


def _quiet_the_kernel() -> None:
    """In the child: no input() and no rich display, which would talk to the Jupyter
    kernel over the parent's sockets (not safe from a forked process)."""

    def no_input(*args: Any) -> str:
        raise RuntimeError("input() is not available while an answer is checked")

    builtins.input = no_input
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
        if shell is not None and getattr(shell, "display_pub", None) is not None:
            shell.display_pub.publish = lambda *args, **kwargs: None
    except Exception:  # not a kernel we know: leave it
        pass


_ZOMBIES: list[int] = []


def _reap() -> None:
    for pid in list(_ZOMBIES):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _ZOMBIES.remove(pid)


def _in_child(
    work: Callable[[Callable[[int], None]], _Outcome], seconds: float
) -> tuple[str, Any, int | None]:
    """Run ``work`` in a forked child process, killed ``_GRACE`` s past ``seconds``.

    Returns ("done", outcome, None), ("timeout", None, last case started),
    ("died", how it ended, last case started) or ("crash", text, None).
    """
    _reap()
    read, write = os.pipe()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12: fork with threads
            pid = os.fork()
    except OSError:  # no memory or too many processes: check in-process instead
        os.close(read)
        os.close(write)
        return "no fork", None, None
    if pid == 0:
        os.close(read)
        _child(work, write)
    os.close(write)
    deadline = time.monotonic() + seconds + _GRACE
    buffer, last, result = bytearray(), None, None
    waiting = select.poll()  # Linux only, as the fork is
    waiting.register(read, select.POLLIN)
    try:
        while result is None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if not waiting.poll(left * 1000):
                continue
            chunk = os.read(read, 1 << 16)
            if not chunk:
                break  # the child has gone
            buffer += chunk
            while len(buffer) >= 8:
                size = struct.unpack("!Q", buffer[:8])[0]
                if len(buffer) < 8 + size:
                    break
                kind, payload = pickle.loads(buffer[8 : 8 + size])
                del buffer[: 8 + size]
                if kind == "case":
                    last = payload
                else:
                    result = (kind, payload, None)
    except BaseException:  # Ctrl-C: stop the child, then let the interrupt through
        _kill(pid)
        raise
    finally:
        os.close(read)
    if result is not None:
        _ZOMBIES.append(pid)  # it is exiting; reaped by a later check
        return result
    if time.monotonic() >= deadline:
        _kill(pid)
        return "timeout", None, last
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        how = f"the process running it was killed by signal {os.WTERMSIG(status)}"
    else:
        how = f"it ended the process running it (exit status {os.waitstatus_to_exitcode(status)})"
    return "died", how, last


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


# --- check ----------------------------------------------------------------------------


def check(name: str, answer: Any, *, seed: int | None = None, time_limit: float = 10.0) -> Verdict:
    """Check a reader's answer to exercise ``name``; print ``✓ ...`` or ``✗ ...``.

    Args:
        name: the exercise's name as given in the chapter (see :func:`available`).
        answer: a function (run on the edge cases and on random cases, compared with the
            reference) or, for a value exercise, the value (or a function of no arguments
            returning it).
        seed: replays the random cases of an earlier call (its message gives the seed);
            by default every call draws new cases.
        time_limit: seconds the check may run in all, across the cases.

    Returns:
        A :class:`Verdict`, true when every case agrees; on a failure it holds the failing
        case (``inputs``, ``expected``, ``got``). Exceptions from the reader's code, a
        time-out and an input modified in place are reported in the message, not raised.
        An unknown ``name`` raises ``ValueError`` (that is the caller's mistake, not the
        answer's); Ctrl-C interrupts the check.

    Where the platform has ``fork`` (Linux), the answer runs in a child process: it is
    stopped at most a second past ``time_limit`` whatever it does (a C-level loop, a bare
    ``except:``, a ``__repr__`` that never returns), a crash or ``os._exit`` in it is
    reported, and nothing it changes (default dtype, grad mode, ``np.seterr``, warning
    filters, random states, variables) reaches the notebook; what it prints is relayed.
    Elsewhere it runs in-process under a timer, with that global state restored after each
    call. Neither is a sandbox: an answer written to do harm on purpose (deleting files,
    killing the notebook's process, ...) can, and in-process a C-level call that never
    returns cannot be stopped.
    """
    ex = _get(name)
    if seed is None:
        seed = secrets.randbelow(2**31)
    elif not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
    if not isinstance(time_limit, (int, float)) or not time_limit > 0:
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    seed, time_limit = int(seed), float(time_limit)
    if ex.inputs is None:
        seed = None

        def work(progress: Callable[[int], None]) -> _Outcome:
            return _check_value(ex, answer, time_limit)
    else:

        def work(progress: Callable[[int], None]) -> _Outcome:
            return _check_function(ex, answer, seed, time_limit, progress)

    outcome = _run_check(ex, work, seed, time_limit)
    if outcome.stdout:
        sys.stdout.write(outcome.stdout)
    if outcome.stderr:
        sys.stderr.write(outcome.stderr)
    msg, case, inputs = outcome.message, None, None
    if outcome.index is not None:
        case, inputs = _case(ex, seed, outcome.index)
    if outcome.replay:
        msg += _details(ex, answer, seed, outcome)
    print(("✓ " if outcome.passed else "✗ ") + f"{name}: {msg}")
    if ex.explanation is not None and outcome.committed:  # not on a wrong kind: no spoiler
        print(f"  Why: {ex.explanation}")
    expected = outcome.expected if ex.inputs is not None else None  # a value: no spoiler
    return Verdict(name, outcome.passed, msg, seed, case, inputs, expected, outcome.got)


def _run_check(ex: Exercise, work, seed: int | None, time_limit: float) -> _Outcome:
    if not RUN_IN_CHILD:
        return work(lambda index: None)
    kind, payload, last = _in_child(work, time_limit)
    if kind == "no fork":
        return work(lambda index: None)
    if kind == "done":
        return payload
    if kind == "crash":  # the checker itself failed in the child: say so, do not guess
        return _Outcome(False, f"the check could not run ({payload}).")
    why = (
        _failure("timeout", None, time_limit)
        if kind == "timeout"
        else f"your code did not return: {payload}."
    )
    if last is None or ex.inputs is None:
        return _Outcome(False, why, got=None)
    label, args = _case(ex, seed, last)
    return _Outcome(False, f"{label}, inputs {_show(args)}: {why}", index=last, replay=True)


def _details(ex: Exercise, answer: Any, seed: int, outcome: _Outcome) -> str:
    """The lines after a failure: small arrays in full, and how to replay the case."""
    lines = []
    e, g = _small(outcome.expected), _small(outcome.got)
    if e is not None and g is not None:
        lines += [f"  expected: {e}", f"  got:      {g}"]
    fname = getattr(answer, "__name__", None)
    if not isinstance(fname, str) or not fname.isidentifier():
        fname = "your_function"
    lines.append(
        f"  To replay this case: v = exercises.check({ex.name!r}, {fname}, seed={seed}); "
        "then v.inputs, v.expected and v.got hold its arguments and results."
    )
    return "\n" + "\n".join(lines)


def _check_value(ex: Exercise, answer: Any, time_limit: float) -> _Outcome:
    """A value is right or not; the message never shows the expected value (no spoiler)."""
    compare = ex.compare or close()
    if callable(answer):
        status, answer = _run_limited(answer, (), time_limit)
        if status != "ok":
            return _Outcome(False, _failure(status, answer, time_limit))
    if answer is None:
        return _Outcome(False, "no answer yet (the value is None).")
    expected = ex.reference()
    try:
        msg = compare(expected, answer)
    except Exception:  # a comparison that cannot read the answer at all
        msg = f"expected {_describe_kind(expected)}, got {_describe(answer)}"
    if msg is None:
        return _Outcome(True, "correct.", got=answer, committed=True)
    if msg.startswith(("expected a", "expected shape")) and "differ" not in msg:
        # the kind of answer is wrong (type, shape, dtype): saying so gives nothing away
        return _Outcome(False, msg + ".", got=answer)
    side = ""
    e, g = _array(expected), _array(answer)
    if _numeric(e) and _numeric(g) and e.ndim == 0 and g.ndim == 0 and g.dtype.kind in "iuf":
        side = " (too small)" if g < e else " (too large)"
    named = _name_mistake(ex, compare, expected, answer, lambda wrong: wrong)
    msg = f"{_describe(answer)} is not right{side}." + _hint(named)
    return _Outcome(False, msg, got=answer, committed=True)


def _failure(status: str, err: Any, time_limit: float) -> str:
    if status == "timeout":
        return (
            f"your code did not finish within {time_limit:g} s in all (an endless loop, "
            "or far too slow); it was stopped."
        )
    if isinstance(err, NotImplementedError):
        return "not implemented yet (your function raised NotImplementedError)."
    text = _text(err)
    if "forked subprocess" in text:
        text += " (the check runs your code in a child process on the CPU: leave CUDA out)"
    return f"your code raised {type(err).__name__}: {text}"


def _check_function(
    ex: Exercise,
    answer: Any,
    seed: int,
    time_limit: float,
    progress: Callable[[int], None] = lambda index: None,
) -> _Outcome:
    if not callable(answer):
        return _Outcome(False, f"expected a function, got {_describe(answer)}.")
    compare = ex.compare or close()
    deadline = time.monotonic() + time_limit
    n_cases = 0
    for index, label, args in _cases(ex, seed):
        progress(index)
        n_cases += 1
        given = _copy(args)
        expected = ex.reference(*_copy(args))
        status, got = _run_limited(answer, given, deadline - time.monotonic())
        if status != "ok":
            if isinstance(got, NotImplementedError):
                return _Outcome(False, _failure(status, got, time_limit))
            return _Outcome(
                False,
                f"{label}, inputs {_show(args)}: {_failure(status, got, time_limit)}",
                index=index,
                replay=True,
            )
        changed = [
            i for i, (a, b) in enumerate(zip(args, given, strict=True)) if not _unchanged(a, b)
        ]
        if changed:
            return _Outcome(
                False,
                f"{label}, inputs {_show(args)}: your function modified its argument "
                f"{changed[0] + 1} in place; it must leave its inputs unchanged.",
                index=index,
                expected=expected,
                got=got,
                replay=True,
            )
        try:
            msg = compare(expected, got)
        except Exception as err:  # a comparison that cannot read the answer at all
            msg = f"expected {_describe_kind(expected)}, got {_describe(got)} ({_text(err)})"
        if msg is not None:
            named = _name_mistake(
                ex, compare, expected, got, lambda wrong, args=args: wrong(*_copy(args))
            )
            hint = _hint(named)
            if named is None:
                found = _diagnose(expected, got)
                hint = f" {found[0].upper()}{found[1:]}" if found else ""
                hint += "" if not found or found.endswith("?") else "."
            return _Outcome(
                False,
                f"{label}, inputs {_show(args)}: {msg}.{hint}",
                index=index,
                expected=expected,
                got=got,
                replay=True,
            )
    if ex.edge_cases:
        return _Outcome(
            True, f"all {len(ex.edge_cases)} edge cases and {ex.n_random} random cases agree."
        )
    return _Outcome(True, f"all {ex.n_random} random cases agree.")


def _hint(named: tuple[str, bool] | None) -> str:
    if named is None:
        return ""
    mistake, exact = named
    return (
        f" This looks like: {mistake}."
        if exact
        else f" Apart from the dtype, this looks like: {mistake}."
    )


def _name_mistake(
    ex: Exercise, compare, expected: Any, got: Any, output: Callable[[Any], Any]
) -> tuple[str, bool] | None:
    """The named mistake the answer reproduces: (name, True) when it agrees with the
    mistake's output by the exercise's own comparison (so dtype and shape too), else
    (name, False) when it agrees in values only and the dtype differs. A mistake whose
    output agrees with the reference on this case is never named: it cannot be the bug."""
    values_only = None
    for mistake, wrong in ex.mistakes.items():
        try:
            out = output(wrong)
        except Exception:  # a mistake that cannot run on these inputs is not this one
            continue
        if _agrees(compare, expected, out) is not False:
            continue  # indistinguishable from the right answer here (or not comparable)
        if _agrees(compare, out, got):
            return mistake, True
        if (
            values_only is None
            and _dtype_name(out) != _dtype_name(got)
            and _same(out, got)
            and not _same(out, expected)  # a mistake of values, not itself of the dtype
        ):
            values_only = (mistake, False)
    return values_only


def _show(args: tuple) -> str:
    return "(" + ", ".join(_describe(a) for a in args) + ")"
