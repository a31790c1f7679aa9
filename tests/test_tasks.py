"""Tests of the synthetic order-sensitive tasks in mini_transformer.data (chapter 3's lab).

Each generator is checked against a plain-Python reading of its definition (loops over
the returned tokens), not against its own vectorised code.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mini_transformer.data import (
    IGNORE_INDEX,
    SYNTHETIC_TASKS,
    copy_offset_task,
    order_task,
    reverse_task,
    sort_task,
)


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


def test_reverse_task_writes_the_input_backwards_after_a_separator():
    idx, targets = reverse_task(5, 12, vocab_size=9, generator=3)
    n, sep = 6, 8
    for b in range(5):
        x = idx[b, :n].tolist()
        assert sep not in x
        assert idx[b, n].item() == sep
        answer = list(reversed(x))
        assert targets[b, :n].tolist() == [IGNORE_INDEX] * n
        assert targets[b, n:].tolist() == answer
        assert idx[b, n + 1 :].tolist() == answer[:-1]  # teacher forcing: the answer so far


def test_sort_task_writes_the_input_sorted_after_a_separator():
    idx, targets = sort_task(5, 10, vocab_size=6, generator=4)
    n, sep = 5, 5
    for b in range(5):
        x = idx[b, :n].tolist()
        assert idx[b, n].item() == sep and sep not in x
        assert targets[b, n:].tolist() == sorted(x)
        assert idx[b, n + 1 :].tolist() == sorted(x)[:-1]
        assert targets[b, :n].tolist() == [IGNORE_INDEX] * n


def test_order_task_asks_which_marker_came_first():
    V = 8
    A, B, Q = V - 3, V - 2, V - 1
    idx, targets = order_task(300, 9, vocab_size=V, generator=5)
    first_is_a = 0
    for b in range(300):
        row = idx[b].tolist()
        assert row.count(A) == 1 and row.count(B) == 1 and row[-1] == Q and row.count(Q) == 1
        want = A if row.index(A) < row.index(B) else B
        assert targets[b, :-1].tolist() == [IGNORE_INDEX] * 8
        assert targets[b, -1].item() == want
        first_is_a += want == A
    # a fair coin over 300 rows: 150 +- 8.7 (one standard deviation)
    assert 110 < first_is_a < 190


def test_order_task_places_markers_anywhere_before_the_query():
    idx, _ = order_task(400, 6, vocab_size=5, generator=6)
    seen = set()
    for row in idx.tolist():
        seen.add(row.index(2))  # A = 5 - 3
        seen.add(row.index(3))  # B = 5 - 2
    assert seen == {0, 1, 2, 3, 4}


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
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 4"):
        order_task(2, 10, vocab_size=3)


def test_reverse_and_sort_need_an_even_length():
    for fn in (reverse_task, sort_task):
        with pytest.raises(ValueError, match="length must be an even integer >= 2"):
            fn(2, 7)


def test_order_task_needs_room_for_two_markers_and_a_query():
    with pytest.raises(ValueError, match=r"length must be an integer >= 3"):
        order_task(2, 2)


def test_generator_must_be_a_generator_or_a_seed():
    with pytest.raises(ValueError, match="generator must be a torch.Generator or a non-negative"):
        copy_offset_task(2, 10, generator=-1)
    with pytest.raises(TypeError, match="generator must be a torch.Generator or a non-negative"):
        copy_offset_task(2, 10, generator="0")
    with pytest.raises(TypeError, match="generator must be a torch.Generator or .*got True"):
        copy_offset_task(2, 10, generator=True)


def test_fractional_sizes_are_type_errors_never_truncated():
    with pytest.raises(TypeError, match="length must be .*got 10.0"):
        copy_offset_task(2, 10.0)
    with pytest.raises(TypeError, match="n_samples must be a positive integer, got 2.5"):
        order_task(2.5, 10)


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
