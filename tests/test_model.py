"""Tests of mini_transformer.model: the decoder-only language model."""

import math

import pytest
import torch
import torch.nn.functional as F

from mini_transformer import layers
from mini_transformer.model import POSITIONAL_SCHEMES, TransformerConfig, TransformerLM

torch.set_num_threads(1)  # small tensors: one thread is faster and bit-stable

V = 20


def make(positional="rope", **kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=V, block_size=12, d_model=16, n_heads=2, n_layers=2)
    cfg.update(kw)
    return TransformerLM(TransformerConfig(positional=positional, **cfg)).eval()


# ------------------------------------------------------------------ config


def test_d_ff_defaults_to_four_times_d_model():
    assert TransformerConfig(vocab_size=5, block_size=4, d_model=24, n_heads=3).d_ff == 96


def test_config_survives_a_dict_round_trip():
    cfg = TransformerConfig(vocab_size=5, block_size=4, positional="alibi", bias=False)
    assert TransformerConfig.from_dict(cfg.to_dict()) == cfg


def test_config_rejects_unknown_fields():
    with pytest.raises(ValueError, match=r"unknown model_config keys \['n_embd'\]"):
        TransformerConfig.from_dict({"vocab_size": 5, "block_size": 4, "n_embd": 8})


def test_config_rejects_d_model_not_divisible_by_n_heads():
    with pytest.raises(ValueError, match="d_model must be divisible by n_heads"):
        TransformerConfig(vocab_size=5, block_size=4, d_model=10, n_heads=4)


def test_config_rejects_an_unknown_positional_scheme():
    with pytest.raises(ValueError, match="positional must be one of"):
        TransformerConfig(vocab_size=5, block_size=4, positional="relative")


def test_model_rejects_an_odd_head_dimension_for_rope():  # the config, with the model's words
    with pytest.raises(ValueError, match="d_head must be a positive even integer for a rotation"):
        TransformerConfig(vocab_size=5, block_size=4, d_model=6, n_heads=2, positional="rope")


def test_config_rejects_a_non_positive_vocab_size():
    with pytest.raises(ValueError, match="vocab_size must be a positive integer"):
        TransformerConfig(vocab_size=0, block_size=4)


def test_config_rejects_dropout_of_one():
    with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\)"):
        TransformerConfig(vocab_size=5, block_size=4, dropout=1.0)


def test_config_rejects_an_unknown_norm_position():
    with pytest.raises(ValueError, match="norm_position must be one of 'pre', 'post', got 'mid"):
        TransformerConfig(vocab_size=5, block_size=4, norm_position="middle")


# ------------------------------------------------------------------ forward


@pytest.mark.parametrize("norm_position", ["pre", "post"])
@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
def test_changing_a_future_token_leaves_earlier_logits_unchanged(positional, norm_position):
    model = make(positional, norm_position=norm_position)
    idx = torch.randint(V, (2, 12), generator=torch.Generator().manual_seed(1))
    changed = idx.clone()
    changed[:, 7] = (changed[:, 7] + 1) % V
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(changed)
    torch.testing.assert_close(a[:, :7], b[:, :7], rtol=0, atol=1e-6)  # float32 rounding only
    assert (a[:, 7:] - b[:, 7:]).abs().max() > 1e-3  # the change is seen from position 7 on


def test_loss_is_the_mean_cross_entropy_of_the_logits():
    model = make()
    idx = torch.randint(V, (3, 10))
    targets = torch.randint(V, (3, 10))
    logits, loss = model(idx, targets)
    assert logits.shape == (3, 10, V)
    expected = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    torch.testing.assert_close(loss, expected)
    assert model(idx)[1] is None


def test_untrained_loss_is_about_log_vocab_size():
    model = make(d_model=32, n_heads=4)
    idx = torch.randint(V, (4, 12))
    _, loss = model(idx, torch.roll(idx, -1, dims=1))
    assert abs(loss.item() - math.log(V)) < 0.1  # N(0, 0.02) weights: near-uniform logits


def test_fused_and_from_scratch_attention_give_the_same_logits():
    idx = torch.randint(V, (2, 12))
    for positional in ("rope", "alibi"):
        a, _ = make(positional, fused_attention=True)(idx)
        b, _ = make(positional, fused_attention=False)(idx)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("positional", ["none", "sinusoidal", "memn2n", "rope", "alibi"])
def test_extrapolating_schemes_accept_sequences_past_block_size(positional):
    logits, _ = make(positional)(torch.zeros(1, 30, dtype=torch.long))
    assert logits.shape == (1, 30, V) and torch.isfinite(logits).all()


def test_learned_positions_reject_sequences_past_block_size():
    with pytest.raises(ValueError, match="T=13 exceeds block_size=12"):
        make("learned")(torch.zeros(1, 13, dtype=torch.long))


def test_forward_rejects_float_token_ids():
    with pytest.raises(TypeError, match="idx must be an integer tensor"):
        make()(torch.zeros(1, 4))


def test_forward_rejects_a_one_dimensional_input():
    with pytest.raises(ValueError, match=r"idx must have 2 dimensions \(B, T\)"):
        make()(torch.zeros(4, dtype=torch.long))


def test_forward_rejects_an_empty_sequence():
    with pytest.raises(ValueError, match="must not be empty"):
        make()(torch.zeros(1, 0, dtype=torch.long))


def test_forward_rejects_token_ids_outside_the_vocabulary():
    with pytest.raises(ValueError, match=r"token id 20, outside 0..19"):
        make()(torch.tensor([[1, 20]]))


def test_forward_rejects_targets_of_another_shape():
    with pytest.raises(
        ValueError,
        match=r"targets must have shape \(B, T\) of token ids with size 4 in dimension 1",
    ):
        make()(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long))


# ------------------------------------------------------------------ structure


def test_tied_head_shares_the_embedding_matrix():
    tied, untied = make(tie_weights=True), make(tie_weights=False)
    assert tied.lm_head.weight is tied.tok_emb.weight
    assert untied.lm_head.weight is not untied.tok_emb.weight
    assert untied.num_parameters() - tied.num_parameters() == V * 16


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_parameter_components_add_up_to_the_total(positional):
    model = make(positional, tie_weights=False)
    parts = model.num_parameters(by_component=True)
    unique = {id(p): p.numel() for p in model.parameters()}
    assert parts["total"] == sum(unique.values()) == model.num_parameters()
    assert sum(v for k, v in parts.items() if k != "total") == parts["total"]
    assert parts["positional"] == (12 * 16 if positional == "learned" else 0)
    assert parts["head"] == V * 16 and parts["embeddings"] == V * 16
    d, L = 16, 2
    assert parts["attention"] == L * (4 * d * d + 4 * d)
    assert parts["ffn"] == L * (2 * d * 4 * d + 4 * d + d)
    assert parts["norms"] == (2 * L + 1) * 2 * d


def test_bias_false_leaves_only_weight_matrices_and_gains():
    model = make(bias=False)
    assert all(not name.endswith(".bias") for name, _ in model.named_parameters())
    model(torch.zeros(1, 3, dtype=torch.long))  # still runs


def test_gpt2_initialisation_scales_the_residual_projections():
    model = make(d_model=256, n_heads=4, n_layers=8)
    block = model.blocks[0]
    assert abs(block.attn.q_proj.weight.std().item() - 0.02) < 1e-3
    expected = 0.02 / math.sqrt(2 * 8)
    assert abs(block.attn.out_proj.weight.std().item() - expected) < 3e-4
    assert abs(block.ffn.linear2.weight.std().item() - expected) < 3e-4
    assert block.attn.q_proj.bias.abs().max() == 0


def test_flops_per_token_is_six_n_plus_the_attention_term():
    model = make("learned")
    n = model.num_parameters() - 12 * 16  # the position table is a lookup
    assert model.flops_per_token() == 6 * n + 12 * 2 * 16 * 12
    assert model.flops_per_token(T=100) == 6 * n + 12 * 2 * 16 * 100


# ------------------------------------------------------------------ generate


def test_generation_with_a_seeded_generator_is_reproducible():
    model = make("learned")
    prompt = torch.tensor([[1, 2, 3]])
    a = model.generate(prompt, 20, generator=torch.Generator().manual_seed(0))
    b = model.generate(prompt, 20, generator=torch.Generator().manual_seed(0))
    assert a.shape == (1, 23) and torch.equal(a, b)
    assert torch.equal(a[:, :3], prompt)  # the prompt is kept; 23 > block_size was cropped


def test_temperature_zero_and_top_k_one_are_greedy():
    model = make()
    prompt = torch.tensor([[4, 5]])
    greedy = model.generate(prompt, 5, temperature=0)
    top1 = model.generate(prompt, 5, top_k=1, generator=torch.Generator().manual_seed(3))
    assert torch.equal(greedy, top1)
    logits, _ = model(greedy[:, :2])
    assert greedy[0, 2] == logits[0, -1].argmax()


def test_generate_restores_training_mode():
    model = make().train()
    model.generate(torch.tensor([[1]]), 2)
    assert model.training


def test_generate_rejects_a_negative_temperature():
    with pytest.raises(ValueError, match="temperature must be a finite number >= 0"):
        make().generate(torch.tensor([[1]]), 2, temperature=-1.0)


def test_generate_rejects_top_k_larger_than_the_vocabulary():
    with pytest.raises(ValueError, match=r"top_k must be an integer in \[1, 20\] \(or None\)"):
        make().generate(torch.tensor([[1]]), 2, top_k=21)


@pytest.mark.parametrize("positional", ["rope", "alibi", "learned"])
def test_attention_weights_are_causal_distributions(positional):
    model = make(positional, norm_position="post" if positional == "learned" else "pre")
    maps = model.attention_weights(torch.randint(V, (2, 9)))
    assert len(maps) == 2 and maps[0].shape == (2, 2, 9, 9)
    for w in maps:
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 9))
        assert torch.all(w.triu(diagonal=1) == 0)


# --- bad input (issue 15) ---------------------------------------------------------------------


def test_config_wrong_types_are_type_errors():
    with pytest.raises(TypeError, match="d_model must be a positive integer, got '8'"):
        TransformerConfig(vocab_size=5, block_size=4, d_model="8")
    with pytest.raises(TypeError, match="bias must be True or False, got 1"):
        TransformerConfig(vocab_size=5, block_size=4, bias=1)
    with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\), got nan"):
        TransformerConfig(vocab_size=5, block_size=4, dropout=float("nan"))


def test_config_refuses_a_model_that_would_not_fit_in_memory():
    msg = r"the parameters \(from vocab_size, d_model, d_ff, n_layers\) .* would need .* TiB"
    with pytest.raises(ValueError, match=msg):
        TransformerConfig(vocab_size=10**9, block_size=8, d_model=4096, n_heads=4)


def test_generate_crops_a_prompt_longer_than_block_size():
    """The docstring says every scheme is cropped, a learned one too: a long prompt is fine."""
    torch.manual_seed(0)
    cfg = TransformerConfig(
        vocab_size=5, block_size=4, d_model=8, n_heads=2, n_layers=1, positional="learned"
    )
    model = TransformerLM(cfg)
    out = model.generate(torch.zeros(1, 6, dtype=torch.long), 3, temperature=0)
    assert out.shape == (1, 9) and torch.equal(out[:, :6], torch.zeros(1, 6, dtype=torch.long))


def test_generate_generator_must_be_a_generator():
    cfg = TransformerConfig(vocab_size=5, block_size=4, d_model=8, n_heads=2, n_layers=1)
    with pytest.raises(TypeError, match="generator must be a CPU torch.Generator, got 0"):
        TransformerLM(cfg).generate(torch.zeros(1, 2, dtype=torch.long), 1, generator=0)


def test_generate_with_a_tiny_temperature_is_greedy_not_nan():
    """logits / 1e-300 overflows to inf (softmax NaN); the limit T -> 0 is the greedy choice."""
    model = make()
    prompt = torch.tensor([[1, 2, 3]])
    greedy = model.generate(prompt, 4, temperature=0)
    tiny = model.generate(prompt, 4, temperature=1e-300, generator=torch.Generator().manual_seed(0))
    assert torch.equal(tiny, greedy)


# --------------------------------------------------------------------------- the scheme table
EXPECTED_MODULES = {  # written out by hand, not read from the model
    "none": (None, False, False, 1.0),
    "learned": ("LearnedPositionalEmbedding", False, False, 1.0),
    "sinusoidal": ("SinusoidalPositionalEncoding", False, False, 4.0),  # sqrt(d_model=16)
    "memn2n": ("MemN2NPositionalEncoding", False, False, 1.0),
    "rope": (None, True, False, 1.0),
    "alibi": (None, False, True, 1.0),
}


@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
def test_each_scheme_builds_exactly_its_own_modules(positional):
    model = make(positional)
    input_cls, rotary, alibi, scale = EXPECTED_MODULES[positional]
    assert (type(model.pos_emb).__name__ if model.pos_emb is not None else None) == input_cls
    attn = model.blocks[0].attn
    assert (attn.rotary is not None, attn.alibi is not None) == (rotary, alibi)
    assert all(b.attn.rotary is attn.rotary and b.attn.alibi is attn.alibi for b in model.blocks)
    assert model.embed_scale == scale


@pytest.mark.parametrize("block_size", [12, 4100])  # 4100: past the shortest sinusoidal table
@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
def test_declared_table_size_is_the_bytes_of_the_tables_the_model_builds(positional, block_size):
    # The checkpoint loader refuses a config whose tables would not fit in memory, from this
    # count, before building anything.
    from mini_transformer.checkpoints import _table_bytes

    model = make(positional, block_size=block_size)
    assert _table_bytes(model.config) == sum(b.nbytes for b in model.buffers())


@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
def test_only_learned_has_a_position_parameter(positional):
    # the checkpoint loader and the lab expect pos_emb.weight exactly when positional="learned"
    names = dict(make(positional).named_parameters())
    assert (positional == "learned") == ("pos_emb.weight" in names)


# ------------------------------------------------------------------ checks once, where they enter


def _check_calls(fn):
    """The calls into mini_transformer/checks.py from outside it made by ``fn()``, as (caller
    file, function); not the gate ``checks.entry`` puts before a forward and its
    ``checks.trusted`` scope (they check nothing themselves)."""
    import sys

    import mini_transformer.checks as checks

    calls = []

    def profile(frame, event, arg):
        caller = frame.f_back.f_code.co_filename
        gate = frame.f_code.co_name in ("checked", "trusted")
        if event == "call" and frame.f_code.co_filename == checks.__file__ != caller and not gate:
            calls.append((frame.f_back.f_code.co_filename, frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
def test_a_models_parts_do_not_recheck_the_hidden_state(positional):
    model, idx = make(positional), torch.zeros(2, 10, dtype=torch.long)
    calls = _check_calls(lambda: model(idx))
    parts = ("layers.py", "attention.py", "positional.py", "alibi.py", "memn2n.py")
    assert not [c for c in calls if c[0].endswith(parts)]
    if positional == "rope":  # the default: idx's tensor and dtype, its scores' size, its ids
        names = ["check_tensor", "check_choice", "check_size", "check_ids"]
        assert [name for _, name in calls] == names


def _standalone_bad_calls():
    from mini_transformer.alibi import ALiBi
    from mini_transformer.attention import MultiHeadAttention, RotaryEmbedding
    from mini_transformer.layers import FeedForward, LayerNorm
    from mini_transformer.memn2n import MemN2NPositionalEncoding
    from mini_transformer.positional import LearnedPositionalEmbedding as Learned
    from mini_transformer.positional import SinusoidalPositionalEncoding as Sinusoidal

    bad = torch.ones(2, 3, 5)  # d_model is 16
    return {
        "LayerNorm": (LayerNorm(16), (bad,), r"x must have shape \(\.\.\., d_model=16\)"),
        "FeedForward": (FeedForward(16, 64), (bad,), r"x must have shape \(\.\.\., d_model=16\)"),
        "MultiHeadAttention": (MultiHeadAttention(16, 2), (bad,), r"x must have shape \(B, T, d"),
        "RotaryEmbedding": (RotaryEmbedding(8), (bad,), r"x must have shape \(B, n_heads, T, d"),
        "ALiBi": (ALiBi(2, 8), (0,), "T_q must be a positive integer, got 0"),
        "Sinusoidal": (Sinusoidal(16), (bad,), r"x must have shape \(B, T, d_model\)"),
        "Learned": (Learned(8, 16), (bad,), r"x must have shape \(B, T, d_model\)"),
        "MemN2N": (MemN2NPositionalEncoding(16), (bad,), r"x must have shape \(B, T, d_model\)"),
    }


@pytest.mark.parametrize("name", sorted(_standalone_bad_calls()))
def test_standalone_modules_still_check_their_inputs(name):
    module, args, match = _standalone_bad_calls()[name]
    with pytest.raises(ValueError, match=match):
        module(*args)


def test_no_module_carries_a_check_switch():  # checks.entry decides, not a flag a parent flips
    model = make("alibi")
    switches = ("check_inputs", "check_token_ids")
    assert not [n for n, m in model.named_modules() for s in switches if hasattr(m, s)]


@pytest.mark.parametrize("positional", ["alibi", "learned", "memn2n", "rope", "sinusoidal"])
def test_a_part_checks_when_called_directly_and_not_inside_a_model_or_trusted(positional):
    from mini_transformer import checks

    model, idx = make(positional), torch.zeros(2, 10, dtype=torch.long)
    part = model.blocks[0].ln1
    x = torch.randn(2, 10, 16)
    assert _check_calls(lambda: part(x)) == [(layers.__file__, "check_tensor")]
    with checks.trusted():
        assert _check_calls(lambda: (part(x), model(idx))) == []
    assert [name for _, name in _check_calls(lambda: model(idx))][0] == "check_tensor"
