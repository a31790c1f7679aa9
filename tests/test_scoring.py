"""Tests of mini_transformer.scoring (chapter 4's comparison of score functions)."""

from __future__ import annotations

import math

import pytest
import torch

from mini_transformer.scoring import ScoreModel, retrieval_batch, train_scores

torch.set_num_threads(1)


def test_retrieval_batch_target_is_the_label_of_the_key_the_query_copies():
    q, x, v, t = retrieval_batch(torch.Generator().manual_seed(0), batch_size=8, T=5, d_in=6, C=4)
    assert (
        q.shape == (8, 1, 6) and x.shape == (8, 5, 6) and v.shape == (8, 5, 4) and t.shape == (8,)
    )
    nearest = (x - q).norm(dim=-1).argmin(-1)  # the copied key is the closest (noise 0.5 vs ~3.5)
    assert torch.equal(v[torch.arange(8), nearest].argmax(-1), t)


def test_scaled_scores_are_the_unscaled_ones_divided_by_sqrt_d_k():
    torch.manual_seed(0)
    unscaled = ScoreModel("unscaled", 16)
    scaled = ScoreModel("scaled", 16)
    scaled.load_state_dict(unscaled.state_dict())
    q, x, _, _ = retrieval_batch(torch.Generator().manual_seed(1))
    by_hand = (unscaled.q_proj(q) @ unscaled.k_proj(x).transpose(1, 2)) / math.sqrt(16)
    assert torch.allclose(scaled(q, x), by_hand, atol=1e-6)
    assert torch.allclose(unscaled(q, x), by_hand * 4, atol=1e-5)


def test_additive_scores_use_the_attention_module():
    torch.manual_seed(0)
    m = ScoreModel("additive", 8)
    q, x, _, _ = retrieval_batch(torch.Generator().manual_seed(2), batch_size=2, T=3)
    a = m.additive
    e = a.w @ torch.tanh(a.q_proj.weight @ q[1, 0] + a.k_proj.weight @ x[1, 2] + a.k_proj.bias)
    assert torch.isclose(m(q, x)[1, 0, 2], e, atol=1e-6)


def test_training_beats_chance_and_reports_its_settings():
    r = train_scores("scaled", 16, lr=1e-2, seed=0, steps=60)
    assert r["kind"] == "scaled" and r["d_k"] == 16 and r["steps"] == 60
    assert r["accuracy"] > 0.5  # chance is about 1/16 + the share of keys sharing the label


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="kind must be one of 'additive', 'unscaled', 'scaled'"):
        ScoreModel("cosine", 8)
    with pytest.raises(TypeError, match="kind must be one of 'additive'.*got 3"):
        ScoreModel(3, 8)


@pytest.mark.parametrize("kind", ["scaled", "additive"])
def test_a_width_of_the_wrong_type_is_named_before_torch_sees_it(kind):
    with pytest.raises(TypeError, match="d_k must be a positive integer, got '8'"):
        train_scores(kind, "8", 1e-3)
    with pytest.raises(ValueError, match="d_k must be a positive integer, got 0"):
        ScoreModel(kind, 0)
    with pytest.raises(TypeError, match="d_in must be a positive integer, got 2.5"):
        ScoreModel(kind, 8, d_in=2.5)
