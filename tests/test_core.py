"""The training core: one schedule and one step for train, lab and stability."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from mini_transformer import lab
from mini_transformer import stability as S
from mini_transformer.core import Schedule, TrainConfig, configure_optimizer, train_step
from mini_transformer.model import POSITIONAL_SCHEMES, TransformerConfig, TransformerLM
from mini_transformer.train import _stop_at_step_boundary as stop_at_step_boundary

torch.set_num_threads(1)


# The schedules as they were written before they became one (the committed results were
# computed with these exact float operations; chapter 5's sweep was re-run with Schedule).
def old_train(step, lr, min_lr, w, S):
    if step < w:
        return lr * (step + 1) / w
    p = min(1.0, (step - w) / max(1, S - w))
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * p)) * (lr - min_lr)


def old_lab(step, lr, w, S):
    if step < w:
        return lr * (step + 1) / w
    p = (step - w) / max(1, S - w)
    return lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(p, 1.0))))


@pytest.mark.parametrize(
    "lr,min_lr,w,steps", [(1e-2, 1e-3, 5, 60), (3e-3, 3e-4, 50, 1000), (1e-3, 1e-4, 100, 5000)]
)
def test_the_schedule_reproduces_the_training_presets_bit_for_bit(lr, min_lr, w, steps):
    s = Schedule(lr=lr, warmup_steps=w, steps=steps, min_lr=min_lr)
    of_cfg = TrainConfig(lr=lr, min_lr=min_lr, warmup_steps=w, steps=steps).schedule()
    assert all(s(k) == old_train(k, lr, min_lr, w, steps) == of_cfg(k) for k in range(steps + 10))


@pytest.mark.parametrize("lr", [3e-3, 1e-2])  # the sweep's lr and its lr_check's
def test_the_lab_schedule_takes_the_float32_steps_of_its_committed_results(lr):
    """The lab trains with Schedule(lr, w, steps, lr / 10); results/extrapolation.json was made
    with old_lab's rounding. The float64 rates differ in the last bit at about a third of the
    10,000 steps, but AdamW (no weight decay) applies lr / (1 - beta1^t) as a float32 scalar to
    float32 weights, and that is the same at every step: the same training, bit for bit."""
    s, differ = Schedule(lr, 100, 10_000, min_lr=lr / 10), 0
    for k in range(10_000):
        new, old, bias_correction = s(k), old_lab(k, lr, 100, 10_000), 1 - 0.9 ** (k + 1)
        differ += new != old
        assert np.float32(new / bias_correction) == np.float32(old / bias_correction)
    assert differ > 3000  # so the float32 equality is what carries the claim


def test_the_lab_trains_with_the_schedule(monkeypatch):
    lrs = []

    def step(model, opt, x, y, lr, **kw):
        lrs.append(lr)
        return torch.zeros(()), None

    monkeypatch.setattr(lab, "train_step", step)
    cfg = lab.LabConfig(steps=30, warmup_steps=5, lr=1e-2, batch_size=2, eval_lengths=[32])
    lab.train_model(lab.make_model("none", cfg), cfg)
    assert lrs == [Schedule(1e-2, 5, 30, min_lr=1e-3)(k) for k in range(30)]


@pytest.mark.parametrize("step", [-1, 1.5, True])
def test_a_negative_or_fractional_step_is_an_error(step):
    with pytest.raises((TypeError, ValueError), match="step must be a non-negative integer"):
        Schedule(lr=1.0, warmup_steps=2, steps=10)(step)


def test_a_floor_above_the_peak_is_an_error():
    with pytest.raises(ValueError, match="min_lr must be a finite number"):
        Schedule(lr=1e-3, min_lr=1e-2)


def test_train_step_equals_the_steps_written_out():
    cfg = lab.LabConfig(steps=1, d_model=16, n_heads=2, n_layers=1, d_ff=32, train_length=8)
    a, b = lab.make_model("rope", cfg), lab.make_model("rope", cfg)
    idx, targets = cfg.batch(4, 8, torch.Generator().manual_seed(0))
    opt_a = torch.optim.AdamW(a.parameters(), lr=0.0)
    opt_b = torch.optim.AdamW(b.parameters(), lr=0.0)
    loss, norm = train_step(a, opt_a, idx, targets, 1e-2, grad_clip=0.5)
    for group in opt_b.param_groups:
        group["lr"] = 1e-2
    _, ref = b(idx, targets)
    ref.backward()
    ref_norm = torch.nn.utils.clip_grad_norm_(b.parameters(), 0.5)
    opt_b.step()
    assert torch.equal(loss, ref.detach()) and torch.equal(norm, ref_norm)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not loss.requires_grad


def test_lab_and_stability_models_follow_the_logits_loss_contract():
    cfg = S.StabilityConfig(n_layers=2)
    model = S.xiong_lm(cfg, "pre")
    idx, targets = S.copy_task_batch(cfg, torch.Generator().manual_seed(0))
    logits, loss = model(idx, targets)
    K = cfg.copy_len
    assert logits.shape == (cfg.batch_size, 2 * K, cfg.vocab_size + 1)
    assert torch.equal(targets[:, K:], idx[:, :K]) and (targets[:, :K] == -100).all()
    copy = logits[:, -K:].reshape(-1, cfg.vocab_size + 1)  # the copy alone, written out
    ref = torch.nn.functional.cross_entropy(copy, idx[:, :K].reshape(-1))
    assert torch.allclose(loss, ref, rtol=1e-6) and model(idx)[1] is None


def test_the_first_ctrl_c_only_sets_the_flag_and_the_second_stops():
    import signal

    before = signal.getsignal(signal.SIGINT)  # the default, or SIG_IGN in a background job
    with stop_at_step_boundary() as flag:
        signal.raise_signal(signal.SIGINT)
        assert flag.requested
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before  # restored


def old_configure_optimizer_groups(model):
    # configure_optimizer's groups as written before (the order indexes saved optimizer states)
    tables = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)] + [model.pos_emb]
    no_decay = {id(p) for m in tables if m is not None for p in m.parameters()}
    decay, other = [], []
    for m in model.modules():
        for name, p in m.named_parameters(recurse=False):
            if id(p) in no_decay or not p.requires_grad:
                continue
            (decay if isinstance(m, torch.nn.Linear) and name == "weight" else other).append(p)
    seen = {id(p) for p in decay + other}
    other += [p for p in model.parameters() if id(p) not in seen]
    return decay, other


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("scheme", POSITIONAL_SCHEMES)
def test_the_optimizer_groups_are_the_old_ones_in_parameter_order(scheme, tied):
    """Checkpoint version 3 dropped the legacy order (embeddings last); the groups are kept."""
    config = TransformerConfig(vocab_size=11, block_size=8, d_model=16, n_heads=2, n_layers=2)
    model = TransformerLM(replace(config, positional=scheme, tie_weights=tied))
    groups = configure_optimizer(model, TrainConfig(weight_decay=0.1)).param_groups
    order = [id(p) for p in model.parameters()]
    for group, old in zip(groups, old_configure_optimizer_groups(model), strict=True):
        ids = [id(p) for p in group["params"]]
        assert set(ids) == {id(p) for p in old} and ids == sorted(ids, key=order.index)
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]


def test_train_step_called_directly_checks_its_lr_and_the_model_its_batch():
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=10, block_size=8, d_model=16, n_heads=2, n_layers=1)
    model = TransformerLM(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.full((2, 4), 12)
    with pytest.raises(ValueError, match=r"idx contains token id 12, outside 0\.\.9"):
        train_step(model, opt, x, x, 0.1)
    with pytest.raises(ValueError, match="lr must be a finite number >= 0, got nan"):
        train_step(model, opt, x % 10, x % 10, float("nan"))
