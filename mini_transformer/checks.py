"""Argument checks: the shared way the package says "this argument is wrong".

``TypeError`` for the wrong *type* (a ``bool`` where a number is expected, a ``float`` where
an integer is: never silently cast), ``ValueError`` for a wrong *value*; every message names the
argument, the allowed values and what was given. A tensor is checked where it enters: a function
or forward wrapped in ``entry`` checks on the outermost call only (a model's parts do not
re-check what the model made), and not at all inside ``trusted`` (the training loop);
metadata only, except :func:`check_ids` and :func:`check_array`. Read ``x = check_int("x",
x)`` as ``x``: each check returns its value as the plain Python type it names, or raises.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import fields

import numpy as np
import torch

__all__ = [
    "check_int", "check_float", "check_probability", "check_bool", "check_choice", "check_instance",
    "check_fields", "check_device", "check_tensor", "check_ids", "check_array", "check_size",
]  # fmt: skip

#: Largest allocation :func:`check_size` lets through (16 GiB): bigger is almost always a typo
#: (``T=10**6`` for ``10**3``) that would end in an allocator error from deep inside torch.
MAX_BYTES = 16 * 2**30


_INSIDE = contextvars.ContextVar("mini_transformer_checked", default=False)


def checking() -> bool:
    """Whether a function checks its arguments here: not in :func:`trusted`, not inside an
    :func:`entry` (a forward checks what it is given, not what it makes), not when compiling."""
    return not (torch.compiler.is_compiling() or _INSIDE.get())


def entry(check: Callable[..., object]):
    """Decorator: run ``check`` on the function's arguments on the outermost call only; inside
    it (a model's forward calling its parts), in :func:`trusted` and while ``torch.compile``
    traces, the function runs unchecked: what it is given was made by checked code."""

    def decorate(fn):
        @functools.wraps(fn)
        def checked(*args, **kwargs):
            if torch.compiler.is_compiling() or _INSIDE.get():  # not checking(): one call less
                return fn(*args, **kwargs)
            check(*args, **kwargs)
            with trusted():
                return fn(*args, **kwargs)

        return checked

    return decorate


@contextlib.contextmanager
def trusted():
    """Nothing checks in this block (:func:`checking` is False): for a loop that gives the
    package only what it made itself, such as the training loop's batches, steps and rates."""
    token = _INSIDE.set(True)
    try:
        yield
    finally:
        _INSIDE.reset(token)


def _given(value: object) -> str:
    """``'x'`` as the message's "got ..." part: repr (shortened) and, if useful, the type."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    if isinstance(value, (bool, int, float, str)) and not isinstance(value, np.generic):
        return text
    return f"{text} of type {type(value).__name__}"


BOOLS = (bool, np.bool_)


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low}"
    return "" if high is None else f"{'<' if high_open else '<='} {high}"


def check_int(
    name: str, value: object, *, low: int | None = None, high: int | None = None,
    even: bool = False, why: str = "",
) -> int:  # fmt: skip
    """Return ``value`` as an ``int`` in ``[low, high]``; ``why`` is appended to the message.
    ``bool`` and ``float`` (even ``2.0``) are a ``TypeError``: a flag is not a size.

    Example:
        >>> check_int("n_heads", 0, low=1)
        Traceback (most recent call last):
        ...
        ValueError: n_heads must be a positive integer, got 0
    """
    parity = "even " if even else ""
    if high is None and low in (0, 1):
        kind = f"a {'positive' if low else 'non-negative'} {parity}integer"
    else:
        kind = f"an {parity}integer {_interval(low, high, False, False)}".rstrip()
    if not isinstance(value, (int, np.integer)) or isinstance(value, BOOLS):
        raise TypeError(f"{name} must be {kind}{why}, got {_given(value)}")
    value = int(value)  # type: ignore[arg-type]
    bad = (low is not None and value < low) or (high is not None and value > high)
    if bad or (even and value % 2):
        raise ValueError(f"{name} must be {kind}{why}, got {value}")
    return value


def check_float(
    name: str, value: object, *, low: float | None = None, high: float | None = None,
    low_open: bool = False, high_open: bool = False, what: str | None = None,
) -> float:  # fmt: skip
    """Return ``value`` as a finite ``float`` in ``low``..``high`` (NaN and ``inf`` are
    refused); ``what`` replaces the generated words for the allowed values."""
    if what is None:
        what = f"a finite number {_interval(low, high, low_open, high_open)}".rstrip()
    if not isinstance(value, numbers.Real) or isinstance(value, BOOLS):
        raise TypeError(f"{name} must be {what}, got {_given(value)}")
    x = float(value)  # type: ignore[arg-type]
    bad = not math.isfinite(x)
    if low is not None:
        bad = bad or (x <= low if low_open else x < low)
    if high is not None:
        bad = bad or (x >= high if high_open else x > high)
    if bad:
        raise ValueError(f"{name} must be {what}, got {x!r}")
    return x


def check_probability(name: str, value: object) -> float:
    """A dropout rate: a float in ``[0, 1)`` (1 would drop everything)."""
    return check_float(name, value, low=0, high=1, high_open=True, what="a probability in [0, 1)")


def check_bool(name: str, value: object) -> bool:
    """``True`` or ``False`` (NumPy bools too); ``1`` is a TypeError."""
    if not isinstance(value, BOOLS):
        raise TypeError(f"{name} must be True or False, got {_given(value)}")
    return bool(value)


def check_choice(name: str, value: object, choices: Sequence) -> object:
    """One of ``choices``; a value of another type than every choice is a ``TypeError``."""
    allowed = ", ".join(repr(c) for c in choices)
    if not any(type(value) is type(c) for c in choices):  # noqa: E721 (exact: bool is not int)
        raise TypeError(f"{name} must be one of {allowed}, got {_given(value)}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def check_instance(name: str, value: object, cls: type | tuple[type, ...], what: str) -> object:
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be {what}, got {_given(value)}")
    return value


def check_fields(name: str, d: object, cls: type) -> dict:
    """A dict of the dataclass ``cls``'s fields, read from a file: an unknown key is a
    ``ValueError`` (a sign of a foreign file), never dropped."""
    check_instance(name, d, dict, "a dict")
    known = [f.name for f in fields(cls)]
    if unknown := sorted(set(d) - set(known), key=str):
        raise ValueError(f"unknown {name} keys {unknown}; known: {known}")
    return d


def check_device(
    name: str, device: object, *, run: bool = False, here: bool = True, local_rank: int = 0
) -> torch.device | None:
    """The one device parser: ``None``, a ``torch.device``, or a device string that exists here
    (not torch's RuntimeError). ``run=True``: a run's, ``"auto"`` (CUDA if any), ``"cpu"``,
    ``"cuda"`` (``cuda:<local_rank>``) or ``"cuda:N"``; ``here=False``: parsed only (a config)."""
    if not run and (device is None or isinstance(device, torch.device)):  # forward calls
        return device
    what = "None, a device string such as 'cpu' or 'cuda', or a torch.device"
    check_instance(name, device, (str, torch.device), "a str or torch.device" if run else what)
    given, auto = str(device), "cuda" if here and torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(auto if run and device == "auto" else device)
    except RuntimeError:
        dev = None
    if dev is None or (run and dev.type not in ("cpu", "cuda")):
        such = "'auto', 'cpu', 'cuda' or 'cuda:N'" if run else "a device such as 'cpu', 'cuda'"
        such += "" if run else " or 'cuda:0'"
        raise ValueError(f"{name} must be {such}, got {given!r}")
    if here and dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name} is {given!r} but CUDA is not available on this machine")
    if here and dev.type == "cuda" and (dev.index or 0) >= (n := torch.cuda.device_count()):
        raise ValueError(f"{name} is {given!r} but this machine has {n} CUDA devices")
    if run and dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", local_rank)
    return dev


def check_tensor(
    name: str, t: object, *, floating: bool = False, integer: bool = False, boolean: bool = False,
    ndim: int | None = None, min_ndim: int | None = None, shape: Sequence[int | None] | None = None,
    dims: str | None = None, nonempty: bool = False, broadcast_to: tuple[int, ...] | None = None,
    dtype_of: torch.Tensor | None = None, of: str = "the layer's weights", why: str = "",
) -> torch.Tensor:  # fmt: skip
    """Check a tensor's type, dtype and shape (metadata only); return it.

    ``floating`` refuses integer, bool and complex dtypes (they would be cast, or lose their
    imaginary part). ``shape`` holds ``None`` for any size, ``(..., d)`` any leading ones;
    ``dims`` is the shape in the book's notation, e.g. ``"(B, T, d_model)"``. ``broadcast_to``:
    a mask or bias against the scores. ``dtype_of``: the error names the argument and the fix,
    not torch's ``mat1 and mat2 must have the same dtype`` from inside a matmul.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {_given(t)}")
    kind = "float" if t.dtype.is_floating_point else "int"
    kind = "bool" if t.dtype == torch.bool else "complex" if t.dtype.is_complex else kind
    if floating and kind != "float":
        raise TypeError(
            f"{name} must be a floating-point tensor (float16, bfloat16, float32 or float64), "
            f"got dtype {t.dtype}; convert it first, e.g. {name}.float()"
        )
    if integer and kind != "int":
        raise TypeError(f"{name} must be an integer tensor (e.g. torch.long), got dtype {t.dtype}")
    if boolean and kind != "bool":
        raise TypeError(f"{name} must be a boolean tensor (torch.bool), got dtype {t.dtype}{why}")
    got = tuple(t.shape)
    if shape and shape[0] is Ellipsis:  # (..., d): any leading dimensions
        shape, min_ndim = tuple(shape[1:]), len(shape) - 1
    elif shape is not None:
        ndim = len(shape)
    want = f" {dims}" if dims else ""
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions{want}, got shape {got}")
    if min_ndim is not None and t.dim() < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions{want}, got shape {got}")
    first = len(got) - len(shape or ())  # the dimension shape[0] describes
    for i, s in enumerate(shape or (), start=first):
        if s is not None and got[i] != s:
            raise ValueError(
                f"{name} must have shape {dims or tuple(shape)} with size {s} in dimension "
                f"{i}, got shape {got}"
            )
    if nonempty and t.numel() == 0:
        raise ValueError(f"{name} must not be empty (every dimension >= 1), got shape {got}")
    if broadcast_to is not None:  # to exactly broadcast_to: each size 1 or the target's
        lead = len(broadcast_to) - len(got)  # got is right-aligned against the target
        if lead < 0 or any(g not in (1, b) for g, b in zip(got, broadcast_to[lead:], strict=True)):
            raise ValueError(f"{name} of shape {got} does not broadcast to {dims} = {broadcast_to}")
    if dtype_of is not None and t.dtype != (want := dtype_of.dtype):
        if not torch.is_autocast_enabled(t.device.type):
            raise TypeError(
                f"{name} must have the dtype of {of} ({want}), got dtype {t.dtype}; convert one "
                f"of them first, e.g. {name}.to({want})"
            )
    return t


def check_ids(name: str, ids: torch.Tensor, vocab_size: int, ignore: int | None = None) -> None:
    """Token ids in ``0..vocab_size-1`` (entries equal to ``ignore`` aside, but not all); the
    one check that reads tensor *data*: on a GPU the host waits for the answer."""
    ids = ids if ignore is None else ids[ids != ignore]
    if ids.numel() == 0:
        raise ValueError(f"every entry of {name} is {ignore} (ignored): the loss would be NaN")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{name} contains token id {bad}, outside 0..{vocab_size - 1}")


def check_array(
    name: str, x: object, *, min_ndim: int = 0, dims: str | None = None, nonempty: bool = True
) -> np.ndarray:
    """An array-like of real, finite numbers as a float64 NumPy array (bool, complex, string
    and object arrays are a ``TypeError``: never parsed or truncated)."""
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


def check_lengths(lengths: object, T: int) -> list[int]:
    """``lengths`` as a non-empty list of B integers in ``[0, T]`` (a padding mask's)."""
    if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__"):
        raise TypeError(f"lengths must be a sequence of B integers, got {type(lengths).__name__}")
    values = [check_int(f"lengths[{b}]", n, low=0, high=T) for b, n in enumerate(lengths)]
    if not values:
        raise ValueError("lengths must be a non-empty 1-D sequence of B integers, got []")
    return values


def check_block_size(T: int, block_size: int, extrapolating: tuple) -> None:
    """A learned position table ends at ``block_size``: a longer input has no position vector."""
    if T > block_size:
        raise ValueError(
            f"sequence length T={T} exceeds block_size={block_size}: a learned position "
            "embedding has no vector for unseen positions (crop the input, or use a scheme "
            f"from {extrapolating})"
        )


def check_rows(self, x: torch.Tensor, offset: int = 0) -> None:
    """The input checks of a position encoding's forward (``self.d_model`` wide): ``x`` is
    ``(B, T, d_model)``, ``offset`` the position of its first token (MemN2N's has none)."""
    check_tensor("x", x, floating=True, shape=(None, None, self.d_model), dims="(B, T, d_model)")
    check_int("offset", offset, low=0)


def check_heads(d: int, h: int) -> None:
    """``d_head = d_model / n_heads``: the one place that says the heads must divide ``d_model``."""
    if d % h:
        raise ValueError(f"d_model must be divisible by n_heads, got d_model={d} and n_heads={h}")


def check_scores(target, dtype, mask, score_bias, dims: str = "(..., T_q, T_k)") -> None:
    """Attention scores of shape ``target`` (their size), and the boolean ``mask`` and the
    additive ``score_bias`` that must broadcast to them. A float mask is refused: an additive
    mask's 0 means "may attend", a boolean mask's 0 the opposite, so it is never guessed."""
    check_size(f"the attention scores {dims}", target, dtype)
    if mask is not None:
        why = "; pass an additive float mask as `score_bias` instead"
        check_tensor("mask", mask, boolean=True, broadcast_to=target, dims=dims, why=why)
    if score_bias is not None:
        check_tensor("score_bias", score_bias, floating=True, broadcast_to=target, dims=dims)


def format_bytes(n: float) -> str:
    """``1.5 GiB``-style text for a byte count."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def check_size(
    name: str, shape: Sequence[int], dtype: torch.dtype | np.dtype | type = torch.float32
) -> int:
    """Refuse an allocation of ``shape`` x ``dtype`` over ``MAX_BYTES`` *before* making it,
    naming ``name`` (what would be allocated); return its size in bytes."""
    if torch.compiler.is_compiling():  # int() would specialise the graph: eager calls only
        return 0
    kind = dtype if isinstance(dtype, torch.dtype) else np.dtype(dtype)
    if any(int(s) < 0 for s in shape):
        raise ValueError(f"{name} of shape {tuple(int(s) for s in shape)} has a negative size")
    n = math.prod([int(s) for s in shape]) * kind.itemsize
    if n > MAX_BYTES:
        raise ValueError(
            f"{name} of shape {tuple(int(s) for s in shape)} would need {format_bytes(n)} "
            f"({n} bytes of {kind}), over the limit of {format_bytes(MAX_BYTES)}; "
            "use smaller sizes (or raise mini_transformer.checks.MAX_BYTES)"
        )
    return n
