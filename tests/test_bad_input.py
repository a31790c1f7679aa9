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
