"""Property-based tests of the public API (issue 15: bad input gets a clear error).

Two properties, over random arguments drawn by hypothesis:

- **valid in, documented out**: random valid arguments give a finite result of the documented
  shape and dtype;
- **invalid in, clear error out**: an argument made invalid (wrong type, bool for an int, a
  float for a size, NaN/inf, out of range, wrong dtype or shape, empty, too big to allocate)
  raises ``TypeError`` or ``ValueError`` whose message names that argument; never another
  exception, never a result.

Every public callable of positional, attention, layers, data and model is listed in
:data:`COVERED` and exercised here; :func:`test_every_public_entry_point_is_covered` fails when
a new one is added without a property. Each test runs few examples (``FAST``) so the suite
takes a few seconds: it is a net for classes of bugs, the unit tests hold the exact numbers.

Tensor *data* (NaN inside an input tensor) is not checked: that would read the data, a GPU
sync on every training step; NaN in, NaN out, as in PyTorch.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mini_transformer import additive, alibi, masks, memn2n, tasks
from mini_transformer import attention as A
from mini_transformer import data as D
from mini_transformer import layers as L
from mini_transformer import model as M
from mini_transformer import positional as P
from mini_transformer.additive import AdditiveAttention

# A few examples per property keeps the suite at a few seconds inside `make test`; for a deeper
# search run e.g. `PROPERTY_EXAMPLES=300 pytest tests/test_properties.py`.
EXAMPLES = int(os.environ.get("PROPERTY_EXAMPLES", "10"))
FAST = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


def rejects(call, name: str) -> None:
    """``call()`` raises TypeError/ValueError naming ``name``; anything else fails the test."""
    try:
        result = call()
    except (TypeError, ValueError) as err:
        assert name in str(err), f"the message does not name {name!r}: {err}"
        return
    pytest.fail(f"bad {name} was accepted and returned {type(result).__name__}")


# --------------------------------------------------------------------------- bad values
def bad_int(low: int = 1, high: int | None = None) -> st.SearchStrategy:
    """Values an integer argument in [low, high] must refuse."""
    options = [
        st.integers(max_value=low - 1),
        st.booleans(),  # True is not a size
        st.floats(allow_nan=True, allow_infinity=True),  # 2.0 is never read as 2
        st.text(max_size=2),
        st.none(),
        st.just([1]),
        st.complex_numbers(max_magnitude=4),
    ]
    if high is not None:
        options.append(st.integers(min_value=high + 1, max_value=high + 1000))
    return st.one_of(*options)


def bad_optional_int(low: int = 1) -> st.SearchStrategy:
    """As :func:`bad_int`, for an argument whose ``None`` means "the default"."""
    return bad_int(low).filter(lambda v: v is not None)


HUGE = st.integers(10**10, 10**13)  # sizes that must be refused before allocating
NONFINITE = st.sampled_from([math.nan, math.inf, -math.inf])
NOT_A_NUMBER = st.one_of(st.booleans(), st.text(max_size=2), st.none(), st.just(1j), st.just([1.0]))


def bad_float(low: float | None = None, high: float | None = None) -> st.SearchStrategy:
    options = [NONFINITE, NOT_A_NUMBER]
    if low is not None:
        options.append(
            st.floats(max_value=low, exclude_max=True, allow_nan=False, allow_infinity=False)
        )
    if high is not None:
        options.append(st.floats(min_value=high, allow_nan=False, allow_infinity=False))
    return st.one_of(*options)


def bad_choice(choices) -> st.SearchStrategy:
    return st.one_of(
        st.text(max_size=4).filter(lambda s: s not in choices),
        st.integers(),
        st.none(),
        st.booleans(),
    )


BAD_BOOL = st.one_of(st.integers(0, 1), st.text(max_size=2), st.none(), st.floats(0, 1))
BAD_BASE = bad_float(low=1.0)
BAD_EPS = bad_float(low=1.1e-38)  # below float32's smallest normal number, 1 + eps is 1 ... or 0


# --------------------------------------------------------------------------- scalar functions
# name -> (function, {argument: (valid strategy, invalid strategy)}, expected shape, dtype)
def _alibi_shape(a):
    return (a["n_heads"], a["T_q"], a["T_k"])


SCALAR_FUNCTIONS = {
    "index_encoding": (
        P.index_encoding,
        {"n": (st.integers(1, 40), bad_int())},
        lambda a: (a["n"], 1),
        np.float64,
    ),
    "normalized_index_encoding": (
        P.normalized_index_encoding,
        {"n": (st.integers(1, 40), bad_int())},
        lambda a: (a["n"], 1),
        np.float64,
    ),
    "binary_encoding": (
        P.binary_encoding,
        {"n": (st.integers(1, 40), bad_int()), "n_bits": (st.integers(1, 12), bad_int())},
        lambda a: (a["n"], a["n_bits"]),
        np.float64,
    ),
    "sinusoidal_frequencies": (
        P.sinusoidal_frequencies,
        {"d_model": (st.integers(1, 32), bad_int()), "base": (st.floats(1.0, 1e6), BAD_BASE)},
        lambda a: ((a["d_model"] + 1) // 2,),
        np.float64,
    ),
    "sinusoidal_encoding": (
        P.sinusoidal_encoding,
        {
            "n_positions": (st.integers(1, 40), bad_int()),
            "d_model": (st.integers(1, 32), bad_int()),
            "base": (st.floats(1.0, 1e6), BAD_BASE),
            "layout": (st.sampled_from(P.LAYOUTS), bad_choice(P.LAYOUTS)),
        },
        lambda a: (a["n_positions"], a["d_model"]),
        np.float64,
    ),
    "rotation_matrix": (
        P.rotation_matrix,
        {
            "offset": (st.floats(-1e4, 1e4), st.one_of(NONFINITE, NOT_A_NUMBER)),
            "d_model": (
                st.integers(1, 16).map(lambda h: 2 * h),
                st.one_of(bad_int(), st.integers(0, 20).map(lambda h: 2 * h + 1)),
            ),
            "base": (st.floats(1.0, 1e6), BAD_BASE),
        },
        lambda a: (a["d_model"], a["d_model"]),
        np.float64,
    ),
    "memn2n_encoding": (
        P.memn2n_encoding,
        {
            "sentence_length": (st.integers(1, 20), bad_int()),
            "d_model": (st.integers(1, 20), bad_int()),
        },
        lambda a: (a["sentence_length"], a["d_model"]),
        np.float64,
    ),
    "alibi_slopes": (
        P.alibi_slopes,
        {"n_heads": (st.integers(1, 40), bad_int())},
        lambda a: (a["n_heads"],),
        torch.float32,
    ),
    "alibi_bias": (
        P.alibi_bias,
        {
            "n_heads": (st.integers(1, 8), bad_int()),
            "T_q": (st.integers(1, 6), bad_int()),
            "T_k": (st.integers(6, 10), bad_optional_int()),
        },
        _alibi_shape,
        torch.float32,
    ),
    "causal_mask": (
        A.causal_mask,
        {"T": (st.integers(1, 20), bad_int()), "T_k": (st.integers(1, 20), bad_optional_int())},
        lambda a: (a["T"], a["T_k"]),
        torch.bool,
    ),
    "residual_paths": (
        L.residual_paths,
        {"n_blocks": (st.integers(1, 8), bad_int(1, 20))},
        lambda a: (2 ** a["n_blocks"],),
        None,
    ),
    "copy_offset_task": (
        D.copy_offset_task,
        {
            "n_samples": (st.integers(1, 4), bad_int()),
            "length": (st.integers(5, 12), bad_int(5)),
            "vocab_size": (st.integers(2, 20), bad_int(2)),
            "offset": (st.integers(1, 4), bad_int()),
            "generator": (
                st.integers(0, 99),
                st.one_of(
                    st.integers(max_value=-1), st.booleans(), st.floats(), st.text(max_size=2)
                ),
            ),
        },
        lambda a: (2, a["n_samples"], a["length"]),
        torch.long,
    ),
}


def _as_checked(out, shape, dtype):
    """Shape, dtype and finiteness of a result (tuples of tensors are stacked)."""
    if isinstance(out, tuple):
        out = torch.stack(out)
    if isinstance(out, list):
        assert len(out) == shape[0]
        return
    assert tuple(out.shape) == tuple(shape)
    assert out.dtype == dtype
    if out.dtype.is_floating_point if isinstance(out, torch.Tensor) else True:
        assert np.isfinite(np.asarray(out, dtype=np.float64)).all()


@pytest.mark.parametrize("name", sorted(SCALAR_FUNCTIONS))
@FAST
@given(data=st.data())
def test_valid_scalar_arguments_give_documented_shape_and_dtype(name, data):
    fn, args, shape, dtype = SCALAR_FUNCTIONS[name]
    kwargs = {arg: data.draw(valid, label=arg) for arg, (valid, _) in args.items()}
    _as_checked(fn(**kwargs), shape(kwargs), dtype)


@pytest.mark.parametrize("name", sorted(SCALAR_FUNCTIONS))
@FAST
@given(data=st.data())
def test_an_invalid_scalar_argument_is_named_in_the_error(name, data):
    fn, args, _, _ = SCALAR_FUNCTIONS[name]
    kwargs = {arg: data.draw(valid, label=arg) for arg, (valid, _) in args.items()}
    bad = data.draw(st.sampled_from(sorted(args)), label="corrupted")
    kwargs[bad] = data.draw(args[bad][1], label="bad value")
    rejects(lambda: fn(**kwargs), bad)


SIZED = {  # function, the size argument, the other arguments: a huge size is refused up front
    "index_encoding": (P.index_encoding, "n", {}),
    "binary_encoding": (P.binary_encoding, "n", {"n_bits": 64}),
    "sinusoidal_encoding": (P.sinusoidal_encoding, "n_positions", {"d_model": 512}),
    "memn2n_encoding": (P.memn2n_encoding, "sentence_length", {"d_model": 512}),
    "alibi_bias": (P.alibi_bias, "T_q", {"n_heads": 8}),
    "causal_mask": (A.causal_mask, "T", {}),
    "copy_offset_task": (D.copy_offset_task, "length", {"n_samples": 1000}),
}


@pytest.mark.parametrize("name", sorted(SIZED))
@settings(max_examples=3, deadline=None)
@given(n=HUGE)
def test_sizes_too_big_to_allocate_are_refused_with_the_estimate(name, n):
    fn, arg, others = SIZED[name]
    with pytest.raises(ValueError, match=rf"{arg}.* would need [\d.]+ [KMGTP]iB"):
        fn(**{arg: n}, **others)


# --------------------------------------------------------------------------- constructors
def _mha_args():
    return st.tuples(st.integers(1, 4), st.integers(1, 4)).map(lambda t: (t[0] * t[1], t[1]))


CONSTRUCTORS = {
    # name -> (class, {argument: (valid, invalid)}, constraint on valid arguments)
    "SinusoidalPositionalEncoding": (
        P.SinusoidalPositionalEncoding,
        {
            "d_model": (st.integers(1, 16), bad_int()),
            "max_len": (st.integers(1, 64), st.one_of(bad_int(), HUGE)),
            "base": (st.floats(1.0, 1e5), BAD_BASE),
            "layout": (st.sampled_from(P.LAYOUTS), bad_choice(P.LAYOUTS)),
        },
    ),
    "LearnedPositionalEmbedding": (
        P.LearnedPositionalEmbedding,
        {
            "max_len": (st.integers(1, 64), st.one_of(bad_int(), HUGE)),
            "d_model": (st.integers(1, 16), bad_int()),
            "init_std": (st.floats(0.0, 1.0), bad_float(low=0.0)),
        },
    ),
    "MemN2NPositionalEncoding": (
        P.MemN2NPositionalEncoding,
        {"d_model": (st.integers(1, 16), bad_int())},
    ),
    "RotaryEmbedding": (
        P.RotaryEmbedding,
        {
            "d_head": (
                st.integers(1, 8).map(lambda h: 2 * h),
                st.one_of(bad_int(), st.integers(0, 8).map(lambda h: 2 * h + 1)),
            ),
            "base": (st.floats(1.0, 1e5), BAD_BASE),
            "max_len": (st.integers(1, 64), st.one_of(bad_int(), HUGE)),
        },
    ),
    "ALiBi": (
        P.ALiBi,
        {
            "n_heads": (st.integers(1, 8), bad_int()),
            "max_len": (st.integers(1, 64), st.one_of(bad_int(), HUGE)),
        },
    ),
    "LayerNorm": (
        L.LayerNorm,
        {"d_model": (st.integers(1, 16), bad_int()), "eps": (st.floats(1e-12, 1.0), BAD_EPS)},
    ),
    "FeedForward": (
        L.FeedForward,
        {
            "d_model": (st.integers(1, 16), bad_int()),
            "d_ff": (st.integers(1, 16), bad_int()),
            "dropout": (st.floats(0.0, 0.9), bad_float(0.0, 1.0)),
            "activation": (st.sampled_from(L.ACTIVATIONS), bad_choice(L.ACTIVATIONS)),
        },
    ),
    "CharTokenizer": (
        D.CharTokenizer,
        {
            "chars": (
                st.text(min_size=1, max_size=10),
                st.one_of(
                    st.just(""),
                    st.lists(st.integers(), min_size=1, max_size=3),
                    st.just(["ab"]),
                    st.integers(),
                    st.none(),
                ),
            )
        },
    ),
}


def _block(d_model, n_heads, d_ff, dropout, norm_position, causal, fused_attention, activation,
           eps, cross):  # fmt: skip
    """A TransformerBlock built from its parts: each argument is checked by the part using it."""

    def attn():
        return A.MultiHeadAttention(
            d_model, n_heads, dropout=dropout, fused_attention=fused_attention
        )

    ffn = L.FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
    return L.TransformerBlock(
        attn(), ffn, cross_attn=attn() if cross else None, norm_position=norm_position,
        causal=causal, dropout=dropout, eps=eps,
    )  # fmt: skip


BLOCKS = {  # the blocks and the model config share (d_model, n_heads) divisibility
    "MultiHeadAttention": (
        A.MultiHeadAttention,
        {
            "dropout": (st.floats(0.0, 0.9), bad_float(0.0, 1.0)),
            "bias": (st.booleans(), BAD_BOOL),
            "fused_attention": (st.booleans(), BAD_BOOL),
        },
    ),
    "TransformerBlock": (
        _block,
        {
            "d_ff": (st.integers(1, 16), bad_int()),
            "dropout": (st.floats(0.0, 0.9), bad_float(0.0, 1.0)),
            "norm_position": (st.sampled_from(L.NORM_POSITIONS), bad_choice(L.NORM_POSITIONS)),
            "causal": (st.booleans(), BAD_BOOL),
            "fused_attention": (st.booleans(), BAD_BOOL),
            "activation": (st.sampled_from(L.ACTIVATIONS), bad_choice(L.ACTIVATIONS)),
            "eps": (st.floats(1e-12, 1.0), BAD_EPS),
            "cross": (st.booleans(), st.nothing()),
        },
    ),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
@FAST
@given(data=st.data())
def test_constructors_accept_valid_and_name_an_invalid_argument(name, data):
    cls, args = CONSTRUCTORS[name]
    kwargs = {arg: data.draw(valid, label=arg) for arg, (valid, _) in args.items()}
    cls(**kwargs)  # valid: builds
    bad = data.draw(st.sampled_from(sorted(args)), label="corrupted")
    kwargs[bad] = data.draw(args[bad][1], label="bad value")
    rejects(lambda: cls(**kwargs), bad)


@pytest.mark.parametrize("name", sorted(BLOCKS))
@FAST
@given(data=st.data(), dh=_mha_args())
def test_blocks_accept_valid_and_name_an_invalid_argument(name, data, dh):
    cls, args = BLOCKS[name]
    d_model, n_heads = dh
    kwargs = {arg: data.draw(valid, label=arg) for arg, (valid, _) in args.items()}
    kwargs.update(d_model=d_model, n_heads=n_heads)
    cls(**kwargs)
    choices = sorted(args) + ["d_model", "n_heads"]
    bad = data.draw(st.sampled_from(choices), label="corrupted")
    invalid = bad_int() if bad in ("d_model", "n_heads") else args[bad][1]
    kwargs[bad] = data.draw(invalid, label="bad value")
    rejects(lambda: cls(**kwargs), bad)


# --------------------------------------------------------------------------- module inputs
def _modules(d: int, h: int):
    """Each module with the shape of its input, built for width ``d`` and ``h`` heads."""
    torch.manual_seed(0)
    return {
        "SinusoidalPositionalEncoding": P.SinusoidalPositionalEncoding(d, max_len=64),
        "LearnedPositionalEmbedding": P.LearnedPositionalEmbedding(64, d),
        "MemN2NPositionalEncoding": P.MemN2NPositionalEncoding(d),
        "RotaryEmbedding": P.RotaryEmbedding(d),
        "LayerNorm": L.LayerNorm(d),
        "FeedForward": L.FeedForward(d, 2 * d),
        "MultiHeadAttention": A.MultiHeadAttention(d, h),
        "TransformerBlock": L.TransformerBlock(
            A.MultiHeadAttention(d, h), L.FeedForward(d, 2 * d), causal=True
        ),
    }


MODULE_NAMES = sorted(_modules(4, 2))


def _call(name, module, x):
    out = module(x)
    return out[0] if name == "MultiHeadAttention" else out


shapes = st.tuples(st.integers(1, 3), st.integers(1, 6))  # (B, T)
widths = st.sampled_from([(4, 1), (4, 2), (8, 2), (8, 4)])  # (d_model, n_heads)


@pytest.mark.parametrize("name", MODULE_NAMES)
@FAST
@given(bt=shapes, dh=widths, dtype=st.sampled_from([torch.float32, torch.float64]))
def test_modules_give_finite_output_of_the_input_shape(name, bt, dh, dtype):
    module = _modules(*dh)[name].to(dtype)
    x = torch.randn(*bt, dh[0], dtype=dtype)
    out = _call(name, module, x)
    assert out.shape == x.shape and out.dtype == dtype and torch.isfinite(out).all()


def _bad_inputs(d: int):
    good = torch.randn(2, 3, d)
    return st.sampled_from(
        [
            good.long(),
            good.bool(),
            good.to(torch.complex64),
            good.int(),  # never silently cast
            good[0, 0],  # too few dimensions
            good[..., :-1],  # wrong last dimension
            torch.randn(2, 3, d + 1),
            good.numpy(),
            good.tolist(),
            None,
            3.0,  # not a tensor
        ]
    )


@pytest.mark.parametrize("name", MODULE_NAMES)
@FAST
@given(dh=widths, data=st.data())
def test_modules_name_a_bad_input(name, dh, data):
    module = _modules(*dh)[name]
    x = data.draw(_bad_inputs(dh[0]))
    if name == "RotaryEmbedding" and isinstance(x, torch.Tensor) and x.dim() == 1:
        x = x[None, None]  # RoPE accepts (..., T, d_head); keep the case a dtype or size error
        if x.is_floating_point() and x.shape[-1] == dh[0]:
            x = x.long()
    if name in ("LayerNorm", "FeedForward") and isinstance(x, torch.Tensor) and x.dim() == 1:
        x = x[0]  # these accept (..., d_model), even 1-D: a 0-d tensor has no d_model
    rejects(lambda: _call(name, module, x), "x")


@pytest.mark.parametrize("name", ["MultiHeadAttention", "FeedForward"])
def test_a_dtype_mismatch_with_the_weights_is_named(name):
    module = _modules(8, 2)[name]
    rejects(lambda: _call(name, module, torch.randn(2, 3, 8, dtype=torch.float64)), "x")


@FAST
@given(
    dtype=st.sampled_from([torch.float16, torch.bfloat16]),
    spike=st.floats(100.0, 6e4),
    d=st.integers(2, 32),
)
def test_layernorm_half_precision_is_finite_and_matches_torch(dtype, spike, d):
    x = torch.zeros(3, d, dtype=dtype)
    x[:, 0] = spike  # (x - mu)^2 overflows float16 from ~256
    ours, ref = L.LayerNorm(d).to(dtype), torch.nn.LayerNorm(d).to(dtype)
    out = ours(x)
    assert out.dtype == dtype and torch.isfinite(out).all()
    torch.testing.assert_close(out, ref(x))


@FAST
@given(offset=st.one_of(bad_int(0), HUGE))
def test_positional_offset_is_checked(offset):
    x = torch.randn(1, 3, 8)
    rejects(lambda: P.SinusoidalPositionalEncoding(8, max_len=16)(x, offset=offset), "offset")
    rejects(lambda: P.RotaryEmbedding(8)(x, offset=offset), "offset")


@FAST
@given(
    x=st.one_of(
        st.just(np.ones(3)),
        st.just(np.ones((2, 3)) * 1j),
        st.just(np.ones((2, 2), dtype=bool)),
        st.just([["a", "b"]]),
        st.just(np.zeros((0, 3))),
        st.just([[1.0, math.nan]]),
        st.just([[1.0], [1.0, 2.0]]),
    )
)
def test_array_functions_name_a_bad_array(x):
    rejects(lambda: P.encoding_properties(x), "pe")
    rejects(lambda: P.offset_share(x), "S")


@FAST
@given(
    x=st.integers(2, 6).flatmap(
        lambda n: st.lists(
            st.lists(st.floats(-10, 10), min_size=3, max_size=3), min_size=n, max_size=n
        )
    )
)
def test_array_functions_valid(x):
    props = P.encoding_properties(x)
    assert props["n_positions"] == len(x) and props["dim"] == 3


# --------------------------------------------------------------------------- attention
@st.composite
def attention_inputs(draw):
    B, h = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    T_q, T_k, d = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 6))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    q = torch.randn(B, h, T_q, d, generator=g)
    k = torch.randn(B, h, T_k, d, generator=g)
    v = torch.randn(B, h, T_k, d, generator=g)
    mask = draw(st.one_of(st.none(), st.just(torch.rand(B, 1, T_q, T_k, generator=g) > 0.4)))
    bias = None
    if draw(st.booleans()):
        bias = torch.randn(h, T_q, T_k, generator=g)
        bias[torch.rand(h, T_q, T_k, generator=g) < 0.4] = -math.inf  # may block whole rows
    return q, k, v, mask, bias


@FAST
@given(inputs=attention_inputs())
def test_attention_is_finite_rows_sum_to_one_or_zero(inputs):
    q, k, v, mask, bias = inputs
    out, w = A.scaled_dot_product_attention(
        q, k, v, mask=mask, score_bias=bias, return_weights=True
    )
    assert out.shape == q.shape[:-1] + v.shape[-1:] and torch.isfinite(out).all()
    sums = w.sum(-1)
    assert torch.isfinite(w).all()
    assert ((sums - 1).abs() < 1e-5).logical_or(sums == 0).all()


@FAST
@given(inputs=attention_inputs(), causal=st.booleans())
def test_fused_and_scratch_paths_agree_even_on_fully_masked_rows(inputs, causal):
    _, _, _, mask, bias = inputs
    B = 1 if mask is None else mask.shape[0]
    T_q = mask.shape[-2] if mask is not None else (bias.shape[-2] if bias is not None else 4)
    h = bias.shape[0] if bias is not None else 2
    torch.manual_seed(0)
    mha = A.MultiHeadAttention(2 * h, h).eval()
    x = torch.randn(B, T_q, 2 * h)
    if mask is not None:
        mask = mask[..., :T_q]
    if bias is not None:
        bias = bias[..., :T_q]
    if mask is not None and mask.shape[-1] != T_q or bias is not None and bias.shape[-1] != T_q:
        return  # cross-shaped masks belong to cross-attention; covered by the test above
    fused, _ = mha(x, mask=mask, score_bias=bias, causal=causal)
    scratch, _ = mha(x, mask=mask, score_bias=bias, causal=causal, return_weights=True)
    assert torch.isfinite(fused).all()
    torch.testing.assert_close(fused, scratch, rtol=1e-5, atol=1e-6)


def _bad_attention_call(draw):
    q = torch.randn(2, 3, 4)
    which = draw(
        st.sampled_from(
            ["q", "k", "v", "mask", "score_bias", "scale", "dropout_p", "return_weights"]
        )
    )
    args = {"q": q, "k": q, "v": q}
    tensors = [
        q.long(),
        q.bool(),
        q.to(torch.complex64),
        q.double(),
        q[0, 0],
        q[..., :0],
        q.numpy(),
        None,
        "q",
    ]
    if which in ("q", "k", "v"):
        args[which] = draw(st.sampled_from(tensors[:-2] + ["q"]))
        if which == "q" and isinstance(args["q"], torch.Tensor) and args["q"].dim() == 1:
            args["q"] = args["q"].long()
    elif which == "mask":
        args["mask"] = draw(
            st.sampled_from(
                [
                    torch.ones(3, 3),
                    torch.ones(3, 3).long(),
                    torch.ones(4, 4, dtype=torch.bool),
                    "all",
                ]
            )
        )
    elif which == "score_bias":
        args["score_bias"] = draw(
            st.sampled_from(
                [torch.ones(3, 3, dtype=torch.bool), torch.ones(3, 3).long(), torch.ones(5, 5), 1.0]
            )
        )
    elif which == "scale":
        # None is valid (the default 1/sqrt(d_k)); 0 and below are not
        args["scale"] = draw(bad_float(low=0.0).filter(lambda s: s is not None) | st.just(0.0))
    elif which == "dropout_p":
        args["dropout_p"] = draw(bad_float(0.0, 1.0))
    else:
        args["return_weights"] = draw(BAD_BOOL)
    return which, args


@FAST
@given(data=st.data())
def test_attention_names_a_bad_argument(data):
    which, args = _bad_attention_call(data.draw)
    rejects(lambda: A.scaled_dot_product_attention(**args), which)


@FAST
@given(
    lengths=st.lists(st.integers(0, 6), min_size=1, max_size=4),
    T=st.integers(6, 9),
    as_tensor=st.booleans(),
)
def test_padding_mask_valid(lengths, T, as_tensor):
    arg = torch.tensor(lengths) if as_tensor else lengths
    m = A.padding_mask(arg, T)
    assert m.shape == (len(lengths), 1, 1, T) and m.dtype == torch.bool
    assert m.sum(-1).flatten().tolist() == lengths


@FAST
@given(
    lengths=st.one_of(
        st.lists(st.floats(0, 5), min_size=1, max_size=3).filter(
            lambda v: any(not float(x).is_integer() for x in v)
        ),
        st.lists(st.booleans(), min_size=1, max_size=3),
        st.lists(st.integers(7, 100), min_size=1, max_size=3),
        st.lists(st.integers(-100, -1), min_size=1, max_size=3),
        st.just([]),
        st.just(torch.tensor([1.0, 2.0])),
        st.just(torch.tensor([True])),
        st.just(torch.tensor([9])),
        st.just(3),
        st.just("12"),
    )
)
def test_padding_mask_names_bad_lengths(lengths):
    rejects(lambda: A.padding_mask(lengths, 6), "length")


@pytest.mark.parametrize("device", ["tpu", 1.5, "cuda:99"])
def test_mask_builders_name_a_bad_device(device):
    rejects(lambda: A.causal_mask(3, device=device), "device")
    rejects(lambda: A.padding_mask([1, 2], 3, device=device), "device")


def test_combine_masks_names_a_bad_mask():
    rejects(lambda: A.combine_masks(A.causal_mask(3), torch.ones(3, 3)), "mask")
    rejects(lambda: A.combine_masks(A.causal_mask(3), "mask"), "mask")


# --------------------------------------------------------------------------- additive attention
@FAST
@given(
    lead=st.lists(st.integers(1, 2), max_size=2),
    tq=st.integers(1, 4),
    tk=st.integers(1, 4),
    d=st.integers(1, 6),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_additive_scores_valid(lead, tq, tk, d, dtype):
    layer = AdditiveAttention(d, d, d).to(dtype)
    s = layer.scores(torch.randn(*lead, tq, d, dtype=dtype), torch.randn(*lead, tk, d, dtype=dtype))
    assert s.shape == (*lead, tq, tk) and s.dtype == dtype
    assert torch.isfinite(s).all()
    assert (s.abs() <= layer.w.abs().sum() + 1e-6).all()  # |tanh| <= 1


@FAST
@given(
    dq=st.integers(1, 5),
    dk=st.integers(1, 5),
    da=st.integers(1, 5),
    tq=st.integers(1, 3),
    tk=st.integers(1, 3),
    masked=st.booleans(),
)
def test_additive_attention_valid(dq, dk, da, tq, tk, masked):
    layer = AdditiveAttention(dq, dk, da)
    x, c = torch.randn(2, tq, dq), torch.randn(2, tk, dk)
    mask = torch.rand(tq, tk) > 0.5 if masked else None
    out, weights = layer(x, c, mask=mask, return_weights=True)
    assert out.shape == (2, tq, dk) and weights.shape == (2, tq, tk)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()


@FAST
@given(arg=st.sampled_from(["d_query", "d_key", "d_attn"]), bad=bad_int())
def test_additive_attention_names_a_bad_size(arg, bad):
    sizes = {"d_query": 3, "d_key": 3, "d_attn": 3} | {arg: bad}
    rejects(lambda: AdditiveAttention(**sizes), arg)


def test_additive_attention_names_bad_inputs():
    layer = AdditiveAttention(3, 4, 5)
    x, c = torch.randn(2, 3), torch.randn(6, 4)
    rejects(lambda: layer(x.long(), c), "x")
    rejects(lambda: layer(torch.randn(2, 7), c), "x")
    rejects(lambda: layer(x, torch.randn(6, 2)), "context")
    rejects(lambda: layer(x.double(), c), "x")
    rejects(lambda: layer(x, c, value=torch.randn(5, 4)), "value")
    rejects(lambda: layer(x, c, return_weights=1), "return_weights")


# --------------------------------------------------------------------------- model and data
SCHEMES = M.POSITIONAL_SCHEMES


@st.composite
def configs(draw):
    h = draw(st.sampled_from([1, 2]))
    return M.TransformerConfig(
        vocab_size=draw(st.integers(2, 12)),
        block_size=draw(st.integers(2, 8)),
        d_model=2 * h * draw(st.integers(1, 3)),
        n_heads=h,
        n_layers=1,
        positional=draw(st.sampled_from(SCHEMES)),
        norm_position=draw(st.sampled_from(["pre", "post"])),
        bias=draw(st.booleans()),
        tie_weights=draw(st.booleans()),
    )


@FAST
@given(cfg=configs(), B=st.integers(1, 2), data=st.data())
def test_model_forward_and_generate(cfg, B, data):
    torch.manual_seed(0)
    model = M.TransformerLM(cfg)
    T = data.draw(st.integers(1, cfg.block_size))
    idx = torch.randint(cfg.vocab_size, (B, T))
    logits, loss = model(idx, idx)
    assert logits.shape == (B, T, cfg.vocab_size) and torch.isfinite(logits).all()
    assert loss.shape == () and torch.isfinite(loss)
    n = data.draw(st.integers(0, 3))
    out = model.generate(idx, n, temperature=data.draw(st.floats(0, 2)))
    assert out.shape == (B, T + n) and out.dtype == idx.dtype
    assert 0 <= out.min() and out.max() < cfg.vocab_size
    assert model.flops_per_token() > 0


CONFIG_ARGS = {
    "vocab_size": bad_int(),
    "block_size": bad_int(),
    "d_model": bad_int(),
    "n_heads": bad_int(),
    "n_layers": bad_int(),
    "d_ff": bad_optional_int(),
    "dropout": bad_float(0.0, 1.0),
    "positional": bad_choice(SCHEMES),
    "norm_position": bad_choice(("pre", "post")),
    "bias": BAD_BOOL,
    "fused_attention": BAD_BOOL,
    "tie_weights": BAD_BOOL,
}


@FAST
@given(data=st.data())
def test_config_names_a_bad_field(data):
    name = data.draw(st.sampled_from(sorted(CONFIG_ARGS)))
    kwargs = {"vocab_size": 10, "block_size": 8, "d_model": 8, "n_heads": 2, "n_layers": 1}
    kwargs[name] = data.draw(CONFIG_ARGS[name])
    rejects(lambda: M.TransformerConfig(**kwargs), name)


@FAST
@given(vocab=HUGE, d=st.sampled_from([1024, 4096]))
def test_config_refuses_a_model_too_big_for_memory(vocab, d):
    with pytest.raises(ValueError, match=r"would need [\d.]+ [GTP]iB"):
        M.TransformerConfig(vocab_size=vocab * 10, block_size=8, d_model=d, n_heads=4)


def _tiny_model():
    torch.manual_seed(0)
    return M.TransformerLM(
        M.TransformerConfig(vocab_size=10, block_size=8, d_model=8, n_heads=2, n_layers=1)
    )


@FAST
@given(data=st.data())
def test_model_names_bad_ids_and_generate_arguments(data):
    model = _tiny_model()
    good = torch.randint(10, (2, 4))
    which = data.draw(
        st.sampled_from(
            ["idx", "targets", "max_new_tokens", "temperature", "top_k", "generator", "T"]
        )
    )
    bad_ids = st.sampled_from(
        [good.float(), good.bool(), good + 10, good - 11, good[0], good[:, :0], good.numpy(), None]
    )
    if which == "idx":
        rejects(lambda: model(data.draw(bad_ids)), "idx")
    elif which == "targets":
        bad_targets = bad_ids.filter(lambda t: t is not None) | st.just(good[:, :2])
        rejects(lambda: model(good, data.draw(bad_targets)), "targets")
    elif which == "T":
        rejects(lambda: model.flops_per_token(data.draw(bad_optional_int())), "T")
    else:
        bad = {
            "max_new_tokens": bad_int(0),
            "temperature": bad_float(low=0.0),
            "top_k": bad_int(1, 10).filter(lambda v: v is not None),
            "generator": st.sampled_from([0, "g", np.random.default_rng(0)]),
        }[which]
        kwargs = {"max_new_tokens": 2, which: data.draw(bad)}
        rejects(lambda: model.generate(good, **kwargs), which)


@FAST
@given(text=st.text(alphabet="abcdef \n", max_size=30))
def test_tokenizer_round_trip(text):
    tok = D.CharTokenizer("abcdef \n")
    ids = tok.encode(text)
    assert ids.dtype == torch.long and ids.shape == (len(text),)
    assert tok.decode(ids) == text


@FAST
@given(
    ids=st.one_of(
        st.lists(st.integers(8, 100), min_size=1, max_size=3),
        st.lists(st.integers(-100, -1), min_size=1, max_size=3),
        st.lists(st.floats(0, 5), min_size=1, max_size=3),
        st.lists(st.booleans(), min_size=1, max_size=3),
        st.just(torch.zeros(2, 2, dtype=torch.long)),
        st.just(torch.zeros(3)),
    )
)
def test_tokenizer_names_bad_ids(ids):
    rejects(lambda: D.CharTokenizer("abcdef \n").decode(ids), "ids")


@FAST
@given(text=st.one_of(st.integers(), st.none(), st.just(b"abc"), st.just(["a"])))
def test_tokenizer_names_bad_text(text):
    rejects(lambda: D.CharTokenizer("abc").encode(text), "text")


@FAST
@given(B=st.integers(1, 4), T=st.integers(1, 8), seed=st.integers(0, 99))
def test_get_batch_valid(B, T, seed):
    x, y = D.get_batch(torch.arange(20), B, T, generator=torch.Generator().manual_seed(seed))
    assert x.shape == y.shape == (B, T) and x.dtype == torch.long
    assert torch.equal(y, x + 1)  # data is arange: the targets are the next ids


@FAST
@given(data=st.data())
def test_get_batch_names_a_bad_argument(data):
    args = {"data": torch.arange(20), "batch_size": 2, "block_size": 4}
    which = data.draw(st.sampled_from(["data", "batch_size", "block_size", "generator", "device"]))
    args[which] = data.draw(
        {
            "data": st.sampled_from(
                [
                    torch.arange(20).float(),
                    torch.ones(4, 5, dtype=torch.long),
                    torch.arange(3),
                    list(range(20)),
                    None,
                ]
            ),
            "batch_size": st.one_of(bad_int(), HUGE),
            "block_size": st.one_of(bad_int(), HUGE),
            "generator": st.sampled_from([0, "seed", np.random.default_rng(0)]),
            "device": st.sampled_from(["tpu", "gpu", 0, 5.5, "cuda:99"]),
        }[which]
    )
    rejects(lambda: D.get_batch(**args), which)


def test_load_corpus_names_a_bad_split():
    for split in ("test", "", None, 1):
        rejects(lambda split=split: D.load_corpus(split), "split")


# --------------------------------------------------------------------------- coverage
COVERED = (
    set(SCALAR_FUNCTIONS)
    | set(CONSTRUCTORS)
    | set(BLOCKS)
    | set(MODULE_NAMES)
    | {
        "sinusoidal_frequencies",
        "encoding_properties",
        "offset_share",
        "scaled_dot_product_attention",
        "padding_mask",
        "combine_masks",
        "TransformerConfig",
        "TransformerLM",
        "get_batch",
        "load_corpus",
        "load_result",
        "AdditiveAttention",
    }
)
NOT_COVERED = {  # public callables without arguments to get wrong
    "load_works": "no arguments",
}


def _public_callables() -> set[str]:
    names = set()
    for module in (P, memn2n, alibi, A, masks, additive, L, D, tasks, M):
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not isinstance(obj, dict):  # lru_cache-wrapped functions too
                names.add(name)
    return names


def test_every_public_entry_point_is_covered():
    public = _public_callables()
    missing = public - COVERED - set(NOT_COVERED)
    assert not missing, f"public entry points without a property test: {sorted(missing)}"
    assert len(public & COVERED) >= 30  # the discovery found the modules (33 names in 0.2.0)


# --------------------------------------------------------------------------- experiments' configs
def test_stability_config_and_run_name_bad_arguments():
    from mini_transformer import stability as S

    rejects(lambda: S.StabilityConfig(n_layers=0), "n_layers")
    rejects(lambda: S.StabilityConfig(n_layers=2.5), "n_layers")
    rejects(lambda: S.StabilityConfig(vocab_size=1), "vocab_size")
    # the sizes of the blocks are checked by the blocks, when the model is built
    rejects(lambda: S.xiong_lm(S.StabilityConfig(d_model=30, n_heads=4), "pre"), "d_model")
    rejects(lambda: S.StabilityConfig(activation="tanh"), "activation")
    run = S.train_run
    rejects(lambda: run("post", lr=-1.0, warmup_steps=0, steps=1), "lr")
    rejects(lambda: run("post", lr=math.nan, warmup_steps=0, steps=1), "lr")
    rejects(lambda: run("post", lr=1e-3, warmup_steps=0, steps=0), "steps")
    rejects(lambda: run("post", lr=1e-3, warmup_steps=-1, steps=1), "warmup_steps")
    rejects(lambda: run("mid", lr=1e-3, warmup_steps=0, steps=1), "norm_position")


def test_lab_and_model_counts_name_bad_arguments():
    from mini_transformer import lab

    rejects(lambda: lab.cosine_similarity_matrix(torch.zeros(3, 4).long()), "w")
    rejects(lambda: lab.make_model("rope", lab.LabConfig(d_model=30, n_heads=4)), "d_model")
    cfg = M.TransformerConfig(vocab_size=5, block_size=4, d_model=4, n_heads=1, n_layers=1)
    m = M.TransformerLM(cfg)
    rejects(lambda: m.flops_per_token(T=2.5), "T")
    rejects(lambda: m.num_parameters(by_component="yes"), "by_component")


# --------------------------------------------------------------------------- committed results
@given(st.one_of(st.text(max_size=30), st.integers(), st.none()))
def test_load_result_names_a_bad_name(name):
    if name in D.RESULTS:
        return
    rejects(lambda: D.load_result(name), "name")


@pytest.mark.parametrize("name", D.RESULTS)
def test_load_result_reads_the_installed_file_byte_for_byte(name):
    import importlib.resources
    import json

    path = importlib.resources.files("mini_transformer") / "results" / f"{name}.json"
    assert D.load_result(name) == json.loads(path.read_bytes())
