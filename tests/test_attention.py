"""Tests of mini_transformer.attention.

References are independent of the implementation: PyTorch's own
``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention``, an explicit loop over heads,
softmax written by hand, and the masked score table printed in seed 05.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mini_transformer.attention import (
    MultiHeadAttention,
    causal_mask,
    combine_masks,
    padding_mask,
    scaled_dot_product_attention,
)
from mini_transformer.positional import ALiBi, alibi_bias

torch.set_num_threads(1)

# float32 results computed in a different order (PyTorch's kernels vs ours) agree to a few ulp
# of values of order 1; 1e-5 leaves room for accumulation over d_k <= 64 terms.
ATOL = 1e-5


def random_mask(*shape: int, generator: torch.Generator, p: float = 0.5) -> torch.Tensor:
    """A random bool mask with at least one allowed key in every row."""
    m = torch.rand(*shape, generator=generator) < p
    m[..., 0] = True
    return m


class StandInRotary(nn.Module):
    """A tiny rotary embedding: rotates consecutive pairs (2i, 2i+1) by pos * theta_i."""

    def __init__(self, d_head: int, base: float = 10000.0) -> None:
        super().__init__()
        self.theta = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
        self.calls: list[tuple[int, ...]] = []

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        self.calls.append(tuple(x.shape))
        T = x.shape[-2]
        angle = (torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * self.theta).to(
            x.dtype
        )
        cos, sin = angle.cos(), angle.sin()  # (T, d_head / 2)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return out.flatten(-2)


def copy_to_torch_mha(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(mha.d_model, mha.n_heads, bias=True, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(
            torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight])
        )
        ref.in_proj_bias.copy_(torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias]))
        ref.out_proj.weight.copy_(mha.out_proj.weight)
        ref.out_proj.bias.copy_(mha.out_proj.bias)
    return ref.eval()


# --- scaled_dot_product_attention ------------------------------------------------------------


def test_sdpa_equals_torch_without_mask():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g) for _ in range(3))
    ours = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v), atol=ATOL, rtol=0)


def test_sdpa_equals_torch_with_causal_mask():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=g) for _ in range(3))
    ours = scaled_dot_product_attention(q, k, v, mask=causal_mask(6))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, ref, atol=ATOL, rtol=0)


def test_sdpa_equals_torch_with_arbitrary_broadcast_mask_and_bias():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 3, 4, 8, generator=g)
    k, v = torch.randn(2, 3, 7, 8, generator=g), torch.randn(2, 3, 7, 5, generator=g)
    mask = random_mask(2, 1, 4, 7, generator=g)  # broadcasts over heads
    bias = torch.randn(3, 4, 7, generator=g)
    ours = scaled_dot_product_attention(q, k, v, mask=mask, score_bias=bias)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~mask, float("-inf")))
    torch.testing.assert_close(ours, ref, atol=ATOL, rtol=0)


def test_seed05_masked_score_table_gives_lower_triangular_weights():
    # Seed 05's 4x4 table of scores for "나는 자연어 처리를 즐겨한다" (X = masked).
    S = torch.tensor(
        [[23.0, 0, 0, 0], [16, 27, 0, 0], [14, 20, 23, 0], [12, 19, 20, 23]], dtype=torch.float64
    )
    q, k = torch.eye(4, dtype=torch.float64), S.T  # q @ k^T = S
    v = torch.eye(4, dtype=torch.float64)
    out, w = scaled_dot_product_attention(
        q, k, v, mask=causal_mask(4), return_weights=True, scale=1.0
    )
    expected = torch.zeros(4, 4, dtype=torch.float64)
    for i in range(4):  # softmax written by hand over the allowed keys j <= i
        e = [math.exp(S[i, j].item()) for j in range(i + 1)]
        expected[i, : i + 1] = torch.tensor(e, dtype=torch.float64) / sum(e)
    torch.testing.assert_close(w, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)  # v = I: out = weights
    assert w[0, 0] == 1.0 and (w.triu(1) == 0).all()


def test_weights_rows_sum_to_one_and_masked_keys_get_exactly_zero():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 6, 8, generator=g) for _ in range(3))
    mask = random_mask(2, 6, 6, generator=g)
    _, w = scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 6), atol=1e-6, rtol=0)
    assert (w[~mask] == 0).all()


def test_sdpa_fully_masked_row_gives_zero_output_and_weights_not_nan():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(5, 8, generator=g, requires_grad=True) for _ in range(3))
    mask = causal_mask(5).clone()
    mask[2] = False
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert (out[2] == 0).all() and (w[2] == 0).all()
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    assert (q.grad[2] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_masking_is_finite_on_cpu(dtype):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 6, 8, generator=g).to(dtype) for _ in range(3))
    mask = causal_mask(6).clone()
    mask[1] = False  # a fully masked row as well
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True)
    assert out.dtype == dtype and torch.isfinite(out).all() and torch.isfinite(w).all()
    assert (w[:, ~mask] == 0).all() and (out[:, 1] == 0).all()
    ref = scaled_dot_product_attention(q.double(), k.double(), v.double(), mask=mask)
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=0)  # ~8-bit mantissa


def test_a_large_negative_constant_overflows_in_float16_but_finfo_min_does_not():
    assert torch.tensor(-(2**30), dtype=torch.float16).item() == float("-inf")
    assert torch.isfinite(torch.tensor(-(2**30), dtype=torch.bfloat16))
    assert torch.tensor(torch.finfo(torch.float16).min, dtype=torch.float16).item() == -65504.0


# --- masks -----------------------------------------------------------------------------------


def test_causal_mask_is_lower_triangular_bool():
    m = causal_mask(4)
    assert m.dtype == torch.bool and m.shape == (4, 4)
    for i in range(4):
        for j in range(4):
            assert bool(m[i, j]) == (j <= i)
    assert causal_mask(2, 3).tolist() == [[True, False, False], [True, True, False]]


def test_padding_mask_marks_real_tokens_and_broadcasts_to_heads():
    m = padding_mask([2, 4, 0], 4)
    assert m.shape == (3, 1, 1, 4) and m.dtype == torch.bool
    assert m[:, 0, 0].tolist() == [
        [True, True, False, False],
        [True, True, True, True],
        [False, False, False, False],
    ]
    assert padding_mask(torch.tensor([1, 3]), 3)[:, 0, 0].sum(-1).tolist() == [1, 3]


def test_combine_masks_is_logical_and_with_broadcasting():
    c = combine_masks(causal_mask(4), None, padding_mask([3, 4], 4))
    assert c.shape == (2, 1, 4, 4)
    for b, n in enumerate([3, 4]):
        for i in range(4):
            for j in range(4):
                assert bool(c[b, 0, i, j]) == (j <= i and j < n)
    assert combine_masks(None, None) is None


# --- MultiHeadAttention ----------------------------------------------------------------------


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("case", ["plain", "causal", "padding", "cross"])
def test_mha_equals_torch_multihead_attention(fused, case):
    torch.manual_seed(6)
    mha = MultiHeadAttention(16, 4, fused_attention=fused).eval()
    ref = copy_to_torch_mha(mha)
    x = torch.randn(3, 5, 16)
    ctx, kw, rkw = None, {}, {}
    if case == "causal":
        kw, rkw = {"causal": True}, {"attn_mask": ~causal_mask(5)}  # torch: True = blocked
    elif case == "padding":
        lengths = [5, 3, 1]
        kw = {"mask": padding_mask(lengths, 5)}
        rkw = {"key_padding_mask": ~padding_mask(lengths, 5)[:, 0, 0]}
    elif case == "cross":
        ctx = torch.randn(3, 7, 16)
    out, w = mha(x, memory=ctx, return_weights=True, **kw)
    c = x if ctx is None else ctx
    ref_out, ref_w = ref(x, c, c, need_weights=True, average_attn_weights=False, **rkw)
    torch.testing.assert_close(out, ref_out, atol=ATOL, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=ATOL, rtol=0)


def test_vectorised_heads_equal_an_explicit_loop_over_heads():
    torch.manual_seed(7)
    d_model, h = 12, 3
    d_head = d_model // h
    mha = MultiHeadAttention(d_model, h, fused_attention=False).eval()
    x, ctx = torch.randn(2, 4, d_model), torch.randn(2, 6, d_model)
    for context in (None, ctx):
        c = x if context is None else context
        heads = []
        for i in range(h):  # head i uses rows i*d_head:(i+1)*d_head of each projection
            rows = slice(i * d_head, (i + 1) * d_head)
            q = x @ mha.q_proj.weight[rows].T + mha.q_proj.bias[rows]
            k = c @ mha.k_proj.weight[rows].T + mha.k_proj.bias[rows]
            v = c @ mha.v_proj.weight[rows].T + mha.v_proj.bias[rows]
            w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d_head), dim=-1)
            heads.append(w @ v)
        expected = mha.out_proj(torch.cat(heads, dim=-1))
        for fused in (False, True):
            mha.fused_attention = fused
            out, _ = mha(x, memory=context)
            torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)


def _fused_vs_scratch(kwargs_fn, T_q=6, T_k=None, d_model=16, h=4):
    torch.manual_seed(8)
    kw = kwargs_fn()
    # the schemes attention is built with (the rest are per-call arguments)
    built = {name: kw.pop(name) for name in ("rotary", "alibi") if name in kw}
    mha = MultiHeadAttention(d_model, h, **built).eval()
    x = torch.randn(2, T_q, d_model, requires_grad=True)
    ctx = None if T_k is None else torch.randn(2, T_k, d_model)
    results = []
    for fused in (True, False):
        mha.fused_attention = fused
        mha.zero_grad()
        x.grad = None
        out, _ = mha(x, memory=ctx, **kw)
        out.square().sum().backward()
        results.append((out.detach(), x.grad.clone(), mha.q_proj.weight.grad.clone()))
    (a, ga, wa), (b, gb, wb) = results
    assert torch.isfinite(a).all() and torch.isfinite(ga).all()
    torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    torch.testing.assert_close(ga, gb, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(wa, wb, atol=1e-4, rtol=1e-4)


FUSED_CASES = {
    "no mask": dict,
    "causal": lambda: {"causal": True},
    "padding": lambda: {"mask": padding_mask([6, 2], 6)},
    "causal+padding": lambda: {"mask": padding_mask([6, 2], 6), "causal": True},
    "arbitrary mask": lambda: {"mask": random_mask(2, 4, 6, 6, generator=torch.Generator())},
    "alibi-like bias": lambda: {"score_bias": -torch.rand(4, 1, 1) * causal_mask(6).T.float()},
    "bias+causal+padding": lambda: {
        "score_bias": torch.randn(4, 6, 6),
        "causal": True,
        "mask": padding_mask([6, 3], 6),
    },
    "rotary": lambda: {"rotary": StandInRotary(4), "causal": True},
    "alibi": lambda: {"alibi": ALiBi(4, 4), "causal": True},  # T = 6 > max_len: rebuilt
    "alibi+bias": lambda: {"alibi": ALiBi(4, 8), "score_bias": torch.randn(4, 6, 6)},
    "fully masked rows": lambda: {"mask": padding_mask([0, 3], 6)},
    "fully masked + bias": lambda: {
        "mask": padding_mask([0, 3], 6),
        "score_bias": torch.ones(6, 6),
    },
}


@pytest.mark.parametrize("case", list(FUSED_CASES))
def test_fused_path_equals_scratch_path_forward_and_backward(case):
    _fused_vs_scratch(FUSED_CASES[case])


def test_fused_path_equals_scratch_path_for_cross_attention_with_mask():
    _fused_vs_scratch(lambda: {"mask": padding_mask([7, 4], 7)}, T_q=5, T_k=7)


@settings(max_examples=15, deadline=None)
@given(
    B=st.integers(1, 3),
    h=st.sampled_from([1, 2, 4]),
    T=st.integers(1, 9),
    causal=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_fused_equals_scratch_for_random_sizes(B, h, T, causal, seed):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(8 * h, h).eval()
    x = torch.randn(B, T, 8 * h)
    lengths = torch.randint(0, T + 1, (B,)).tolist()
    kw = {"mask": padding_mask(lengths, T), "causal": causal}
    mha.fused_attention = True
    a, _ = mha(x, **kw)
    mha.fused_attention = False
    b, _ = mha(x, **kw)
    assert torch.isfinite(a).all()
    torch.testing.assert_close(a, b, atol=ATOL, rtol=0)


def test_rotary_is_applied_to_queries_and_keys_of_shape_b_h_t_dhead():
    torch.manual_seed(9)
    mha = MultiHeadAttention(16, 4).eval()
    rot = StandInRotary(4)
    mha_rot = MultiHeadAttention(16, 4, rotary=rot).eval()
    mha_rot.load_state_dict(mha.state_dict())  # same keys: the rotary module holds no state
    x = torch.randn(2, 5, 16)
    with_rot, _ = mha_rot(x)
    without, _ = mha(x)
    assert rot.calls == [(2, 4, 5, 4), (2, 4, 5, 4)]
    assert not torch.allclose(with_rot, without)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("T", [5, 8, 11])  # inside, at and past the table's max_len = 8
def test_alibi_given_at_construction_equals_its_bias_passed_per_call(fused, T):
    torch.manual_seed(9)
    mha = MultiHeadAttention(16, 4, fused_attention=fused).eval()
    mha_alibi = MultiHeadAttention(16, 4, fused_attention=fused, alibi=ALiBi(4, 8)).eval()
    mha_alibi.load_state_dict(mha.state_dict())
    x = torch.randn(2, T, 16)
    expected, _ = mha(x, causal=True, score_bias=alibi_bias(4, T))
    out, _ = mha_alibi(x, causal=True)
    assert torch.equal(out, expected)  # bit-identical: the sliced table is the same bias
    assert torch.equal(ALiBi(4, 8)(2, 7), alibi_bias(4, 2, 7))  # last 2 queries of 7 keys


@pytest.mark.parametrize("n_heads", [1, 4, 6])
def test_alibi_computes_the_same_bias_checked_or_trusted(n_heads):
    """ALiBi's forward slices its table whether it checks (a direct call) or not (inside a
    model or checks.trusted), and the slice is alibi_bias's own bias bit for bit."""
    from mini_transformer import checks

    alibi = ALiBi(n_heads, 16)
    for T_q, T_k in [(1, 1), (5, 5), (2, 7), (16, 16), (3, 16), (20, 20), (4, 21)]:
        direct = alibi(T_q, T_k)
        with checks.trusted():
            trusted = alibi(T_q, T_k)
        assert torch.equal(direct, trusted)
        assert torch.equal(direct, alibi_bias(n_heads, T_q, T_k))
    with pytest.raises(ValueError, match=r"T_k must be an integer >= 5 \(queries are the last"):
        alibi(5, 3)


def test_error_positional_modules_at_construction():
    with pytest.raises(TypeError, match="rotary must be an nn.Module or None"):
        MultiHeadAttention(8, 2, rotary="rope")
    with pytest.raises(ValueError, match="alibi must be None or an ALiBi with n_heads=2"):
        MultiHeadAttention(8, 2, alibi=ALiBi(4, 8))


def test_rotary_from_positional_module_if_available():
    positional = pytest.importorskip("mini_transformer.positional")
    if not hasattr(positional, "RotaryEmbedding"):
        pytest.skip("positional.RotaryEmbedding not written yet")
    _fused_vs_scratch(lambda: {"rotary": positional.RotaryEmbedding(4), "causal": True})


@pytest.mark.parametrize("fused", [True, False])
def test_causality_future_inputs_get_zero_gradient(fused):
    torch.manual_seed(10)
    T = 6
    mha = MultiHeadAttention(16, 4, fused_attention=fused).eval()
    x = torch.randn(1, T, 16)
    jac = torch.autograd.functional.jacobian(lambda inp: mha(inp, causal=True)[0], x)
    jac = jac[0, :, :, 0]  # (T_out, d, T_in, d)
    for t in range(T):
        assert (jac[t, :, t + 1 :] == 0).all(), f"output {t} depends on a future input"
        assert jac[t, :, : t + 1].abs().sum() > 0


@pytest.mark.parametrize("fused", [True, False])
def test_causality_changing_a_future_token_leaves_earlier_outputs_unchanged(fused):
    torch.manual_seed(11)
    mha = MultiHeadAttention(16, 4, fused_attention=fused).eval()
    x = torch.randn(1, 6, 16)
    y = x.clone()
    y[0, 4] += 10.0
    a, _ = mha(x, causal=True)
    b, _ = mha(y, causal=True)
    assert torch.equal(a[0, :4], b[0, :4]) and not torch.allclose(a[0, 4:], b[0, 4:])


@pytest.mark.parametrize("fused", [True, False])
def test_mha_fully_masked_rows_give_out_proj_of_zero_not_nan(fused):
    torch.manual_seed(12)
    mha = MultiHeadAttention(16, 4, fused_attention=fused).eval()
    x = torch.randn(2, 4, 16)
    out, _ = mha(x, mask=padding_mask([0, 4], 4))
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0], mha.out_proj.bias.expand(4, 16), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fused", [True, False])
def test_mha_low_precision_with_masks_is_finite(dtype, fused):
    torch.manual_seed(13)
    mha = MultiHeadAttention(16, 4, fused_attention=fused).eval().to(dtype)
    x = torch.randn(2, 5, 16).to(dtype)
    out, _ = mha(x, mask=padding_mask([0, 3], 5), causal=True, score_bias=torch.randn(4, 5, 5))
    assert out.dtype == dtype and torch.isfinite(out).all()


def test_return_weights_returns_per_head_weights_even_when_fused():
    torch.manual_seed(14)
    mha = MultiHeadAttention(16, 4, fused_attention=True).eval()
    x, ctx = torch.randn(2, 3, 16), torch.randn(2, 7, 16)
    out, w = mha(x, memory=ctx, return_weights=True)
    assert w.shape == (2, 4, 3, 7)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 3), atol=1e-6, rtol=0)
    assert mha(x, memory=ctx)[1] is None
    torch.testing.assert_close(out, mha(x, memory=ctx)[0], atol=ATOL, rtol=0)


@pytest.mark.parametrize("fused", [True, False])
def test_dropout_acts_in_training_only(fused):
    torch.manual_seed(15)
    mha = MultiHeadAttention(16, 4, dropout=0.5, fused_attention=fused)
    x = torch.randn(2, 5, 16)
    mha.eval()
    assert torch.equal(mha(x)[0], mha(x)[0])
    mha.train()
    assert not torch.allclose(mha(x)[0], mha(x)[0])


# --- errors: one test per message ------------------------------------------------------------


def test_error_d_model_not_divisible_by_n_heads_names_both():
    with pytest.raises(ValueError, match=r"d_model must be divisible by n_heads.*d_model=10.*=4"):
        MultiHeadAttention(10, 4)


def test_error_n_heads_must_be_positive():
    with pytest.raises(ValueError, match="n_heads must be a positive integer, got 0"):
        MultiHeadAttention(8, 0)


def test_error_dropout_out_of_range():
    with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\), got 1.5"):
        MultiHeadAttention(8, 2, dropout=1.5)


def test_error_wrong_input_rank():
    with pytest.raises(
        ValueError, match=r"x must have 3 dimensions \(B, T, d_model=8\), got shape \(5, 8\)"
    ):
        MultiHeadAttention(8, 2)(torch.randn(5, 8))


def test_error_wrong_last_dimension():
    with pytest.raises(
        ValueError,
        match=r"x must have shape \(B, T, d_model=8\) with size 8 in dimension 2, got shape",
    ):
        MultiHeadAttention(8, 2)(torch.randn(1, 5, 6))


def test_error_memory_with_different_d_model():
    with pytest.raises(ValueError, match=r"memory must have shape \(B, T, d_model=8\) with size 8"):
        MultiHeadAttention(8, 2)(torch.randn(1, 5, 8), memory=torch.randn(1, 3, 4))


def test_error_memory_with_different_batch_size():
    with pytest.raises(
        ValueError, match=r"memory must have shape \(B, T, d_model=8\) with size 2 in dimension 0"
    ):
        MultiHeadAttention(8, 2)(torch.randn(2, 5, 8), memory=torch.randn(3, 3, 8))


def test_error_mask_shape_names_the_expected_shape():
    with pytest.raises(
        ValueError, match=r"mask of shape \(4, 4\) does not broadcast to .*\(1, 2, 5, 5\)"
    ):
        MultiHeadAttention(8, 2)(torch.randn(1, 5, 8), mask=causal_mask(4))


def test_error_mask_must_be_bool_in_module():
    with pytest.raises(TypeError, match="mask must be a boolean tensor .*got dtype torch.float32"):
        MultiHeadAttention(8, 2)(torch.randn(1, 5, 8), mask=torch.zeros(5, 5))


def test_error_score_bias_shape():
    with pytest.raises(ValueError, match=r"score_bias of shape \(3, 5, 5\) does not broadcast"):
        MultiHeadAttention(8, 2)(torch.randn(1, 5, 8), score_bias=torch.zeros(3, 5, 5))


def test_error_score_bias_must_be_float():
    with pytest.raises(TypeError, match="score_bias must be a floating-point tensor"):
        MultiHeadAttention(8, 2)(torch.randn(1, 5, 8), score_bias=causal_mask(5))


def test_error_sdpa_float_mask_is_rejected_with_a_pointer_to_score_bias():
    q = torch.randn(3, 4)
    with pytest.raises(TypeError, match="pass an additive float mask as `score_bias`"):
        scaled_dot_product_attention(q, q, q, mask=torch.zeros(3, 3))


def test_error_sdpa_mask_shape():
    q = torch.randn(3, 4)
    with pytest.raises(ValueError, match=r"mask of shape \(2, 2\) does not broadcast to"):
        scaled_dot_product_attention(q, q, q, mask=causal_mask(2))


def test_error_sdpa_bias_must_be_float():
    q = torch.randn(3, 4)
    with pytest.raises(TypeError, match="bias must be a floating-point tensor"):
        scaled_dot_product_attention(q, q, q, score_bias=causal_mask(3))


def test_error_sdpa_query_key_dims_differ():
    with pytest.raises(
        ValueError,
        match=r"k must have shape \(\.\.\., T_k, d_k=4 of q\) with size 4 in dimension 1",
    ):
        scaled_dot_product_attention(torch.randn(3, 4), torch.randn(3, 5), torch.randn(3, 5))


def test_error_sdpa_keys_values_lengths_differ():
    with pytest.raises(
        ValueError,
        match=r"v must have shape \(\.\.\., T_k=3 of k, d_v\) with size 3 in dimension 0",
    ):
        scaled_dot_product_attention(torch.randn(3, 4), torch.randn(3, 4), torch.randn(2, 4))


def test_error_sdpa_needs_two_dims():
    msg = r"q must have at least 2 dimensions \(\.\.\., T, d\), got shape \(4,\)"
    with pytest.raises(ValueError, match=msg):
        scaled_dot_product_attention(torch.randn(4), torch.randn(3, 4), torch.randn(3, 4))


def test_error_sdpa_dropout_out_of_range():
    q = torch.randn(3, 4)
    with pytest.raises(ValueError, match=r"dropout_p must be a probability in \[0, 1\), got 1.0"):
        scaled_dot_product_attention(q, q, q, dropout_p=1.0)


def test_error_causal_mask_size():
    with pytest.raises(ValueError, match="T must be a positive integer, got 0"):
        causal_mask(0)


def test_error_padding_mask_length_out_of_range():
    with pytest.raises(ValueError, match=r"lengths\[1\] must be an integer in \[0, 4\], got 5"):
        padding_mask([2, 5], 4)
    with pytest.raises(ValueError, match=r"lengths\[1\] must be an integer in \[0, 4\], got 5"):
        padding_mask(torch.tensor([2, 5]), 4)


def test_error_padding_mask_fractional_lengths_are_never_truncated():
    with pytest.raises(TypeError, match=r"lengths\[0\] must be an integer in \[0, 3\], got 1.5"):
        padding_mask([1.5, 2.7], 3)
    with pytest.raises(TypeError, match=r"lengths\[1\] must be an integer .*got True"):
        padding_mask([1, True], 3)
    with pytest.raises(TypeError, match="lengths must be a sequence of B integers, got int"):
        padding_mask(3, 3)


def test_error_padding_mask_float_lengths():
    with pytest.raises(TypeError, match=r"lengths\[0\] must be an integer in \[0, 4\], got 1.0"):
        padding_mask(torch.tensor([1.0, 2.0]), 4)


def test_error_padding_mask_empty_lengths():
    with pytest.raises(ValueError, match="lengths must be a non-empty 1-D sequence"):
        padding_mask([], 4)


def test_error_combine_masks_do_not_broadcast():
    with pytest.raises(ValueError, match=r"masks of shapes \(3, 3\) and \(4, 4\) do not broadcast"):
        combine_masks(causal_mask(3), causal_mask(4))


def test_error_combine_masks_non_bool():
    with pytest.raises(TypeError, match="mask 1 must be a boolean tensor"):
        combine_masks(causal_mask(3), torch.ones(3, 3))


# --- bad input found by the property suite and issue 15 ---------------------------------------


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64])
def test_error_sdpa_rejects_non_float_inputs(dtype):
    q = torch.ones(3, 4).to(dtype)
    with pytest.raises(TypeError, match=f"q must be a floating-point tensor .*got dtype {dtype}"):
        scaled_dot_product_attention(q, q, q)


def test_error_sdpa_dtype_mismatch_names_each_argument():
    q = torch.randn(3, 4)
    with pytest.raises(
        TypeError, match=r"k must have the dtype of q \(torch.float32\), got dtype torch.float64"
    ):
        scaled_dot_product_attention(q, q.double(), q)


def test_error_sdpa_zero_d_k_is_a_clear_error_not_zero_division():
    q = torch.randn(3, 0)
    with pytest.raises(ValueError, match=r"q must not be empty .*got shape \(3, 0\)"):
        scaled_dot_product_attention(q, q, q)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), 0.0, -1.0])
def test_error_sdpa_scale_must_be_finite_and_positive(scale):
    q = torch.randn(3, 4)
    with pytest.raises(ValueError, match="scale must be a finite number > 0"):
        scaled_dot_product_attention(q, q, q, scale=scale)


def test_error_sdpa_refuses_terabyte_scores_before_allocating():
    q = torch.randn(1, 1).expand(10**6, 1)
    with pytest.raises(ValueError, match=r"the attention scores .* would need 3.6 TiB"):
        scaled_dot_product_attention(q, q, q)


def test_error_mha_input_dtype_differs_from_weights():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(
        TypeError,
        match=r"x must have the dtype of the layer's weights "
        r"\(torch.float32\), got dtype torch.float64",
    ):
        mha(torch.randn(1, 5, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        mha(torch.ones(1, 5, 8, dtype=torch.long))


def test_mha_flags_must_be_bools():
    with pytest.raises(TypeError, match="fused_attention must be True or False, got 1"):
        MultiHeadAttention(8, 2, fused_attention=1)
    with pytest.raises(TypeError, match="causal must be True or False, got 'yes'"):
        MultiHeadAttention(8, 2)(torch.randn(1, 3, 8), causal="yes")


def test_fully_masked_row_by_minus_inf_bias_is_zero_not_nan_on_both_paths():
    """An additive -inf bias that masks a whole row acts like a boolean mask: zeros."""
    torch.manual_seed(0)
    q = k = v = torch.randn(1, 2, 4, 8)
    bias = torch.zeros(2, 4, 4)
    bias[:, 1, :] = float("-inf")  # query 1 may attend to nothing
    bias[:, 2, 3] = float("-inf")  # query 2 may not attend to key 3
    out, w = scaled_dot_product_attention(q, k, v, score_bias=bias, return_weights=True)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert (out[:, :, 1] == 0).all() and (w[:, :, 1] == 0).all()
    ref = scaled_dot_product_attention(q, k, v, mask=bias.isfinite())
    assert torch.equal(out, ref)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 4, 8)
    fused, _ = mha(x, score_bias=bias)
    mha.fused_attention = False
    scratch, _ = mha(x, score_bias=bias)
    assert torch.isfinite(fused).all()
    torch.testing.assert_close(fused, scratch)
    assert torch.allclose(fused[:, 1], mha.out_proj.bias)  # zero attention output, then W^O


def test_finite_bias_gives_the_same_numbers_as_before():
    """Splitting out -inf entries leaves a finite bias (ALiBi) exactly as it was."""
    torch.manual_seed(1)
    q, k, v = torch.randn(3, 2, 5, 4).unbind(0)
    bias = torch.randn(2, 5, 5)
    scores = q @ k.transpose(-2, -1) / 2.0 + bias
    expected = torch.softmax(scores, dim=-1) @ v
    assert torch.equal(scaled_dot_product_attention(q, k, v, score_bias=bias), expected)


def _attend_zeroing_weights(q, k, v, mask, scale, dropout_p):
    """The rule as it was before issue 33's M2: multiply the *weights* of fully masked rows by
    0 before they multiply ``v`` (so backward saved the softmax's output and that product)."""
    scores = (q @ k.transpose(-2, -1)) * scale
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1) * mask.any(dim=-1, keepdim=True)
    used = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return used @ v, weights


@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zeroing_empty_rows_of_the_output_equals_zeroing_their_weights(dtype, dropout_p):
    """Bit-identical outputs, weights and gradients (q, k, v), fully masked rows included."""
    from mini_transformer.attention import _attend

    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(3, 2, 6, 8, generator=g, dtype=dtype) for _ in range(3))
    mask = combine_masks(causal_mask(6), padding_mask([6, 0, 3], 6))  # batch 1: no keys at all
    mask = mask & (torch.arange(6) != 2)[:, None]  # query 2: no keys in any batch
    results = []
    for attend in (_attend_zeroing_weights, lambda *a: _attend(*a[:4], None, *a[4:])):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        torch.manual_seed(0)  # the same dropout draws
        out, weights = attend(*leaves, mask, 0.35, dropout_p)
        (out * torch.linspace(-1, 1, 8, dtype=dtype)).sum().backward()
        results.append((out, weights, *(t.grad for t in leaves)))
    for old, new in zip(*results, strict=True):
        assert torch.equal(old, new)
    assert results[1][0][1].abs().sum() == 0 and results[1][0][:, :, 2].abs().sum() == 0


def test_backward_saves_one_scores_sized_tensor_with_an_empty_row():
    """Zeroing the output (not the weights) leaves the softmax's output the only (..., T_q,
    T_k) tensor saved for backward: 2 of them before issue 33's M2."""
    from torch.autograd.graph import saved_tensors_hooks

    from mini_transformer.attention import _attend

    q, k, v = (torch.randn(2, 2, 32, 4).requires_grad_() for _ in range(3))
    mask = combine_masks(causal_mask(32), padding_mask([32, 0], 32))  # batch 1: no keys
    saved = {}

    def pack(t):  # one entry per storage: a view of a saved tensor costs nothing more
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        _attend(q, k, v, mask, None, 0.5, 0.0)
    assert list(saved.values()).count(2 * 2 * 32 * 32 * 4) == 1  # (B, h, T, T) float32
