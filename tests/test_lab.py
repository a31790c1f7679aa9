"""Tests of the length-extrapolation lab (mini_transformer.lab) and its committed results."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from mini_transformer import lab
from mini_transformer.data import IGNORE_INDEX

COMMITTED = Path(__file__).resolve().parents[1] / "book" / "data" / "extrapolation.json"


def tiny_config(**overrides) -> lab.LabConfig:
    kwargs = dict(
        d_model=16, n_heads=2, n_layers=1, d_ff=32, train_length=8, steps=3,
        batch_size=4, eval_samples=4, warmup_steps=1, offset=2,
    )
    kwargs.update(overrides)
    return lab.LabConfig(**kwargs)


def test_default_config_trains_at_L_and_evaluates_at_L_1_5L_2L():
    cfg = lab.LabConfig(train_length=32)
    assert cfg.eval_lengths == [32, 48, 64]
    assert cfg.min_train_length == 16
    assert cfg.block_size == 64  # the learned table has a row for every evaluated position


def test_training_runs_and_returns_one_finite_loss_per_step():
    cfg = tiny_config(steps=5)
    model = lab.make_model("rope", cfg, seed=0)
    losses = lab.train_model(model, cfg, seed=0)
    assert len(losses) == 5 and all(math.isfinite(v) for v in losses)
    assert not model.training


def test_training_is_reproducible_from_the_seed():
    cfg = tiny_config()
    a = lab.train_model(lab.make_model("alibi", cfg, 1), cfg, 1)
    b = lab.train_model(lab.make_model("alibi", cfg, 1), cfg, 1)
    assert a == b


def test_task_loss_is_cross_entropy_over_scored_positions_only():
    cfg = tiny_config()
    model = lab.make_model("none", cfg)
    idx, targets = cfg.batch(3, 8, torch.Generator().manual_seed(0))
    logits, _ = model(idx)
    scored = targets != IGNORE_INDEX
    logp = torch.log_softmax(logits, dim=-1)
    manual = -logp[scored].gather(-1, targets[scored][:, None]).mean()
    torch.testing.assert_close(lab.task_loss(model, idx, targets), manual)


def test_accuracy_counts_only_scored_positions():
    targets = torch.tensor([[IGNORE_INDEX, 1, 2, 0]])
    logits = torch.nn.functional.one_hot(torch.tensor([[0, 1, 0, 0]]), 3).float()
    assert lab.accuracy(logits, targets) == pytest.approx(2 / 3)  # positions 1 and 3 right
    assert lab.accuracy(logits, targets, from_position=2) == pytest.approx(1 / 2)
    assert math.isnan(lab.accuracy(logits, targets, from_position=4))


def test_cosine_similarity_matrix_matches_a_double_loop():
    w = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    S = lab.cosine_similarity_matrix(w)
    for i in range(5):
        for j in range(5):
            want = torch.dot(w[i], w[j]) / (w[i].norm() * w[j].norm())
            assert float(S[i, j]) == pytest.approx(float(want), abs=1e-6)


@pytest.mark.parametrize("scheme", lab.SCHEMES)
def test_lab_model_is_causal_for_every_scheme(scheme):
    """Changing the token at position t leaves the logits at positions < t unchanged.

    Tested on the lab's own configuration (2 layers, 4 heads, block_size 2L), at a length
    past L, where the schemes are evaluated.
    """
    cfg = lab.LabConfig()
    model = lab.make_model(scheme, cfg, seed=0).eval()
    T, t = 48, 30
    idx = torch.randint(0, cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    changed = idx.clone()
    changed[:, t] = (changed[:, t] + 1) % cfg.vocab_size
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(changed)
    torch.testing.assert_close(a[:, :t], b[:, :t], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, t:], b[:, t:])  # the change is visible from t on


def test_learned_scheme_evaluates_to_2L_but_untrained_rows_stay_at_init():
    cfg = tiny_config(steps=4)
    model = lab.make_model("learned", cfg)
    w0 = lab.learned_position_weight(model)
    lab.train_model(model, cfg)
    w1 = lab.learned_position_weight(model)
    L = cfg.train_length
    assert w1.shape[0] == 2 * L
    assert torch.equal(w1[L:], w0[L:])  # positions >= L never appear in training
    assert not torch.equal(w1[:L], w0[:L])
    ev = lab.evaluate(model, cfg)
    assert set(ev["accuracy"]) == {8, 12, 16}


def test_learned_position_weight_needs_a_learned_model():
    with pytest.raises(ValueError, match="model has no learned position embedding"):
        lab.learned_position_weight(lab.make_model("rope", tiny_config()))


def test_unknown_scheme_is_an_error():
    with pytest.raises(ValueError, match="scheme must be one of"):
        lab.make_model("relative", tiny_config())


def test_unknown_task_is_an_error():
    with pytest.raises(ValueError, match="task must be one of"):
        lab.LabConfig(task="copy")


def test_min_train_length_must_not_exceed_train_length():
    with pytest.raises(ValueError, match=r"min_train_length must be in \[1, train_length=8\]"):
        lab.LabConfig(train_length=8, min_train_length=9)


def check_schema(result: dict, schemes, seeds, lengths) -> None:
    for key in ("command", "config", "seeds", "steps", "schemes", "eval_lengths",
                "chance_accuracy", "results", "learned_embedding", "wall_time_s",
                "torch_version", "device"):
        assert key in result, key
    assert result["seeds"] == list(seeds)
    assert result["schemes"] == list(schemes)
    assert result["eval_lengths"] == list(lengths)
    for scheme in schemes:
        r = result["results"][scheme]
        assert len(r["final_loss"]) == len(seeds) == len(r["train_seconds"])
        for key in ("accuracy", "accuracy_beyond"):
            assert set(r[key]) == {str(T) for T in lengths}
            for T in lengths:
                entry = r[key][str(T)]
                assert len(entry["per_seed"]) == len(seeds)
                if key == "accuracy" or T > result["config"]["train_length"]:
                    assert 0.0 <= entry["mean"] <= 1.0
                    assert all(0.0 <= v <= 1.0 for v in entry["per_seed"])
                else:  # no position at or past L in a sequence of length <= L
                    assert entry["mean"] is None
    if "learned" in schemes:
        emb = result["learned_embedding"]
        n = emb["max_len"]
        S = torch.tensor(emb["cosine_similarity"])
        assert S.shape == (n, n)
        torch.testing.assert_close(S, S.T)
        torch.testing.assert_close(S.diagonal(), torch.ones(n), atol=1e-4, rtol=0)
        assert emb["untrained_rows_max_change"] == 0.0


def test_command_line_writes_the_json_schema(tmp_path, capsys):
    out = tmp_path / "lab.json"
    argv = ["--out", str(out), "--seeds", "0", "1", "--steps", "2", "--train-length", "6",
            "--eval-samples", "4", "--batch-size", "4", "--schemes", "none", "learned"]
    # the CLI uses the default model size; keep it small by shortening everything else
    result = lab.main(argv)
    assert "wrote" in capsys.readouterr().out
    on_disk = json.loads(out.read_text())
    assert on_disk == json.loads(json.dumps(result))
    assert on_disk["command"].startswith("python -m mini_transformer.lab --out")
    check_schema(on_disk, ["none", "learned"], [0, 1], [6, 9, 12])


@pytest.mark.skipif(not COMMITTED.exists(), reason="book/data/extrapolation.json not generated yet")
def test_committed_results_follow_the_schema():
    result = json.loads(COMMITTED.read_text())
    check_schema(result, list(lab.SCHEMES), result["seeds"], result["eval_lengths"])
    assert result["eval_lengths"] == [32, 48, 64]
    assert len(result["seeds"]) >= 2
