"""Issue 26.6: functions that took bad input silently, and two silent wrong results. Each
refusal is a ValueError/TypeError naming the argument and what is allowed."""

import pytest
import torch
import torch.nn.functional as F

from mini_transformer import core, hardware, scoring
from mini_transformer.attention import scaled_dot_product_attention
from mini_transformer.core import TrainConfig, get_preset
from mini_transformer.data import CharTokenizer
from mini_transformer.plotting import html_table


def _step_args():
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 2)

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x, y):
            out = self.m(x)
            return out, ((out - y) ** 2).mean()

    m = Wrapped()
    return m, torch.optim.SGD(m.parameters(), lr=0.1), torch.ones(1, 2), torch.zeros(1, 2)


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"lr": float("nan")}, ValueError, "lr must be a finite number >= 0, got nan"),
        ({"lr": -1.0}, ValueError, "lr must be a finite number >= 0"),
        ({"lr": 0.1, "grad_clip": -1.0}, ValueError, "grad_clip must be a finite number >= 0"),
        ({"lr": "0.1"}, TypeError, "lr must be a finite number >= 0"),
    ],
)
def test_train_step_refuses_a_bad_lr_or_grad_clip_before_touching_the_weights(
    kwargs, error, message
):
    model, opt, x, y = _step_args()
    before = [p.clone() for p in model.parameters()]
    lr = kwargs.pop("lr")
    with pytest.raises(error, match=message):
        core.train_step(model, opt, x, y, lr, **kwargs)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"steps": 0}, "steps must be a positive integer, got 0"),
        ({"lr": 0.0}, "lr must be a finite number > 0"),
        ({"seed": -1}, "seed must be a non-negative integer"),
    ],
)
def test_train_scores_refuses_bad_settings(kwargs, message):
    args = {"kind": "dot", "d_k": 4, "lr": 1e-2} | kwargs
    with pytest.raises(ValueError, match=message):
        scoring.train_scores(**args)


def test_train_config_checks_the_model_settings_where_they_enter():
    with pytest.raises(TypeError, match="d_model must be"):
        get_preset("tiny", d_model="x")
    with pytest.raises(TypeError, match="model must be a TransformerConfig, got .* dict"):
        TrainConfig(model={"d_model": 8})


def test_train_config_from_dict_refuses_unknown_keys():
    d = TrainConfig().to_dict() | {"learning_rate": 1.0}
    with pytest.raises(ValueError, match=r"unknown train_config keys \['learning_rate'\]"):
        TrainConfig.from_dict(d)
    assert TrainConfig.from_dict(TrainConfig().to_dict()) == TrainConfig()


def test_peak_flops_refuses_bad_values():  # precision: checked once, by TrainConfig
    with pytest.raises(ValueError, match="peak_flops must be a finite number > 0, got -5.0"):
        hardware.peak_flops(torch.device("cpu"), -5.0)
    assert hardware.peak_flops(torch.device("cpu"), 1e12) == (1e12, "given")


def test_html_table_escapes_cell_text_but_keeps_the_small_markup_chapters_use():
    html = html_table(["a<b", "x & y"], [["<script>alert(1)</script>", "0.68<br><small>1</small>"]])
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<th>a&lt;b</th>" in html and "x &amp; y" in html
    assert "<td>0.68<br><small>1</small></td>" in html


def test_a_stored_vocabulary_is_never_reordered():
    with pytest.raises(ValueError, match="distinct and sorted"):
        CharTokenizer.from_dict({"type": "char", "chars": "ba"})
    with pytest.raises(ValueError, match="distinct and sorted"):
        CharTokenizer.from_dict({"type": "char", "chars": "abb"})
    tok = CharTokenizer("hello")
    assert CharTokenizer.from_dict(tok.to_dict()).chars == tok.chars


def test_float16_attention_matches_torch_where_raw_scores_overflow_float16():
    q = torch.full((1, 4, 64), 60.0, dtype=torch.float16)  # q.k = 230400 > 65504; /8 fits
    v = torch.randn(1, 4, 64).half()
    ours = scaled_dot_product_attention(q, q, v)
    ref = F.scaled_dot_product_attention(q.float(), q.float(), v.float())
    assert ours.dtype == torch.float16 and torch.isfinite(ours).all()
    torch.testing.assert_close(ours.float(), ref, atol=1e-2, rtol=1e-2)


# ------------------------------------------- issue 36: the checks the package shrink dropped


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"d_model": 0}, ValueError, "d_model must be a positive integer, got 0"),
        ({"n_heads": 0}, ValueError, "n_heads must be a positive integer, got 0"),
        ({"n_heads": 3}, ValueError, "divisible by n_heads"),
        ({"n_layers": -1}, ValueError, "n_layers must be a positive integer, got -1"),
        ({"d_ff": 2.5}, TypeError, "d_ff must be a positive integer"),
        ({"vocab_size": 0}, ValueError, "vocab_size must be a positive integer, got 0"),
        ({"curve_every": 0}, ValueError, "curve_every must be a positive integer, got 0"),
    ],
)
def test_lab_config_checks_the_model_sizes_where_they_enter(kwargs, error, message):
    from mini_transformer.lab import LabConfig

    with pytest.raises(error, match=message):
        LabConfig(**kwargs)


def test_a_rope_config_with_an_odd_head_width_is_refused_by_the_config():
    from mini_transformer.model import TransformerConfig

    sizes = dict(vocab_size=10, block_size=8, d_model=6, n_heads=2)  # d_head = 3
    with pytest.raises(ValueError, match="d_head must be a positive even integer for a rotation"):
        TransformerConfig(**sizes, positional="rope")
    TransformerConfig(**sizes, positional="alibi")  # the other schemes take any width


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"seed": 2**64}, r"seed must be an integer in \[0, 18446744073709551615\]"),
        ({"threads": 10**9}, r"threads must be an integer in \[1, 1024\] or None"),
    ],
)
def test_train_config_refuses_a_seed_torch_cannot_take_and_absurd_threads(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)
    TrainConfig(seed=2**64 - 1)  # torch.manual_seed's largest


@pytest.mark.parametrize(
    "dtype,name", [(torch.int16, "idx"), (torch.uint8, "idx"), (torch.int32, "targets")]
)
def test_integer_ids_of_a_dtype_torch_refuses_name_the_argument(dtype, name):
    from mini_transformer.model import TransformerConfig, TransformerLM

    model = TransformerLM(TransformerConfig(vocab_size=10, block_size=8, d_model=8, n_heads=2))
    ids = {k: torch.zeros(2, 4, dtype=torch.long) for k in ("idx", "targets")}
    ids[name] = ids[name].to(dtype)
    with pytest.raises(ValueError, match=f"{name}.dtype must be one of torch.int64.*, got {dtype}"):
        model(ids["idx"], ids["targets"])
    model(ids["idx"].int(), ids["targets"].long())  # int32 ids index the embedding as they are


def test_a_lone_surrogate_is_a_character_outside_the_vocabulary():
    with pytest.raises(ValueError, match=r"character '\\udc80' \(U\+DC80\) at position 1 is not"):
        CharTokenizer.from_corpus().encode("a\udc80")
