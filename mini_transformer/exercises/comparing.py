"""Comparing a reader's result with the reference, and saying what differs.

The message names the first difference a learner can act on (not numbers at all, the shape,
the dtype, NaN or inf, then the first differing entry) and, for an unnamed mistake, how the
result relates to the expected one (transposed, normalised along another axis, off by a
factor, ...). A reader's object's ``__repr__`` is never called: it may never return.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

_SMALL = 16  # arrays with at most this many entries are shown in full in a message

_SCALARS = (bool, int, float, np.number, np.bool_)


class _Described(str):
    """The description of a result that is not plain data (shown as it is, never quoted)."""


def _array(x: Any) -> np.ndarray | None:
    """x as a NumPy array when it is array-like (a readable tensor, an array, a number, a
    (nested) list of numbers); ``None`` otherwise. Never raises."""
    try:
        if isinstance(x, torch.Tensor):
            if x.is_meta or x.layout != torch.strided:
                return None
            x = x.detach().cpu().resolve_conj().resolve_neg()
            return x.double().numpy() if x.is_floating_point() else x.numpy()
        if isinstance(x, np.ndarray):
            return x
        if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 2**62:
            return np.asarray(float(x))  # counts of FLOPs exceed int64
        if isinstance(x, (*_SCALARS, list, tuple)) and np.asarray(x).dtype.kind in "biufc":
            return np.asarray(x)  # a number, or a (nested) list of numbers
    except Exception:  # an exotic tensor (quantized, nested, ...): not comparable
        pass
    return None


def _numeric(a: np.ndarray | None) -> bool:
    return a is not None and a.dtype.kind in "biufc"


def _dtype_name(x: Any) -> str:
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return str(x.dtype).replace("torch.", "")
    return type(x).__name__


def _num(x: Any, digits: int = 6) -> str:
    x = x.item() if hasattr(x, "item") else x
    if isinstance(x, float) and not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return f"{x:.{digits}g}" if isinstance(x, float) else repr(x)


def _safe_repr(x: Any, depth: int = 0) -> str | None:
    """repr of a value built from builtin scalars, lists, tuples and dicts; else ``None``."""
    if type(x) in (bool, int, float, complex, str, bytes, type(None)) or isinstance(
        x, (np.number, np.bool_)
    ):
        return repr(x)
    if depth >= 3 or type(x) not in (list, tuple, dict) or len(x) > 8:
        return None
    if type(x) is dict:
        items = [(_safe_repr(k, depth + 1), _safe_repr(v, depth + 1)) for k, v in x.items()]
        ok = all(k is not None and v is not None for k, v in items)
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}" if ok else None
    items = [_safe_repr(e, depth + 1) for e in x]
    if any(i is None for i in items):
        return None
    if type(x) is tuple:
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return "[" + ", ".join(items) + "]"


def _describe(x: Any) -> str:
    """A short description of a value for a message: arrays and tensors with at most 16
    entries in full, larger ones by shape, dtype and range; a reader's objects by type."""
    if isinstance(x, _Described):
        return str(x)
    if isinstance(x, nn.Module):
        return f"a {type(x).__name__} module"
    if isinstance(x, (torch.Tensor, np.ndarray)):
        kind = "tensor" if isinstance(x, torch.Tensor) else "array"
        shape, dtype = tuple(x.shape), _dtype_name(x)
        if isinstance(x, torch.Tensor) and x.is_meta:
            return f"a meta tensor of shape {shape} ({dtype}): a shape but no values"
        a = _array(x)
        if a is None:
            return f"a {kind} of shape {shape} ({dtype}) that cannot be read as numbers"
        if not _numeric(a):
            what = "strings" if a.dtype.kind in "US" else "objects"
            return f"an array of {what} of shape {shape} (dtype {a.dtype})"
        if x.ndim == 0:
            return f"a 0-d {kind} ({dtype}) {_num(a)}"
        if a.size <= _SMALL:
            return f"{kind} {dtype} {_values(a)}"
        span = ""
        finite = a[np.isfinite(a)] if a.dtype.kind == "f" else a
        if a.dtype.kind in "iuf" and finite.size:
            span = f", from {_num(finite.min())} to {_num(finite.max())}"
        return f"{'an' if kind == 'array' else 'a'} {kind} of shape {shape} ({dtype}{span})"
    if isinstance(x, (list, tuple)) and x and all(isinstance(e, torch.Tensor) for e in x):
        shapes = ", ".join(str(tuple(e.shape)) for e in x[:8]) + (", ..." if len(x) > 8 else "")
        return f"a {type(x).__name__} of {len(x)} tensors of shapes {shapes}"
    if isinstance(x, (list, tuple)) and len(x) > 8:
        return f"a {type(x).__name__} of {len(x)} items"
    text = _safe_repr(x)
    if text is None:
        if callable(x) and isinstance(getattr(x, "__name__", None), str):
            return f"the function {x.__name__}"
        return f"a {type(x).__name__} object"
    return text if len(text) <= 60 else text[:57] + "..."


def _values(a: np.ndarray) -> str:
    text = np.array2string(a, precision=4, separator=", ", threshold=_SMALL, max_line_width=10**6)
    return text.replace("\n", "")


def _small(x: Any) -> str | None:
    """x in full when it is an array-like (or a tuple of them) with 2..16 entries."""
    if isinstance(x, tuple) and x and all(_array(e) is not None for e in x):
        if not any(_small(e) for e in x):
            return None
        return "(" + ", ".join(_small(e) or _describe(e) for e in x) + ")"
    a = _array(x)
    return _values(a) if _numeric(a) and 1 < a.size <= _SMALL else None


def _describe_kind(x: Any) -> str:
    """What kind of value x is, without its values (a value exercise's answer is secret)."""
    if isinstance(x, (np.ndarray, torch.Tensor)):
        kind = "an array" if isinstance(x, np.ndarray) else "a tensor"
        return f"{kind} of shape {tuple(x.shape)}"
    for kinds, text in (((bool, np.bool_), "a bool"), ((int, np.integer), "an integer")):
        if isinstance(x, kinds):
            return text
    if isinstance(x, (float, np.floating)):
        return "a number"
    return f"a tuple of {len(x)} items" if isinstance(x, tuple) else f"a {type(x).__name__}"


def _tolerances(expected: Any, rtol: float, atol: float) -> tuple[float, float]:
    """Tolerances widened to a float16 or bfloat16 expected result's resolution (about 3 and
    2 significant digits: a right answer differs in the last)."""
    name = _dtype_name(expected) if hasattr(expected, "dtype") else ""
    if name in ("float16", "bfloat16"):
        eps = float(torch.finfo(getattr(torch, name)).eps)
        return max(rtol, 4 * eps), max(atol, eps)
    return rtol, atol


def _value_difference(e: np.ndarray, g: np.ndarray, rtol: float, atol: float) -> str | None:
    """Where e and g (same shape) differ: NaN or inf where e is finite first, then the first
    differing entry; ``None`` when they agree."""
    bad = e != g
    if e.dtype.kind in "fc" or g.dtype.kind in "fc":
        ef = e.astype(np.complex128 if "c" in e.dtype.kind + g.dtype.kind else np.float64)
        gf = g.astype(ef.dtype)
        nonfinite = ~np.isfinite(gf) & np.isfinite(ef)
        if nonfinite.any():
            idx = tuple(int(i) for i in np.argwhere(nonfinite)[0])
            count = int(nonfinite.sum())
            return (
                f"your answer has {_num(gf[idx])}{f' at index {idx}' if idx else ''} where the "
                f"expected value is finite ({_num(e[idx])})"
                + (f"; {count} of {e.size} entries are NaN or inf" if e.size > 1 else "")
            )
        bad = ~np.isclose(gf, ef, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    idx, n = tuple(int(i) for i in np.argwhere(bad)[0]), int(bad.sum())
    digits, close_to = 6, ""  # as many digits as it takes to see the difference
    while digits < 17 and _num(e[idx], digits) == _num(g[idx], digits):
        digits += 1
    if digits > 6:  # equal to 6 digits: say how far apart, against the tolerance
        rel = abs(float(g[idx]) - float(e[idx])) / abs(float(e[idx]))
        close_to = f", a relative difference of {rel:.1e} (the tolerance is {rtol:g})"
    where = f" at index {idx}" if idx else ""
    return f"expected {_num(e[idx], digits)}{where}, got {_num(g[idx], digits)}{close_to}" + (
        f" ({n} of {e.size} entries differ)" if e.size > 1 else ""
    )


def _shape_hint(e_shape: tuple, g_shape: tuple) -> str:
    if len(e_shape) == 2 and g_shape == e_shape[::-1]:
        return " (the expected shape transposed)"
    if len(e_shape) == len(g_shape) and sorted(e_shape) == sorted(g_shape):
        return " (the expected axes in another order)"
    if g_shape in (e_shape + (1,), (1,) + e_shape):
        return " (an extra axis of size 1)"
    if e_shape in (g_shape + (1,), (1,) + g_shape):
        return " (an axis of size 1 is missing: keepdim?)"
    if math.prod(e_shape) == math.prod(g_shape):
        return " (the same number of entries, in another shape)"
    return ""


def close(rtol: float = 1e-5, atol: float = 1e-6, same_dtype: bool = False):
    """A comparison of numbers, arrays and tensors (and tuples of them) within tolerances.

    ``same_dtype``: the answer must have the reference's dtype (a mask must be bool; a
    float32 input gives a float32 output). The message names the first difference in this
    order: not numbers at all, the shape, the dtype (saying whether the values agree), NaN
    or inf where the expected value is finite, then the first differing entry.
    """

    def compare(expected: Any, got: Any) -> str | None:
        if isinstance(expected, tuple):
            if not isinstance(got, tuple) or len(got) != len(expected):
                return f"expected a tuple of {len(expected)} items, got {_describe(got)}"
            for i, (e, g) in enumerate(zip(expected, got, strict=True)):
                if (msg := compare(e, g)) is not None:
                    return f"item {i} of the tuple: {msg}"
            return None
        e, g = _array(expected), _array(got)
        if not _numeric(g):
            why = " (does your function return its result?)" if got is None else ""
            return f"expected {_describe_kind(expected)}, got {_describe(got)}{why}"
        e_name, g_name = _dtype_name(expected), _dtype_name(got)
        dtype_differs = isinstance(expected, (torch.Tensor, np.ndarray)) and g_name != e_name
        if e.shape != g.shape:
            msg = f"expected shape {e.shape}, got shape {g.shape}" + _shape_hint(e.shape, g.shape)
            if dtype_differs and same_dtype:
                msg += f"; the dtype differs too ({e_name} expected)"
            return msg
        values = _value_difference(e, g, *_tolerances(expected, rtol, atol))
        if same_dtype and dtype_differs:
            kind = "tensor" if isinstance(expected, torch.Tensor) else "array"
            head = f"expected a {e_name} {kind}, got {g_name}"
            if values is None:
                return f"{head}: only the dtype is wrong, the values agree"
            return f"{head} (the dtype is wrong), and the values differ too: {values}"
        digits = {"float16": 3, "bfloat16": 3, "float32": 7}.get(g_name)  # expected: a wider float
        wider = digits and e_name in ("float32", "float64")[digits // 7 :]  # and only a small miss:
        if values and dtype_differs and wider and np.all(abs(e - g) <= 1e-3 * abs(e).max()):
            values += f" (your answer is {g_name}, which keeps about {digits} significant digits; "
            values += f"the expected result is {e_name})"
        return values

    return compare


def exact_int(expected: Any, got: Any) -> str | None:
    """An integer answer (a position, a count): exactly right or wrong. ``None`` allowed."""
    if expected is None or got is None:
        return None if got is expected else f"expected {expected!r}, got {_describe(got)}"
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, np.integer)):
        return f"expected an integer, got {_describe(got)}"
    return None if int(got) == expected else f"expected {expected:,}, got {int(got):,}"


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
    if x is None and y is None and _safe_repr(a) is not None and _safe_repr(b) is not None:
        return bool(a == b)
    if not (_numeric(x) and _numeric(y)) or x.shape != y.shape:
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


def explain(mistakes: dict, compare, expected: Any, got: Any, args: tuple | None = None) -> str:
    """The words after a difference: the named mistake the answer reproduces, else (for a
    function exercise, whose ``args`` are given) how its result relates to the expected one."""
    named = _name_mistake(mistakes, compare, expected, got, args)
    if named is not None:
        mistake, exact = named
        return f" {'This' if exact else 'Apart from the dtype, this'} looks like: {mistake}."
    found = _diagnose(expected, got) if args is not None else None  # a value: no spoiler
    return f" {found[0].upper()}{found[1:]}" + ("" if found.endswith("?") else ".") if found else ""


def _name_mistake(mistakes: dict, compare, expected, got, args) -> tuple[str, bool] | None:
    """The named mistake the answer reproduces (a mistake is a value, or a function run on
    ``args``): (name, True) when it agrees with the mistake's output by the exercise's own
    comparison (so dtype and shape too), else (name, False) when it agrees in values only
    and the dtype differs. A mistake whose output agrees with the reference on this case
    is never named: it cannot be the bug."""
    values_only = None
    for mistake, wrong in mistakes.items():
        try:
            out = wrong if args is None else wrong(*_copy(args))
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


def _diagnose(expected: Any, got: Any) -> str | None:
    """How got relates to expected, for an unnamed mistake: transposed, normalised along
    another axis, sign flipped, a constant factor or offset, reversed or shifted along an
    axis. ``None`` when none of these holds."""
    if isinstance(expected, tuple) and isinstance(got, tuple) and len(got) == len(expected):
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            if not _same(e, g) and (found := _diagnose(e, g)):
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
        c = float((g * e).sum() / (e * e).sum())  # least-squares factor
        if not np.isclose(c, 1.0, rtol=rtol) and c != 0.0 and near(g, c * e):
            return f"your result is {c:.6g} times the expected one (off by a constant factor)"
    if not near(e, np.full_like(e, e.flat[0])):
        c = float((g - e).mean())
        if abs(c) > atol and near(g, e + c):
            return f"your result is the expected one plus {c:.6g} (off by a constant)"
    for ax in range(e.ndim):
        if e.shape[ax] >= 2 and not near(e, np.flip(e, ax)) and near(g, np.flip(e, ax)):
            return f"your result is the expected one reversed along axis {ax}"
        head, tail = (slice(None),) * ax + (slice(1, None),), (slice(None),) * ax + (slice(-1),)
        if e.shape[ax] >= 3 and not near(e[head], e[tail]):
            if near(g[head], e[tail]):
                return f"your result is the expected one shifted by one along axis {ax}"
            if near(g[tail], e[head]):
                return f"your result is the expected one shifted back by one along axis {ax}"
    return None


def _normalised(a: np.ndarray, axis: int) -> bool:
    """Every slice along ``axis`` sums to 1 (or 0: a fully masked row), at least one to 1."""
    s = a.sum(axis=axis)
    ones = np.isclose(s, 1.0, atol=1e-4)
    return a.shape[axis] >= 2 and bool((ones | np.isclose(s, 0.0, atol=1e-4)).all() and ones.any())


def _copy(args: tuple) -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else copy.deepcopy(a) for a in args)
