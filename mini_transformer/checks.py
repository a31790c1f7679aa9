"""Argument checks: the one way the package says "this argument is wrong".

One rule everywhere:

- ``TypeError`` when the argument has the wrong *type*: a ``str`` where a number is expected,
  a ``bool`` where an integer is expected (``True`` is not a size), a ``float`` where an
  integer is expected (``2.7`` is never read as 2), an integer or complex tensor where a
  floating-point one is expected (never silently cast).
- ``ValueError`` when the type is right but the *value* is not allowed: out of range, NaN or
  infinite, the wrong shape, a size that would not fit in memory.

Every message names the argument, the allowed values and what was given::

    ValueError: d_model must be a positive integer, got 0
    TypeError: x must be a floating-point tensor (float16, bfloat16, float32 or float64),
        got dtype torch.int64; convert it first, e.g. x.float()

Cost: the checks read Python values and tensor *metadata* (dtype, shape, device) only. None
reads tensor data, so none forces a GPU sync; they are cheap enough for every forward call.
The one exception, :func:`check_finite_tensor`, says so and is meant for inputs read once
(a configuration, a bias built at construction), not for the training hot path.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence

import numpy as np
import torch

__all__ = [
    "MAX_BYTES",
    "check_int",
    "check_float",
    "check_probability",
    "check_bool",
    "check_choice",
    "check_instance",
    "check_device",
    "check_tensor",
    "check_same_dtype",
    "check_same_device",
    "check_input_dtype",
    "check_mask",
    "check_broadcast",
    "check_finite_tensor",
    "check_array",
    "estimate_bytes",
    "check_size",
    "format_bytes",
]

#: Largest single allocation :func:`check_size` lets through by default (16 GiB). Sizes above
#: it are almost always a typo (``T=10**6`` for ``10**3``) and would otherwise end in a
#: MemoryError or an allocator error from deep inside torch.
MAX_BYTES = 16 * 2**30

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# --------------------------------------------------------------------------- helpers
def _given(value: object) -> str:
    """``'x'`` as the message's "got ..." part: repr (shortened) and, if useful, the type."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    if isinstance(value, (bool, int, float, str)) and not isinstance(value, np.generic):
        return text
    return f"{text} of type {type(value).__name__}"


def _is_bool(value: object) -> bool:
    return isinstance(value, (bool, np.bool_))


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not _is_bool(value)


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not _is_bool(value)


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high}"
    return ""


# --------------------------------------------------------------------------- Python scalars
def check_int(
    name: str,
    value: object,
    *,
    low: int | None = None,
    high: int | None = None,
    even: bool = False,
    why: str = "",
) -> int:
    """Return ``value`` as an ``int`` in ``[low, high]`` (either bound optional).

    Accepts Python and NumPy integers. ``bool`` and ``float`` (even ``2.0``) are a
    ``TypeError``: a flag is not a size, and a float is never truncated.

    Args:
        name: the argument's name, as the caller wrote it.
        value: what was given.
        low, high: inclusive bounds (``None``: unbounded).
        even: the value must also be even (e.g. a rotation needs pairs).
        why: a reason appended to the allowed values, e.g. ``" for a rotation"``.

    Example:
        >>> check_int("n_heads", 0, low=1)
        Traceback (most recent call last):
        ...
        ValueError: n_heads must be a positive integer, got 0
    """
    if low == 1 and high is None:
        kind = "a positive even integer" if even else "a positive integer"
    elif low == 0 and high is None:
        kind = "a non-negative even integer" if even else "a non-negative integer"
    else:
        kind = f"{'an even integer' if even else 'an integer'} " + _interval(
            low, high, False, False
        )
        kind = kind.rstrip()
    if not _is_int(value):
        raise TypeError(f"{name} must be {kind}{why}, got {_given(value)}")
    value = int(value)  # type: ignore[arg-type]
    if (
        (low is not None and value < low)
        or (high is not None and value > high)
        or (even and value % 2)
    ):
        raise ValueError(f"{name} must be {kind}{why}, got {value}")
    return value


def check_float(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
    what: str | None = None,
) -> float:
    """Return ``value`` as a ``float`` in the interval given by ``low``/``high``.

    Accepts Python and NumPy reals (ints included: ``eps=1`` is fine). ``bool``, ``str``,
    ``complex`` and tensors are a ``TypeError``. NaN is always a ``ValueError``; so is
    ``inf`` unless ``finite=False``. ``low_open``/``high_open`` exclude the bound itself
    (``low=0, low_open=True`` means "> 0").

    Args:
        what: the allowed values in words, replacing the generated text (e.g.
            ``"a probability in [0, 1)"``).

    Example:
        >>> check_float("eps", float("inf"), low=0, low_open=True)
        Traceback (most recent call last):
        ...
        ValueError: eps must be a finite number > 0, got inf
    """
    if what is None:
        what = ("a finite number " if finite else "a number ") + _interval(
            low, high, low_open, high_open
        )
        what = what.rstrip()
    if not _is_real(value):
        raise TypeError(f"{name} must be {what}, got {_given(value)}")
    x = float(value)  # type: ignore[arg-type]
    bad = math.isnan(x) or (finite and math.isinf(x))
    if low is not None:
        bad = bad or (x <= low if low_open else x < low)
    if high is not None:
        bad = bad or (x >= high if high_open else x > high)
    if bad:
        raise ValueError(f"{name} must be {what}, got {x!r}")
    return x


def check_probability(name: str, value: object, *, allow_one: bool = False) -> float:
    """A probability (dropout rate): a float in ``[0, 1)`` (``[0, 1]`` with ``allow_one``)."""
    what = f"a probability in [0, 1{']' if allow_one else ')'}"
    return check_float(name, value, low=0.0, high=1.0, high_open=not allow_one, what=what)


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is ``True`` or ``False`` (NumPy bools too); ``1`` is a TypeError."""
    if not _is_bool(value):
        raise TypeError(f"{name} must be True or False, got {_given(value)}")
    return bool(value)


def check_choice(name: str, value: object, choices: Sequence) -> object:
    """Return ``value`` if it is one of ``choices``.

    A value of another type than every choice (``layout=3`` for string choices) is a
    ``TypeError``; a value of the right type that is not a choice is a ``ValueError``.
    """
    allowed = ", ".join(repr(c) for c in choices)
    if not any(type(value) is type(c) for c in choices):  # noqa: E721 (exact: bool is not int)
        raise TypeError(f"{name} must be one of {allowed}, got {_given(value)}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def check_instance(name: str, value: object, cls: type | tuple[type, ...], what: str) -> object:
    """Return ``value`` if ``isinstance(value, cls)``, else a TypeError saying ``what``."""
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be {what}, got {_given(value)}")
    return value


def check_device(name: str, device: object) -> torch.device | None:
    """``None``, a ``torch.device``, or a device string (``"cpu"``, ``"cuda:0"``) that exists here.

    Returns the ``torch.device`` (or ``None``). An unknown device type (``"tpu"``) or one this
    machine lacks (``"cuda"`` without a GPU) is a ``ValueError`` naming the argument, instead of
    a RuntimeError or an AssertionError from inside torch.
    """
    if device is None or isinstance(device, torch.device):  # a device object exists (and is
        return device  # what tensors report: this fast path keeps forward calls cheap)
    if not isinstance(device, str):
        raise TypeError(
            f"{name} must be None, a device string such as 'cpu' or 'cuda', or a torch.device, "
            f"got {_given(device)}"
        )
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(
            f"{name} must be a device such as 'cpu', 'cuda' or 'cuda:0', got {device!r}"
        ) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name} is {device!r} but CUDA is not available on this machine")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(
            f"{name} is {device!r} but this machine has {torch.cuda.device_count()} CUDA devices"
        )
    return dev


# --------------------------------------------------------------------------- tensors
def _dtype_kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    if dtype.is_floating_point:
        return "float"
    return "int"


def check_tensor(
    name: str,
    t: object,
    *,
    floating: bool = False,
    integer: bool = False,
    boolean: bool = False,
    dtypes: Iterable[torch.dtype] | None = None,
    ndim: int | Sequence[int] | None = None,
    min_ndim: int | None = None,
    shape: Sequence[int | None] | None = None,
    dims: str | None = None,
    nonempty: bool = False,
) -> torch.Tensor:
    """Check a tensor's type, dtype and shape (metadata only: no sync, no data read).

    Args:
        name: the argument's name.
        t: what was given; anything but a ``torch.Tensor`` is a ``TypeError``.
        floating: the dtype must be float16, bfloat16, float32 or float64 (an integer, bool
            or complex tensor is a ``TypeError``: it would be silently cast or lose its
            imaginary part).
        integer: the dtype must be an integer type (not bool, not float).
        boolean: the dtype must be ``torch.bool``.
        dtypes: the dtype must be one of these.
        ndim: the number of dimensions, or the allowed numbers.
        min_ndim: at least this many dimensions.
        shape: expected sizes, ``None`` for any size in that position (implies ``ndim``).
        dims: the shape in the book's notation for the message, e.g. ``"(B, T, d_model)"``.
        nonempty: every dimension must be at least 1.

    Returns:
        ``t`` itself.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {_given(t)}")
    kind = _dtype_kind(t.dtype)
    if floating and kind != "float":
        raise TypeError(
            f"{name} must be a floating-point tensor (float16, bfloat16, float32 or float64), "
            f"got dtype {t.dtype}; convert it first, e.g. {name}.float()"
        )
    if integer and kind != "int":
        raise TypeError(f"{name} must be an integer tensor (e.g. torch.long), got dtype {t.dtype}")
    if boolean and kind != "bool":
        raise TypeError(f"{name} must be a boolean tensor (torch.bool), got dtype {t.dtype}")
    if dtypes is not None:
        dtypes = tuple(dtypes)
        if t.dtype not in dtypes:
            allowed = ", ".join(str(d) for d in dtypes)
            raise TypeError(f"{name} must have dtype in ({allowed}), got dtype {t.dtype}")
    got = tuple(t.shape)
    if shape is not None:
        ndim = len(shape)
    want = f" {dims}" if dims else ""
    if ndim is not None:
        allowed_ndim = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.dim() not in allowed_ndim:
            n = " or ".join(str(a) for a in allowed_ndim)
            raise ValueError(f"{name} must have {n} dimensions{want}, got shape {got}")
    if min_ndim is not None and t.dim() < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions{want}, got shape {got}")
    if shape is not None:
        for i, (g, s) in enumerate(zip(got, shape, strict=True)):
            if s is not None and g != s:
                raise ValueError(
                    f"{name} must have shape {dims or tuple(shape)} with size {s} in dimension "
                    f"{i}, got shape {got}"
                )
    if nonempty and t.numel() == 0:
        raise ValueError(f"{name} must not be empty (every dimension >= 1), got shape {got}")
    return t


def check_same_dtype(**tensors: torch.Tensor) -> torch.dtype:
    """All tensors share one dtype (``q, k, v`` or an input and a layer's weight); return it.

    Raises a ``TypeError`` listing every argument's dtype, instead of torch's
    ``mat1 and mat2 must have the same dtype`` from deep inside a matmul.
    """
    names = list(tensors)
    first = tensors[names[0]].dtype
    if any(tensors[n].dtype != first for n in names[1:]):
        listed = ", ".join(f"{n} {tensors[n].dtype}" for n in names)
        raise TypeError(
            f"{_join(names)} must have the same dtype, got {listed}; convert one first, "
            f"e.g. {names[-1]}.to({names[0]}.dtype)"
        )
    return first


def check_same_device(**tensors: torch.Tensor) -> torch.device:
    """All tensors live on one device; return it (a ``ValueError`` lists each one's)."""
    names = list(tensors)
    first = tensors[names[0]].device
    if any(tensors[n].device != first for n in names[1:]):
        listed = ", ".join(f"{n} on {tensors[n].device}" for n in names)
        raise ValueError(f"{_join(names)} must be on the same device, got {listed}")
    return first


def check_input_dtype(name: str, t: torch.Tensor, weight: torch.Tensor) -> None:
    """An input must have its layer's weight dtype, unless autocast is on for its device.

    Without this, a float64 input to a float32 layer fails deep inside a matmul with
    ``mat1 and mat2 must have the same dtype``, naming neither the argument nor the fix.
    """
    if t.dtype != weight.dtype and not torch.is_autocast_enabled(t.device.type):
        raise TypeError(
            f"{name} must have the dtype of the layer's weights ({weight.dtype}), got dtype "
            f"{t.dtype}; convert the input ({name}.to({weight.dtype})) or the module "
            f"(module.to({t.dtype}))"
        )


def check_mask(name: str, mask: object) -> torch.Tensor:
    """A **boolean** attention mask (``True`` = may attend); an additive float mask is a
    ``TypeError`` (its 0 means "may attend", a bool 0 the opposite): it goes in ``bias``."""
    check_tensor(name, mask)
    if mask.dtype != torch.bool:  # type: ignore[union-attr]
        raise TypeError(
            f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype}; "  # type: ignore[union-attr]
            "pass an additive float mask as `score_bias` instead"
        )
    return mask  # type: ignore[return-value]


def check_broadcast(name: str, t: torch.Tensor, target: tuple[int, ...], expected: str) -> None:
    """``ValueError`` unless ``t`` broadcasts to exactly ``target`` (described as ``expected``)."""
    ok = t.dim() <= len(target)
    if ok:
        try:
            ok = tuple(torch.broadcast_shapes(tuple(t.shape), target)) == tuple(target)
        except RuntimeError:
            ok = False
    if not ok:
        raise ValueError(
            f"{name} of shape {tuple(t.shape)} does not broadcast to {expected} = {tuple(target)}"
        )


def _join(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def check_finite_tensor(name: str, t: torch.Tensor, *, allow_neg_inf: bool = False) -> torch.Tensor:
    """No NaN (and no ``inf``; ``-inf`` allowed with ``allow_neg_inf``) in a float tensor.

    This one *reads the data* (a device sync on a GPU): use it on inputs checked once, not
    in a training step.
    """
    if t.is_floating_point() and t.numel():
        bad = torch.isnan(t) | (torch.isposinf(t) if allow_neg_inf else torch.isinf(t))
        if bool(bad.any()):
            allowed = "finite values or -inf" if allow_neg_inf else "finite values"
            raise ValueError(f"{name} must hold {allowed}, got {int(bad.sum())} NaN or inf entries")
    return t


def check_array(
    name: str, x: object, *, min_ndim: int = 0, dims: str | None = None, nonempty: bool = True
) -> np.ndarray:
    """Convert an array-like of real numbers to a float64 NumPy array, refusing the rest.

    Bool, complex, string and object arrays are a ``TypeError`` (a complex array would
    lose its imaginary part; strings are never parsed). NaN and inf are a ``ValueError``.
    """
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as err:  # ragged lists
        raise ValueError(f"{name} must be a rectangular array of real numbers: {err}") from None
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers (int or float), got dtype {arr.dtype}")
    want = f" {dims}" if dims else ""
    if arr.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions{want}, got shape {arr.shape}"
        )
    if nonempty and arr.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {arr.shape}")
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must hold finite numbers, got NaN or inf")
    return arr


# --------------------------------------------------------------------------- memory
def estimate_bytes(
    shape: Sequence[int], dtype: torch.dtype | np.dtype | type = torch.float32
) -> int:
    """Bytes of a dense array of ``shape`` and ``dtype`` (no allocation)."""
    itemsize = dtype.itemsize if isinstance(dtype, torch.dtype) else np.dtype(dtype).itemsize
    return math.prod([int(s) for s in shape]) * itemsize


def format_bytes(n: float) -> str:
    """``1.5 GiB``-style text for a byte count."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover


def check_size(
    name: str,
    shape: Sequence[int],
    dtype: torch.dtype | np.dtype | type = torch.float32,
    *,
    max_bytes: int | None = None,
) -> int:
    """Refuse an allocation of ``shape`` x ``dtype`` over ``max_bytes`` *before* making it.

    Args:
        name: what would be allocated, in the caller's words (e.g. ``"the position table
            (max_len, d_model)"``).
        shape: its shape.
        dtype: its dtype.
        max_bytes: the limit; default :data:`MAX_BYTES`.

    Returns:
        the estimated size in bytes.

    Raises:
        ValueError: naming the shape, the estimated memory and the limit.
    """
    if torch.compiler.is_compiling():  # traced shapes were checked when the call ran eagerly
        return 0
    limit = MAX_BYTES if max_bytes is None else max_bytes
    n = estimate_bytes(shape, dtype)
    if n > limit:
        kind = dtype if isinstance(dtype, torch.dtype) else np.dtype(dtype).name
        raise ValueError(
            f"{name} of shape {tuple(int(s) for s in shape)} would need {format_bytes(n)} "
            f"({n} bytes of {kind}), over the limit of {format_bytes(limit)}; "
            "use smaller sizes (or raise mini_transformer.checks.MAX_BYTES)"
        )
    return n
