"""Tests of the length-extrapolation lab (mini_transformer.lab), its sweep tool
(tools/extrapolation_lab.py) and its committed results."""

from __future__ import annotations

import json
import math
from pathlib import Path

import extrapolation_lab as tool
import pytest
import torch
from tiny_runs import TINY_LAB

from mini_transformer import lab
from mini_transformer.data import IGNORE_INDEX
from mini_transformer.hardware import where_it_ran
from mini_transformer.model import POSITIONAL_SCHEMES

COMMITTED = (
    Path(__file__).resolve().parents[1] / "mini_transformer" / "results" / "extrapolation.json"
)


def tiny_config(**overrides) -> lab.LabConfig:
    kwargs = dict(
        d_model=16,
        n_heads=2,
        n_layers=1,
        d_ff=32,
        train_length=8,
        steps=3,
        batch_size=4,
        eval_samples=4,
        warmup_steps=1,
        offset=2,
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


def test_the_lab_loss_is_cross_entropy_over_scored_positions_only():
    cfg = tiny_config()
    model = lab.make_model("none", cfg)
    idx, targets = cfg.batch(3, 8, torch.Generator().manual_seed(0))
    logits, _ = model(idx)
    scored = targets != IGNORE_INDEX
    logp = torch.log_softmax(logits, dim=-1)
    manual = -logp[scored].gather(-1, targets[scored][:, None]).mean()
    torch.testing.assert_close(model(idx, targets)[1], manual)  # what train_model minimises


def test_accuracy_counts_only_scored_positions():
    targets = torch.tensor([[IGNORE_INDEX, 1, 2, 0]])
    logits = torch.nn.functional.one_hot(torch.tensor([[0, 1, 0, 0]]), 3).float()
    assert lab._accuracy(logits, targets) == pytest.approx(2 / 3)  # positions 1 and 3 right
    assert lab._accuracy(logits, targets, start=2) == pytest.approx(1 / 2)
    assert math.isnan(lab._accuracy(logits, targets, start=4))


def test_cosine_similarity_matrix_matches_a_double_loop():
    w = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    S = lab.cosine_similarity_matrix(w)
    for i in range(5):
        for j in range(5):
            want = torch.dot(w[i], w[j]) / (w[i].norm() * w[j].norm())
            assert float(S[i, j]) == pytest.approx(float(want), abs=1e-6)
    with pytest.raises(ValueError, match=r"w must have 2 dimensions \(positions, d_model\)"):
        lab.cosine_similarity_matrix(torch.zeros(3))


@pytest.mark.parametrize("scheme", POSITIONAL_SCHEMES)
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
    ev = lab.accuracy_by_length(model, cfg)
    assert set(ev["accuracy"]) == {8, 12, 16}


def test_learned_position_weight_needs_a_learned_model():
    with pytest.raises(ValueError, match="model has no learned position embedding"):
        lab.learned_position_weight(lab.make_model("rope", tiny_config()))


def test_unknown_scheme_is_an_error():
    with pytest.raises(ValueError, match="scheme must be one of"):
        lab.make_model("relative", tiny_config())
    with pytest.raises(TypeError, match="scheme must be one of 'none', 'learned'.*got 3"):
        lab.make_model(3, tiny_config())


def test_unknown_task_is_an_error():
    with pytest.raises(ValueError, match="task must be one of"):
        lab.LabConfig(task="copy")


def test_min_train_length_must_not_exceed_train_length():
    msg = r"min_train_length must be an integer in \[4, 8\] \(.*longer than offset=3\), got 9"
    with pytest.raises(ValueError, match=msg):
        lab.LabConfig(train_length=8, min_train_length=9)


def test_every_length_must_hold_a_target_past_the_offset():
    with pytest.raises(ValueError, match=r"min_train_length must be an integer in \[6, 8\]"):
        lab.LabConfig(train_length=8, offset=5)  # the default min_train_length 4 is too short
    with pytest.raises(ValueError, match=r"eval_lengths must be an integer >= 4 .*got 3"):
        lab.LabConfig(train_length=8, eval_lengths=[8, 3])
    with pytest.raises(ValueError, match="the number of eval_lengths must be a positive integer"):
        lab.LabConfig(eval_lengths=[])


def test_scheme_lr_replaces_lr_for_the_schemes_named_only():
    cfg = tiny_config(lr=1e-3, scheme_lr={"alibi": 1e-2})
    assert cfg.lr_for("alibi") == 1e-2 and cfg.lr_for("rope") == 1e-3


def test_training_uses_the_scheme_learning_rate():
    """A scheme_lr entry for the trained scheme changes training exactly like changing lr."""
    base = tiny_config(lr=1e-3)
    via_lr = lab.train_model(lab.make_model("alibi", base), tiny_config(lr=1e-2))
    via_scheme = lab.train_model(
        lab.make_model("alibi", base), tiny_config(lr=1e-3, scheme_lr={"alibi": 1e-2})
    )
    other = lab.train_model(
        lab.make_model("alibi", base), tiny_config(lr=1e-3, scheme_lr={"rope": 1e-2})
    )
    plain = lab.train_model(lab.make_model("alibi", base), base)
    assert via_scheme == via_lr and other == plain and via_lr != plain


def test_scheme_lr_must_name_a_scheme():
    with pytest.raises(ValueError, match="scheme_lr keys must be one of 'none', 'learned'"):
        tiny_config(scheme_lr={"relative": 1e-3})


def test_scheme_lr_must_be_positive():
    with pytest.raises(
        ValueError, match=r"scheme_lr\['alibi'\] must be a finite number > 0, got 0.0"
    ):
        tiny_config(scheme_lr={"alibi": 0.0})


def test_loss_curve_averages_consecutive_windows_and_drops_a_partial_one():
    assert tool.loss_curve([1.0, 3.0, 2.0, 4.0, 9.0], every=2) == [2.0, 3.0]
    assert tool.loss_curve([1.0], every=2) == []


def check_schema(result: dict, schemes, seeds, lengths) -> None:
    for key in (
        "command",
        "config",
        "seeds",
        "steps",
        "schemes",
        "eval_lengths",
        "chance_accuracy",
        "results",
        "learned_embedding",
        "wall_time_s",
        "torch_version",
        "device",
    ):
        assert key in result, key
    assert result["seeds"] == list(seeds)
    assert result["schemes"] == list(schemes)
    assert result["eval_lengths"] == list(lengths)
    for scheme in schemes:
        r = result["results"][scheme]
        assert len(r["final_loss"]) == len(seeds) == len(r["train_seconds"])
        assert len(r["loss_curve"]) == len(seeds) and r["lr"] > 0
        every = result["config"]["curve_every"]
        assert all(len(c) == result["steps"] // every for c in r["loss_curve"])
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
    argv = [
        "--out",
        str(out),
        *TINY_LAB,
        "--seeds",
        "0",
        "1",
        "--schemes",
        "none",
        "learned",
    ]
    # the CLI uses the default model size; keep it small by shortening everything else
    result = tool.main(argv)
    assert "wrote" in capsys.readouterr().out
    on_disk = json.loads(out.read_text())
    assert on_disk == json.loads(json.dumps(result))
    assert on_disk["command"].startswith("python tools/extrapolation_lab.py --out")
    assert on_disk["where_it_ran"] == json.loads(json.dumps(where_it_ran("cpu")))
    check_schema(on_disk, ["none", "learned"], [0, 1], [6, 9, 12])


def test_eval_lengths_flag_sets_the_lengths_and_the_block_size(tmp_path, capsys):
    out = tmp_path / "lab.json"
    result = tool.main(
        [
            "--out",
            str(out),
            *TINY_LAB,
            "--schemes",
            "learned",
            "--eval-lengths",
            "6",
            "12",
            "24",
            "48",
        ]
    )
    capsys.readouterr()
    assert result["eval_lengths"] == [6, 12, 24, 48]
    assert result["config"]["block_size"] == 48
    assert result["learned_embedding"]["max_len"] == 48
    check_schema(result, ["learned"], [0], [6, 12, 24, 48])


def test_eval_lengths_flag_refuses_non_positive_lengths(capsys):
    with pytest.raises(SystemExit) as exc:
        tool.main(["--eval-lengths", "32", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--eval-lengths" in err and "positive integer" in err and "'0'" in err


def test_parts_run_on_disjoint_schemes_merge_into_one_result(tmp_path, capsys):
    common = TINY_LAB
    a, b, merged = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "ab.json"
    tool.main(["--out", str(a), "--schemes", "learned", *common])
    tool.main(["--out", str(b), "--schemes", "none", "alibi", "--scheme-lr", "alibi=0.01", *common])
    result = tool.main(["--merge", str(b), str(a), "--out", str(merged)])
    capsys.readouterr()
    check_schema(result, ["none", "learned", "alibi"], [0], [6, 9, 12])  # in SCHEMES order
    part_a, part_b = json.loads(a.read_text()), json.loads(b.read_text())
    assert result["results"]["learned"] == part_a["results"]["learned"]
    assert result["results"]["alibi"] == part_b["results"]["alibi"]
    assert result["results"]["alibi"]["lr"] == 0.01 and result["results"]["none"]["lr"] == 3e-3
    assert result["config"]["scheme_lr"] == {"alibi": 0.01}
    assert result["learned_embedding"] == part_a["learned_embedding"]
    assert result["commands"] == [part_b["command"], part_a["command"]]
    assert result["wall_time_s"] == max(part_a["wall_time_s"], part_b["wall_time_s"])
    assert json.loads(merged.read_text()) == json.loads(json.dumps(result))


def test_merge_can_attach_a_side_experiment_under_a_key(tmp_path, capsys):
    common = TINY_LAB
    a, side = tmp_path / "a.json", tmp_path / "side.json"
    tool.main(["--out", str(a), "--schemes", "rope", *common])
    tool.main(["--out", str(side), "--schemes", "rope", "--scheme-lr", "rope=0.01", *common])
    result = tool.main(["--merge", str(a), "--attach", f"lr_check={side}"])
    capsys.readouterr()
    assert result["lr_check"] == json.loads(side.read_text())
    assert result["lr_check"]["results"]["rope"]["lr"] == 0.01


def test_attach_needs_a_new_key(capsys):
    with pytest.raises(SystemExit) as exc:
        tool.main(["--merge", str(COMMITTED), "--attach", "results=x.json"])
    assert exc.value.code == 2
    assert "--attach expects KEY=JSON with a new KEY" in capsys.readouterr().err


def test_attach_needs_merge(capsys):
    with pytest.raises(SystemExit) as exc:
        tool.main(["--attach", "x=y.json", "--steps", "1"])
    assert exc.value.code == 2
    assert "--attach only works together with --merge" in capsys.readouterr().err


def test_merging_overlapping_schemes_is_an_error():
    part = {
        "config": {},
        "seeds": [0],
        "steps": 1,
        "eval_lengths": [1],
        "torch_version": "x",
        "schemes": ["none"],
        "results": {"none": {}},
        "command": "c",
        "learned_embedding": None,
        "wall_time_s": 1.0,
    }
    with pytest.raises(ValueError, match="parts must hold disjoint schemes"):
        tool.merge_results([part, dict(part)])


def test_merging_different_configurations_is_an_error():
    part = {
        "config": {},
        "seeds": [0],
        "steps": 1,
        "eval_lengths": [1],
        "torch_version": "x",
        "schemes": ["none"],
        "results": {"none": {}},
        "command": "c",
        "learned_embedding": None,
        "wall_time_s": 1.0,
    }
    other = dict(part, steps=2, schemes=["rope"])
    with pytest.raises(ValueError, match="cannot merge lab results that differ in 'steps'"):
        tool.merge_results([part, other])


def test_merging_nothing_is_an_error():
    with pytest.raises(ValueError, match="parts must hold at least one lab result"):
        tool.merge_results([])


@pytest.mark.skipif(
    not COMMITTED.exists(), reason="mini_transformer/results/extrapolation.json not generated yet"
)
def test_committed_results_follow_the_schema():
    result = json.loads(COMMITTED.read_text())
    check_schema(result, list(POSITIONAL_SCHEMES), result["seeds"], result["eval_lengths"])
    assert result["eval_lengths"] == [32, 48, 64, 128, 256]  # L .. 8L (chapter 3)
    assert result["config"]["block_size"] == 256  # learned table: a row per T
    assert len(result["seeds"]) >= 2


def test_the_lab_compares_every_scheme_of_the_model():
    assert tool.parser().parse_args(["--out", "x.json"]).schemes == list(POSITIONAL_SCHEMES)


def test_fixed_j_memn2n_is_the_package_encoding_at_t_equal_j_and_prefix_stable():
    from mini_transformer.memn2n import MemN2NPositionalEncoding

    x = torch.randn(2, 12, 8, generator=torch.Generator().manual_seed(0))
    fixed = tool.FixedJMemN2N(8, 12)
    torch.testing.assert_close(fixed(x), MemN2NPositionalEncoding(8)(x), rtol=0, atol=0)
    assert torch.equal(fixed(x[:, :5]), fixed(x)[:, :5])  # a prefix keeps its codes
    assert not torch.equal(MemN2NPositionalEncoding(8)(x[:, :5]), fixed(x)[:, :5])  # J = T does not
    with pytest.raises(ValueError, match="exceeds the fixed J = 12"):
        fixed(torch.zeros(1, 13, 8))


def test_memn2n_fixed_j_below_the_block_size_is_refused_before_training(capsys):
    with pytest.raises(SystemExit) as exc:
        tool.main(["--steps", "1", "--memn2n-fixed-j", "100", "--eval-lengths", "32", "256"])
    assert exc.value.code == 2 and "--memn2n-fixed-j must be at least" in capsys.readouterr().err
