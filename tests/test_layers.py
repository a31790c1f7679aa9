"""Tests of mini_transformer.layers: LayerNorm, FeedForward, Transformer blocks and stacks.

References are independent of the implementation: PyTorch's own ``nn.LayerNorm`` and
``nn.TransformerEncoderLayer`` (with copied weights), and plain re-statements of the
placement equations written with the block's own sub-modules.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from mini_transformer.attention import MultiHeadAttention
from mini_transformer.layers import (
    FeedForward,
    LayerNorm,
    TransformerBlock,
    residual_paths,
)

D, H, DFF = 16, 4, 32


def block(
    norm_position="pre", causal=False, dropout=0.0, activation="gelu", cross=False, h=H, bias=True
):
    """A block of width D from its parts (as the model builds one)."""
    return TransformerBlock(
        MultiHeadAttention(D, h, dropout=dropout, bias=bias),
        FeedForward(D, DFF, dropout=dropout, activation=activation, bias=bias),
        cross_attn=MultiHeadAttention(D, h, dropout=dropout, bias=bias) if cross else None,
        norm_position=norm_position,
        causal=causal,
        dropout=dropout,
        bias=bias,
    )


def decoder(norm_position="pre", bias=True):
    """An encoder-decoder's decoder block: causal self-attention and cross-attention."""
    return block(norm_position, causal=True, cross=True, bias=bias)


def stack(n, norm_position, causal=True):
    """n blocks in sequence, then the final LayerNorm Pre-LN needs (as TransformerLM does)."""
    blocks = [block(norm_position, causal=causal) for _ in range(n)]
    ln_f = LayerNorm(D) if norm_position == "pre" else nn.Identity()
    return nn.Sequential(*blocks, ln_f)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ----------------------------------------------------------------------------- LayerNorm


@pytest.mark.parametrize("shape", [(5, 8), (2, 3, 16), (2, 3, 4, 7), (1, 1, 1)])
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_layernorm_matches_torch_values_and_gradients(shape, eps):
    d = shape[-1]
    ours, ref = LayerNorm(d, eps=eps).double(), nn.LayerNorm(d, eps=eps).double()
    with torch.no_grad():  # non-trivial gamma and beta
        g, b = torch.randn(d, dtype=torch.float64), torch.randn(d, dtype=torch.float64)
        ours.weight.copy_(g), ours.bias.copy_(b), ref.weight.copy_(g), ref.bias.copy_(b)
    x = (3.0 * torch.randn(*shape, dtype=torch.float64) + 2.0).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    y, y_ref = ours(x), ref(x_ref)
    torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)  # float64 rounding
    upstream = torch.randn_like(y)
    (y * upstream).sum().backward()
    (y_ref * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ours.weight.grad, ref.weight.grad, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ours.bias.grad, ref.bias.grad, rtol=1e-10, atol=1e-10)


def test_layernorm_matches_torch_in_float32():
    x = torch.randn(4, 10, 32) * 5 + 1
    torch.testing.assert_close(LayerNorm(32)(x), nn.LayerNorm(32)(x), rtol=1e-5, atol=1e-5)


def test_layernorm_initialises_like_torch_and_state_dicts_are_interchangeable():
    ours, ref = LayerNorm(12), nn.LayerNorm(12)
    assert torch.equal(ours.weight, ref.weight) and torch.equal(ours.bias, ref.bias)
    ref.load_state_dict(ours.state_dict())
    ours.load_state_dict(ref.state_dict())


def test_layernorm_output_has_zero_mean_unit_biased_variance_per_token():
    y = LayerNorm(64, eps=1e-12)(torch.randn(3, 5, 64) * 7 - 3).detach().double()
    zeros = torch.zeros(3, 5, dtype=torch.float64)
    torch.testing.assert_close(y.mean(-1), zeros, atol=1e-6, rtol=0)
    torch.testing.assert_close(
        y.var(-1, unbiased=False), torch.ones(3, 5, dtype=torch.float64), atol=1e-5, rtol=0
    )


def test_layernorm_of_constant_vector_is_beta_not_nan():
    ln = LayerNorm(4)
    with torch.no_grad():
        ln.bias.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    y = ln(torch.full((2, 4), 7.0))
    assert torch.equal(y, ln.bias.detach().expand(2, 4))


# ----------------------------------------------------------------------------- FFN


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_ffn_matches_the_two_linear_layers_formula(activation):
    ffn = FeedForward(D, DFF, activation=activation)
    x = torch.randn(2, 5, D)
    act = nn.GELU() if activation == "gelu" else nn.ReLU()
    expected = act(x @ ffn.linear1.weight.T + ffn.linear1.bias) @ ffn.linear2.weight.T
    torch.testing.assert_close(ffn(x), expected + ffn.linear2.bias)


def test_ffn_is_position_wise_permuting_positions_permutes_outputs():
    ffn = FeedForward(D, DFF)
    x = torch.randn(3, 9, D)
    perm = torch.randperm(9)
    torch.testing.assert_close(ffn(x[:, perm]), ffn(x)[:, perm], rtol=0, atol=1e-6)


def test_ffn_same_token_gives_same_output_wherever_it_stands():
    ffn = FeedForward(D, DFF)
    token = torch.randn(D)
    x = torch.randn(2, 6, D)
    x[0, 1] = token
    x[1, 4] = token
    y = ffn(x)
    torch.testing.assert_close(y[0, 1], y[1, 4], rtol=0, atol=0)
    torch.testing.assert_close(y[0, 1], ffn(token[None, None])[0, 0], rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- blocks


def _plain_pre(block, x):
    def attn(h):
        return block.attn(h, causal=block.causal)[0]

    x = x + attn(block.ln1(x))
    return x + block.ffn(block.ln2(x))


def _plain_post(block, x):
    def attn(h):
        return block.attn(h, causal=block.causal)[0]

    x = block.ln1(x + attn(x))
    return block.ln2(x + block.ffn(x))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_block_follows_its_placement_equations(norm_position, causal):
    blk = block(norm_position=norm_position, causal=causal)
    with torch.no_grad():  # make the LayerNorms' gamma/beta matter
        for ln in (blk.ln1, blk.ln2):
            ln.weight.normal_(1.0, 0.3), ln.bias.normal_(0.0, 0.3)
    x = torch.randn(2, 7, D)
    plain = _plain_pre if norm_position == "pre" else _plain_post
    torch.testing.assert_close(blk(x), plain(blk, x), rtol=0, atol=1e-6)


def test_pre_and_post_placements_differ_with_the_same_weights():
    pre = block(norm_position="pre")
    post = block(norm_position="post")
    post.load_state_dict(pre.state_dict())
    x = torch.randn(2, 5, D)
    assert not torch.allclose(pre(x), post(x), atol=1e-3)


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_block_matches_torch_transformer_encoder_layer(norm_position):
    ours = block(norm_position=norm_position, activation="relu").eval()
    ref = nn.TransformerEncoderLayer(
        D,
        H,
        DFF,
        dropout=0.0,
        activation="relu",
        batch_first=True,
        norm_first=norm_position == "pre",
    ).eval()
    a = ours.attn
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(
            torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
        )
        ref.self_attn.in_proj_bias.copy_(torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]))
        ref.self_attn.out_proj.load_state_dict(a.out_proj.state_dict())
        ref.linear1.load_state_dict(ours.ffn.linear1.state_dict())
        ref.linear2.load_state_dict(ours.ffn.linear2.state_dict())
        ref.norm1.load_state_dict(ours.ln1.state_dict())
        ref.norm2.load_state_dict(ours.ln2.state_dict())
    x = torch.randn(2, 6, D)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_block_and_stack_preserve_shape(norm_position):
    x = torch.randn(3, 11, D)
    assert block(norm_position=norm_position)(x).shape == x.shape
    assert stack(2, norm_position)(x).shape == x.shape


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_causal_block_sends_no_gradient_to_the_future(norm_position):
    two = stack(2, norm_position, causal=True)
    x = torch.randn(1, 8, D, requires_grad=True)
    t = 3
    w = torch.randn(D)  # not .sum(): a LayerNorm output's feature sum is constant
    (two(x)[0, t] @ w).backward()
    assert torch.all(x.grad[0, t + 1 :] == 0)
    assert x.grad[0, : t + 1].abs().sum() > 0


def test_non_causal_block_sends_gradient_to_the_future():
    blk = block(causal=False)
    x = torch.randn(1, 8, D, requires_grad=True)
    (blk(x)[0, 3] @ torch.randn(D)).backward()
    assert x.grad[0, 4:].abs().sum() > 0


def test_block_passes_mask_to_attention():
    blk = block()
    x = torch.randn(1, 5, D, requires_grad=True)
    mask = torch.tensor([True, True, True, False, False]).view(1, 1, 1, 5)  # keys 3, 4 hidden
    (blk(x, mask=mask)[0, 0] @ torch.randn(D)).backward()
    assert torch.all(x.grad[0, 3:] == 0)


def test_block_dropout_is_off_in_eval_mode_and_on_in_training():
    blk = block(dropout=0.5)
    x = torch.randn(2, 5, D)
    blk.eval()
    torch.testing.assert_close(blk(x), blk(x), rtol=0, atol=0)
    blk.train()
    assert not torch.allclose(blk(x), blk(x))


# ----------------------------------------------------------------------------- decoder


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_decoder_block_cross_attends_to_memory_of_another_length(norm_position):
    dec = decoder(norm_position=norm_position)
    x, memory = torch.randn(2, 5, D), torch.randn(2, 9, D, requires_grad=True)
    y = dec(x, memory=memory)
    assert y.shape == (2, 5, D)
    y.sum().backward()
    assert memory.grad.abs().sum() > 0  # the output depends on the memory


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_decoder_block_follows_its_placement_equations(norm_position):
    dec = decoder(norm_position=norm_position)
    x, m = torch.randn(2, 5, D), torch.randn(2, 3, D)

    def sa(h):
        return dec.attn(h, causal=True)[0]

    def ca(h):
        return dec.cross_attn(h, memory=m)[0]

    if norm_position == "pre":
        h = x + sa(dec.ln1(x))
        h = h + ca(dec.ln_cross(h))
        h = h + dec.ffn(dec.ln2(h))
    else:
        h = dec.ln1(x + sa(x))
        h = dec.ln_cross(h + ca(h))
        h = dec.ln2(h + dec.ffn(h))
    torch.testing.assert_close(dec(x, memory=m), h, rtol=0, atol=1e-6)


def test_decoder_self_attention_is_causal():
    dec = decoder()
    x = torch.randn(1, 6, D, requires_grad=True)
    (dec(x, memory=torch.randn(1, 4, D))[0, 2] @ torch.randn(D)).backward()
    assert torch.all(x.grad[0, 3:] == 0)


def test_decoder_memory_mask_hides_memory_positions():
    dec = decoder()
    memory = torch.randn(1, 4, D, requires_grad=True)
    memory_mask = torch.tensor([True, True, False, False]).view(1, 1, 1, 4)
    dec(torch.randn(1, 3, D), memory=memory, memory_mask=memory_mask).sum().backward()
    assert torch.all(memory.grad[0, 2:] == 0)


# ----------------------------------------------------------------------------- stack


def test_the_model_has_a_final_layernorm_only_for_pre_ln():
    from mini_transformer.model import TransformerConfig, TransformerLM

    def lm(norm_position):
        cfg = dict(vocab_size=7, block_size=4, d_model=D, n_heads=H, n_layers=3)
        return TransformerLM(TransformerConfig(**cfg, norm_position=norm_position))

    pre, post = lm("pre"), lm("post")
    assert isinstance(pre.ln_f, LayerNorm) and isinstance(post.ln_f, nn.Identity)
    assert len(pre.blocks) == len(post.blocks) == 3
    assert sum(isinstance(m, LayerNorm) for m in pre.modules()) == 2 * 3 + 1
    assert sum(isinstance(m, LayerNorm) for m in post.modules()) == 2 * 3


def test_residual_stack_unrolls_into_two_to_the_n_paths():
    for n in range(1, 7):
        paths = residual_paths(n)
        assert len(paths) == len(set(paths)) == 2**n
        by_length = [sum(len(p) == k for p in paths) for k in range(n + 1)]
        assert by_length == [math.comb(n, k) for k in range(n + 1)]
    # numerically: with linear blocks x -> x + A_i x, the output is the sum over paths
    n, d = 3, 5
    A = [torch.randn(d, d, dtype=torch.float64) * 0.3 for _ in range(n)]
    x = torch.randn(d, dtype=torch.float64)
    h = x
    for a in A:
        h = h + a @ h
    total = torch.zeros(d, dtype=torch.float64)
    for path in residual_paths(n):
        v = x
        for i in path:
            v = A[i - 1] @ v
        total = total + v
    torch.testing.assert_close(total, h, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- errors


def test_error_unknown_norm_position():
    msg = "norm_position must be one of 'pre', 'post', got 'middle'"
    with pytest.raises(ValueError, match=msg):
        block(norm_position="middle")


def test_error_unknown_activation():
    with pytest.raises(ValueError, match="activation must be one of 'gelu', 'relu', got 'tanh'"):
        FeedForward(D, DFF, activation="tanh")


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: LayerNorm(0), "d_model"),
        (lambda: FeedForward(D, -4), "d_ff"),
        (lambda: block(h=0), "n_heads"),
    ],
)
def test_error_non_positive_sizes(make, name):
    with pytest.raises(ValueError, match=f"{name} must be a positive integer"):
        make()


def test_error_fractional_size_is_a_type_error():
    with pytest.raises(TypeError, match="d_model must be a positive integer, got 2.5"):
        FeedForward(2.5, DFF)


@pytest.mark.parametrize("eps", [0.0, -1e-5, float("inf"), float("nan"), 1e-39])
def test_error_eps_must_be_finite_and_positive(eps):
    with pytest.raises(ValueError, match="eps must be a finite number >= 1.18e-38"):
        LayerNorm(D, eps=eps)


def test_layernorm_tiny_eps_is_refused_it_would_make_nan():
    """With eps below float32's smallest normal number a constant token gives NaN."""
    x = torch.ones(1, D)
    var = (x - x.mean()).pow(2).mean() + torch.tensor(1e-300, dtype=torch.float32)
    assert torch.isnan((x - x.mean()) * torch.rsqrt(var)).all()  # what eps=1e-300 would do
    with pytest.raises(ValueError, match="eps must be a finite number >= 1.18e-38, got 1e-300"):
        LayerNorm(D, eps=1e-300)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layernorm_half_precision_statistics_in_float32(dtype):
    """A feature 300 away from the mean: (x - mu)^2 = 9e4 overflows float16 (max 65504).

    Computed in float16 the variance is inf and the whole token becomes 0; torch.nn.LayerNorm
    (statistics in float32) is the reference.
    """
    x = torch.zeros(2, D, dtype=dtype)
    x[0, 0] = 300.0
    x[1] = torch.linspace(-2, 2, D, dtype=dtype)
    ln = LayerNorm(D).to(dtype)
    ref = torch.nn.LayerNorm(D).to(dtype)
    out = ln(x)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert out[0].abs().max() > 1  # not zeroed
    torch.testing.assert_close(out, ref(x))


def test_layernorm_rejects_integer_input():
    with pytest.raises(TypeError, match="x must be a floating-point tensor .*torch.int64"):
        LayerNorm(D)(torch.ones(2, D, dtype=torch.long))


def test_error_dropout_out_of_range():
    with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\)"):
        block(dropout=1.0)


@pytest.mark.parametrize(
    "module",
    [
        LayerNorm(D),
        FeedForward(D, DFF),
        block(),
    ],
    ids=["layernorm", "ffn", "block"],
)
def test_error_wrong_input_last_dimension(module):
    with pytest.raises(ValueError, match=f"x must have .*d_model={D}.*, got shape"):
        module(torch.randn(2, 3, D + 1))


def test_error_block_input_not_three_dimensional():
    with pytest.raises(ValueError, match=r"x must have 3 dimensions \(B, T, d_model=16\)"):
        block()(torch.randn(3, D))


def test_error_input_not_a_tensor():
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        LayerNorm(D)([[0.0] * D])


def test_error_decoder_memory_wrong_last_dimension():
    with pytest.raises(ValueError, match=r"memory must have shape \(B, T, d_model=16\)"):
        decoder()(torch.randn(1, 3, D), memory=torch.randn(1, 4, D - 1))


def test_error_decoder_memory_batch_mismatch():
    with pytest.raises(
        ValueError, match=r"memory must have shape \(B, T, d_model=16\) with size 2 in dimension 0"
    ):
        decoder()(torch.randn(2, 3, D), memory=torch.randn(1, 4, D))


def test_error_heads_must_divide_d_model():
    with pytest.raises(ValueError, match="d_model must be divisible by n_heads"):
        block(h=3)


def test_permutation_helper_covers_small_cases():
    # guard against itertools misuse in residual_paths: every subset appears exactly once
    n = 4
    subsets = {c for k in range(n + 1) for c in itertools.combinations(range(1, n + 1), k)}
    assert set(residual_paths(n)) == subsets


def test_memory_is_given_exactly_when_the_block_has_cross_attention():
    with pytest.raises(ValueError, match="memory must be given exactly when the block has"):
        decoder()(torch.randn(1, 3, D))
    with pytest.raises(ValueError, match="memory must be given exactly when the block has"):
        block()(torch.randn(1, 3, D), memory=torch.randn(1, 4, D))


def test_a_block_refuses_parts_of_another_width_or_kind():
    with pytest.raises(ValueError, match="ffn must have the attention's d_model=16, got 8"):
        TransformerBlock(MultiHeadAttention(D, H), FeedForward(8, DFF))
    with pytest.raises(TypeError, match="attn must be a MultiHeadAttention"):
        TransformerBlock(nn.Linear(D, D), FeedForward(D, DFF))


@pytest.mark.parametrize("make", [block, decoder], ids=["block", "decoder"])
def test_bias_false_leaves_no_bias_in_any_layer(make):
    blk = make(bias=False)
    assert not [n for n, _ in blk.named_parameters() if n.endswith("bias")]
    assert all(m.bias is None for m in blk.modules() if isinstance(m, torch.nn.Linear))
    assert all(
        torch.equal(m.bias, torch.zeros(D)) for m in blk.modules() if isinstance(m, LayerNorm)
    )


def test_attention_keeps_its_last_weights_when_asked():
    from mini_transformer.model import TransformerConfig, TransformerLM

    torch.manual_seed(0)
    lm = TransformerLM(
        TransformerConfig(vocab_size=11, block_size=8, d_model=16, n_heads=2, n_layers=2)
    ).eval()
    idx = torch.randint(11, (2, 6))
    with torch.no_grad():
        plain, _ = lm(idx)
        for block in lm.blocks:
            block.attn.keep_weights = True
        kept, _ = lm(idx)
    torch.testing.assert_close(kept, plain, rtol=0, atol=1e-5)  # scratch vs fused path
    maps = [block.attn.last_weights for block in lm.blocks]
    reference, x = [], lm.tok_emb(idx)  # rope: no input-side positions
    with torch.no_grad():
        for block in lm.blocks:  # recomputed block by block from the attention's parts
            _, w = block.attn(block.ln1(x), causal=True, return_weights=True)
            reference.append(w)
            x = block(x)
    assert all(torch.equal(a, b) for a, b in zip(lm.attention_weights(idx), maps, strict=True))
    for got, want in zip(maps, reference, strict=True):
        assert got.shape == (2, 2, 6, 6)
        torch.testing.assert_close(got, want)
        assert got.triu(1).abs().max() == 0  # causal
