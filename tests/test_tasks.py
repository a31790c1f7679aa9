"""Tests of the synthetic task in mini_transformer.data (chapter 3's lab).

The task is checked against a plain-Python reading of its definition (loops over the returned
tokens), not against its own vectorised code.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mini_transformer.data import IGNORE_INDEX, SYNTHETIC_TASKS, copy_offset_task


def test_ignore_index_is_cross_entropys_default():
    logits = torch.randn(4, 3)
    targets = torch.tensor([0, IGNORE_INDEX, 2, IGNORE_INDEX])
    assert IGNORE_INDEX == -100
    expected = F.cross_entropy(logits[[0, 2]], targets[[0, 2]])
    torch.testing.assert_close(F.cross_entropy(logits, targets), expected)


@pytest.mark.parametrize("name", sorted(SYNTHETIC_TASKS))
def test_every_task_returns_long_tensors_of_the_requested_shape(name):
    idx, targets = SYNTHETIC_TASKS[name](5, 12, vocab_size=10, generator=0)
    assert idx.shape == targets.shape == (5, 12)
    assert idx.dtype == targets.dtype == torch.long
    assert 0 <= int(idx.min()) and int(idx.max()) < 10
    scored = targets[targets != IGNORE_INDEX]
    assert scored.numel() > 0
    assert 0 <= int(scored.min()) and int(scored.max()) < 10


@pytest.mark.parametrize("name", sorted(SYNTHETIC_TASKS))
def test_every_task_is_reproducible_from_a_seed_or_a_generator(name):
    fn = SYNTHETIC_TASKS[name]
    a = fn(4, 10, generator=7)
    b = fn(4, 10, generator=7)
    c = fn(4, 10, generator=torch.Generator().manual_seed(7))
    d = fn(4, 10, generator=8)
    for x, y in ((a, b), (a, c)):
        assert torch.equal(x[0], y[0]) and torch.equal(x[1], y[1])
    assert not torch.equal(a[0], d[0])
    assert torch.equal(fn(4, 10)[0], fn(4, 10, generator=0)[0])  # None means seed 0


def test_copy_offset_targets_are_the_tokens_offset_steps_back():
    idx, targets = copy_offset_task(6, 20, vocab_size=7, offset=3, generator=1)
    for b in range(6):
        for t in range(20):
            want = idx[b, t - 3].item() if t >= 3 else IGNORE_INDEX
            assert targets[b, t].item() == want


def test_copy_offset_tokens_are_roughly_uniform():
    idx, _ = copy_offset_task(200, 50, vocab_size=5, offset=1, generator=2)
    freq = torch.bincount(idx.flatten(), minlength=5).double() / idx.numel()
    # 10,000 draws: the standard error of a frequency of 0.2 is 0.004
    assert torch.allclose(freq, torch.full((5,), 0.2, dtype=torch.double), atol=0.02)


def test_a_longer_sequence_is_the_same_task():
    """The rule does not depend on the length: this is what lets the lab test at 2L."""
    for T in (8, 16, 64):
        idx, targets = copy_offset_task(2, T, offset=2, generator=T)
        assert torch.equal(targets[:, 2:], idx[:, :-2])


def test_targets_work_with_cross_entropy_directly():
    idx, targets = copy_offset_task(3, 10, vocab_size=16, offset=2, generator=0)
    logits = torch.randn(3, 10, 16, generator=torch.Generator().manual_seed(0))
    loss = F.cross_entropy(logits.reshape(-1, 16), targets.reshape(-1))
    manual = -torch.log_softmax(logits[:, 2:], dim=-1).gather(-1, idx[:, :-2, None]).mean()
    torch.testing.assert_close(loss, manual)


# --------------------------------------------------------------------------- errors


def test_n_samples_must_be_positive():
    with pytest.raises(ValueError, match="n_samples must be a positive integer, got 0"):
        copy_offset_task(0, 10)


def test_copy_offset_length_must_exceed_offset():
    msg = r"length must be an integer >= 5 \(greater than offset=4\), got 4"
    with pytest.raises(ValueError, match=msg):
        copy_offset_task(2, 4, offset=4)


def test_copy_offset_offset_must_be_positive():
    with pytest.raises(ValueError, match="offset must be a positive integer, got 0"):
        copy_offset_task(2, 10, offset=0)


def test_vocab_size_must_leave_room_for_the_tokens():
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 2"):
        copy_offset_task(2, 10, vocab_size=1)


def test_generator_must_be_a_generator_or_a_seed():
    what = "generator must be a non-negative integer seed or a torch.Generator, got"
    with pytest.raises(ValueError, match=f"{what} -1"):
        copy_offset_task(2, 10, generator=-1)
    with pytest.raises(TypeError, match=f"{what} '0'"):
        copy_offset_task(2, 10, generator="0")
    with pytest.raises(TypeError, match=f"{what} True"):
        copy_offset_task(2, 10, generator=True)


def test_fractional_sizes_are_type_errors_never_truncated():
    with pytest.raises(TypeError, match="length must be .*got 10.0"):
        copy_offset_task(2, 10.0)
    with pytest.raises(TypeError, match="n_samples must be a positive integer, got 2.5"):
        copy_offset_task(2.5, 10)


def test_transformer_lm_loss_accepts_the_tasks_targets_directly():
    from mini_transformer.model import TransformerConfig, TransformerLM

    torch.manual_seed(0)
    model = TransformerLM(
        TransformerConfig(vocab_size=16, block_size=12, d_model=16, n_heads=2, n_layers=1)
    )
    idx, targets = copy_offset_task(3, 12, vocab_size=16, offset=2, generator=0)
    logits, loss = model(idx, targets)
    expected = F.cross_entropy(logits.reshape(-1, 16), targets.reshape(-1))
    torch.testing.assert_close(loss, expected)


def test_transformer_lm_rejects_targets_that_are_all_ignored():
    from mini_transformer.model import TransformerConfig, TransformerLM

    model = TransformerLM(
        TransformerConfig(vocab_size=16, block_size=12, d_model=16, n_heads=2, n_layers=1)
    )
    idx = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="every entry of targets is -100"):
        model(idx, torch.full((1, 4), -100))
