"""Tests of additive (Bahdanau) attention in mini_transformer.attention.

The reference is the formula written plainly: a double loop over (query i, key j) computing
``w . tanh(W_q x_i + W_k c_j + b)`` with ``torch.dot``, and the softmax as exp / sum.
"""

from __future__ import annotations

import math

import pytest
import torch

from mini_transformer.additive import AdditiveAttention
from mini_transformer.attention import causal_mask, scaled_dot_product_attention

torch.set_num_threads(1)


def reference(layer: AdditiveAttention, x, c, v, mask=None):
    """Bahdanau's e_ij = v_a^T tanh(W_a s_i + U_a h_j), then a masked softmax, by loops."""
    Wq, Wk, bk, w = layer.q_proj.weight, layer.k_proj.weight, layer.k_proj.bias, layer.w
    T_q, T_k = x.shape[0], c.shape[0]
    e = torch.empty(T_q, T_k, dtype=x.dtype)
    for i in range(T_q):
        for j in range(T_k):
            e[i, j] = torch.dot(w, torch.tanh(Wq @ x[i] + Wk @ c[j] + bk))
    out = torch.zeros(T_q, v.shape[1], dtype=x.dtype)
    a = torch.zeros(T_q, T_k, dtype=x.dtype)
    for i in range(T_q):
        allowed = [j for j in range(T_k) if mask is None or bool(mask[i, j])]
        if not allowed:
            continue
        z = sum(math.exp(e[i, j].item()) for j in allowed)
        for j in allowed:
            a[i, j] = math.exp(e[i, j].item()) / z
            out[i] += a[i, j] * v[j]
    return e, a, out


@pytest.fixture
def setup():
    torch.manual_seed(0)
    layer = AdditiveAttention(d_query=5, d_key=7, d_attn=6).double()
    x = torch.randn(4, 5, dtype=torch.float64)
    c = torch.randn(6, 7, dtype=torch.float64)
    v = torch.randn(6, 3, dtype=torch.float64)
    return layer, x, c, v


def test_scores_weights_and_output_match_the_formula_by_loops(setup):
    layer, x, c, v = setup
    e_ref, a_ref, out_ref = reference(layer, x, c, v)
    out, a = layer(x, c, v, return_weights=True)
    assert torch.allclose(layer.scores(x, c), e_ref, atol=1e-12)  # float64 rounding
    assert torch.allclose(a, a_ref, atol=1e-12) and torch.allclose(out, out_ref, atol=1e-12)


def test_masked_keys_get_zero_weight_and_a_fully_masked_row_gives_zeros(setup):
    layer, x, c, v = setup
    mask = torch.rand(4, 6, generator=torch.Generator().manual_seed(1)) < 0.5
    mask[0] = True
    mask[2] = False  # query 2 may attend to nothing
    _, a_ref, out_ref = reference(layer, x, c, v, mask)
    out, a = layer(x, c, v, mask=mask, return_weights=True)
    assert torch.allclose(a, a_ref, atol=1e-12) and torch.allclose(out, out_ref, atol=1e-12)
    assert (a[~mask] == 0).all() and (out[2] == 0).all() and torch.isfinite(out).all()


def test_batched_inputs_and_causal_mask_broadcast():
    torch.manual_seed(1)
    layer = AdditiveAttention(8, 8, 16)
    x = torch.randn(3, 5, 8)
    out, a = layer(x, x, mask=causal_mask(5), return_weights=True)
    assert out.shape == (3, 5, 8) and a.shape == (3, 5, 5)
    assert (a.triu(1) == 0).all()
    assert torch.allclose(a.sum(-1), torch.ones(3, 5), atol=1e-6)
    for b in range(3):  # each batch element on its own gives the same
        assert torch.allclose(layer(x[b], x[b], mask=causal_mask(5)), out[b], atol=1e-6)


def test_scores_are_bounded_by_the_l1_norm_of_w():
    torch.manual_seed(2)
    layer = AdditiveAttention(32, 32, 32)
    with torch.no_grad():  # identity projections: the scores of q and k themselves
        layer.q_proj.weight.copy_(torch.eye(32))
        layer.k_proj.weight.copy_(torch.eye(32))
        layer.k_proj.bias.zero_()
        layer.w.copy_(torch.randn(32))
    q, k, w = 100 * torch.randn(4, 32), 100 * torch.randn(9, 32), layer.w.detach()
    s = layer.scores(q, k)
    assert s.abs().max() <= w.abs().sum() + 1e-4  # tanh in [-1, 1]; float32 sum
    # the bound is reached: every tanh saturated at the sign of w
    s_max = layer.scores(50 * w.sign()[None], 50 * w.sign()[None])
    assert torch.allclose(s_max, w.abs().sum().reshape(1, 1), rtol=1e-5)


def test_gradients_reach_both_projections_and_w(setup):
    layer, x, c, v = setup
    layer(x, c, v).sum().backward()
    for p in (layer.q_proj.weight, layer.k_proj.weight, layer.k_proj.bias, layer.w):
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_constant_scores_reduce_to_averaging_like_dot_product_attention():
    # w = 0 makes every score 0: uniform weights, the same as dot-product attention with q = 0
    layer = AdditiveAttention(4, 4, 4)
    with torch.no_grad():
        layer.w.zero_()
    x, c = torch.randn(3, 4), torch.randn(5, 4)
    expected = scaled_dot_product_attention(torch.zeros(3, 4), c, c)
    assert torch.allclose(layer(x, c), expected, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(d_query=0, d_key=4, d_attn=4), ValueError, "d_query must be a positive integer"),
        (dict(d_query=4, d_key=4.0, d_attn=4), TypeError, "d_key must be a positive integer"),
        (dict(d_query=4, d_key=4, d_attn=True), TypeError, "d_attn must be a positive integer"),
    ],
)
def test_bad_sizes_are_refused(kwargs, error, text):
    with pytest.raises(error, match=text):
        AdditiveAttention(**kwargs)


def test_bad_inputs_are_refused():
    layer = AdditiveAttention(4, 4, 4)
    x = torch.randn(3, 4)
    with pytest.raises(TypeError, match="boolean"):
        layer(x, x, mask=torch.ones(3, 3))
    with pytest.raises(ValueError, match="does not broadcast"):
        layer(x, x, mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(
        ValueError, match=r"value must have shape \(\.\.\., T_k=3, d_v\) with size 3"
    ):
        layer(x, x, value=torch.randn(5, 4))
    with pytest.raises(ValueError, match="context must have shape"):
        layer(x, torch.randn(3, 5))
    with pytest.raises(ValueError, match="leading dimensions of x .* must broadcast"):
        layer(torch.randn(2, 3, 4), torch.randn(3, 3, 4))
