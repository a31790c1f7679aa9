"""Training faults, tried as a user meets them: nothing lost, nothing poisoned.

Each test reproduces a failure of the loop and checkpoints as they were before the
training core was split out (issue 14), and passes only if it is fixed:

- an absurd learning rate saved exploded weights as "the last good checkpoint";
- Ctrl-C landing inside a step saved a half-done step, and resume was not bit-identical;
- a crash right after the best evaluation left ``last.pt`` with a stale best loss, so a
  resumed run could overwrite ``best.pt`` with a worse model;
- single flipped bits loaded as silently different weights;
- a file declaring a huge config made the loader try to allocate it.
"""

import math
import re
import signal

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from mini_transformer import train as T
from mini_transformer.checkpoints import checksum
from mini_transformer.model import TransformerConfig, TransformerLM

torch.set_num_threads(1)


def tiny(**overrides):
    base = dict(threads=1, progress=False, peak_flops=1e11, device="cpu")
    return T.get_preset("tiny", **(base | overrides))


def _finite(ckpt: dict) -> bool:
    return all(torch.isfinite(v).all() for v in ckpt["model"].values() if v.is_floating_point())


# ------------------------------------------------------------------ divergence


def test_an_absurd_learning_rate_never_saves_exploded_weights(tmp_path):
    cfg = tiny(lr=100.0, min_lr=1e-3, warmup_steps=1, steps=8, eval_interval=1)
    with pytest.raises(T.TrainingDivergedError) as err:
        T.train(cfg, tmp_path)
    named = re.search(r"last good checkpoint is (\S+) \(step (\d+)\)", str(err.value))
    assert named, str(err.value)
    good = T.load_checkpoint(named.group(1))
    assert good["step"] == int(named.group(2))
    # really good: finite weights, a held-out loss no worse than a uniform guess (ln 84)
    assert _finite(good) and good["val_loss"] < math.log(84) + 0.1
    for path in tmp_path.glob("*.pt"):  # no file in the run holds exploded weights
        ckpt = T.load_checkpoint(path)
        assert _finite(ckpt) and ckpt["val_loss"] < math.log(84) + 0.1, path.name
    assert T.read_log(tmp_path / "metrics.jsonl")[-1]["reason"] == "diverged"


def test_a_nan_loss_stops_the_run_and_names_the_last_good_checkpoint(tmp_path):
    def poison(model):
        calls = {"n": 0}

        def hook(module, args, output):
            if model.training:
                calls["n"] += 1
                if calls["n"] > 5:  # training step 5 onwards
                    return output * float("nan")
            return None

        model.lm_head.register_forward_hook(hook)

    match = r"loss became nan at step 5 .*last\.pt \(step 4\)"
    with pytest.raises(T.TrainingDivergedError, match=match):
        T.train(tiny(steps=10, eval_interval=2), tmp_path, setup_hook=poison)
    ckpt = T.load_checkpoint(tmp_path / "last.pt")
    assert ckpt["step"] == 4 and _finite(ckpt)


# ------------------------------------------------------------------ Ctrl-C


def _sigint_during(where: str, step: int):
    """A setup hook that sends SIGINT to this process during training step ``step``."""
    handles = []

    def hook(model):
        calls = {"n": 0}

        def fire():
            calls["n"] += 1
            if calls["n"] == step + 1:
                signal.raise_signal(signal.SIGINT)

        if where == "forward":  # after dropout drew its masks
            model.lm_head.register_forward_hook(lambda m, a, o: fire() if m.training else None)
        elif where == "backward":
            model.tok_emb.weight.register_hook(lambda g: fire())
        else:  # right after the optimizer updated the weights, before the step is counted
            handles.append(register_optimizer_step_post_hook(lambda opt, args, kwargs: fire()))

    return hook, handles


@pytest.mark.parametrize("where", ["forward", "backward", "after_update"])
def test_ctrl_c_anywhere_in_a_step_resumes_bit_identically(tmp_path, where):
    cfg = tiny(steps=8, eval_interval=4, dropout=0.1)  # dropout: the RNG must line up too
    straight = T.train(cfg, tmp_path / "a")
    hook, handles = _sigint_during(where, step=5)
    try:
        with pytest.raises(KeyboardInterrupt):
            T.train(cfg, tmp_path / "b", setup_hook=hook)
    finally:
        for h in handles:
            h.remove()
    saved = T.load_checkpoint(tmp_path / "b" / "last.pt")
    assert saved["step"] == 6  # the step under way was finished, then saved
    resumed = T.train(cfg, tmp_path / "b", resume=True)
    assert resumed["losses"] == straight["losses"][6:]
    a = T.load_checkpoint(tmp_path / "a" / "last.pt")["model"]
    b = T.load_checkpoint(tmp_path / "b" / "last.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


# ------------------------------------------------------------------ best.pt across a crash


def test_best_never_regresses_across_a_crash_and_resume(tmp_path):
    cfg = tiny(steps=12, eval_interval=2)

    def crash_after_eval(step):  # like kill -9 right after the evaluation at ``step``
        def hook(model):
            calls = {"n": 0}

            def pre(module, args):
                if module.training:
                    if calls["n"] == step:
                        raise RuntimeError("killed")
                    calls["n"] += 1

            model.register_forward_pre_hook(pre)

        return hook

    with pytest.raises(RuntimeError, match="killed"):
        T.train(cfg, tmp_path, setup_hook=crash_after_eval(6))
    evals = [r for r in T.read_log(tmp_path / "metrics.jsonl") if r["event"] == "eval"]
    true_best = min(r["val_loss"] for r in evals)
    last, best = T.load_checkpoint(tmp_path / "last.pt"), T.load_checkpoint(tmp_path / "best.pt")
    assert last["best_val_loss"] == true_best == best["val_loss"]

    T.train(cfg, tmp_path, resume=True)
    evals = [r for r in T.read_log(tmp_path / "metrics.jsonl") if r["event"] == "eval"]
    true_best = min(r["val_loss"] for r in evals)
    best = T.load_checkpoint(tmp_path / "best.pt")
    assert best["val_loss"] == true_best == T.load_checkpoint(tmp_path / "last.pt")["best_val_loss"]


# ------------------------------------------------------------------ corruption and size


def _small_model():
    torch.manual_seed(0)
    return TransformerLM(
        TransformerConfig(vocab_size=84, block_size=8, d_model=16, n_heads=2, n_layers=1)
    )


def test_a_flipped_bit_is_an_error_never_silently_different_weights(tmp_path):
    model = _small_model()
    path = T.save_checkpoint(tmp_path / "c.pt", model, step=3, best_val_loss=2.5)
    data = bytearray(path.read_bytes())
    original = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.Generator().manual_seed(0)
    silent = 0
    for bit in torch.randint(len(data) * 8, (150,), generator=rng).tolist():
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(flipped)
        try:
            ckpt = T.load_checkpoint(path)
        except ValueError:
            continue  # detected: the message says corrupt
        same = (
            ckpt["step"] == 3
            and ckpt["best_val_loss"] == 2.5
            and all(torch.equal(ckpt["model"][k], original[k]) for k in original)
        )
        silent += not same
    assert silent == 0


def test_a_checksum_mismatch_says_corrupt(tmp_path):
    path = T.save_checkpoint(tmp_path / "c.pt", _small_model())
    raw = torch.load(path, weights_only=True)
    raw["model"]["tok_emb.weight"][0, 0] += 1.0  # edited after it was written
    torch.save(raw, path)
    with pytest.raises(ValueError, match="corrupt: its contents do not match the checksum"):
        T.load_checkpoint(path)


def test_a_checkpoint_declaring_a_huge_config_is_refused_before_allocation(tmp_path):
    path = T.save_checkpoint(tmp_path / "c.pt", _small_model())
    raw = torch.load(path, weights_only=True)
    raw["model_config"] |= {"positional": "alibi", "block_size": 10**6}  # 16 TB of ALiBi table
    raw["checksum"] = checksum(raw)  # a consistent file: the checksum does not stop it
    torch.save(raw, path)
    with pytest.raises(ValueError, match=r"needs \d+\.\d GiB of tables"):
        T.load_model(path)
    raw["model_config"] |= {"positional": "rope", "block_size": 8, "d_model": 4096}
    raw["checksum"] = checksum(raw)
    torch.save(raw, path)
    with pytest.raises(ValueError, match="tok_emb.weight should have shape"):
        T.load_model(path)


def test_a_pickle_with_code_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("code ran",))

    torch.save({"format": "mini_transformer.checkpoint", "x": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(ValueError, match="corrupt or not a torch checkpoint"):
        T.load_checkpoint(tmp_path / "evil.pt")


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = T.save_checkpoint(tmp_path / "c.pt", _small_model(), step=1)

    def full_disk(obj, f, *args, **kwargs):
        f.write(b"partial")  # what torch reports when the disk fills up:
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError, match="could not write .*file write failed"):
        T.save_checkpoint(path, _small_model(), step=2)
    monkeypatch.undo()
    assert T.load_checkpoint(path)["step"] == 1 and not (tmp_path / "c.pt.tmp").exists()


def test_the_committed_models_load_unchanged():
    for which in ("cpu", "gpu"):
        model, tok = T.load_pretrained(which)
        assert tok.vocab_size == model.config.vocab_size == 84


def test_a_flipped_bit_in_a_committed_model_is_detected(tmp_path, monkeypatch):
    from mini_transformer import checkpoints

    copy = tmp_path / "shakespeare_char.pt"
    data = bytearray(checkpoints.PRETRAINED["cpu"].read_bytes())
    data[len(data) // 2] ^= 0x10  # inside the weights
    copy.write_bytes(data)
    monkeypatch.setitem(checkpoints.PRETRAINED, "cpu", copy)
    with pytest.raises(ValueError, match="corrupt: the committed 'cpu' model's file"):
        T.load_pretrained("cpu")


# ------------------------------------------------------------------ issue 26


def test_ctrl_c_during_a_diverging_run_keeps_the_last_good_checkpoint(tmp_path, capsys):
    """Issue 26.1: the interrupt path saved weights whose held-out loss was far above the
    limit (finite, so the old finiteness check let them through)."""

    def wreck_then_interrupt(model):
        calls = {"n": 0}

        def post(opt, args, kwargs):
            calls["n"] += 1
            if calls["n"] == 6:  # during step 5: finite weights, a held-out loss of hundreds
                with torch.no_grad():
                    model.lm_head.weight.mul_(1e4)
                signal.raise_signal(signal.SIGINT)

        handles.append(register_optimizer_step_post_hook(post))

    handles = []
    try:
        with pytest.raises(KeyboardInterrupt):
            T.train(tiny(steps=20, eval_interval=4), tmp_path, setup_hook=wreck_then_interrupt)
    finally:
        for h in handles:
            h.remove()
    last = T.load_checkpoint(tmp_path / "last.pt")
    assert last["step"] == 4 and last["val_loss"] < math.log(84) + 0.1
    err = capsys.readouterr().err
    assert "interrupted at step 6" in err and "not saved" in err and "held-out loss" in err


def _raw_checkpoint(tmp_path, **items):
    """A file in the checkpoint format holding ``items`` and a (wrong) checksum string."""
    path = tmp_path / "odd.pt"
    head = {"format": "mini_transformer.checkpoint", "version": 2, "checksum": "0"}
    torch.save(head | items, path)
    return path


def test_a_stride_0_tensor_is_refused_before_it_is_expanded(tmp_path):
    """Issue 26.3: 4 bytes stored as a view of 2e9 elements made the checksum allocate 8 GB."""
    import resource

    path = _raw_checkpoint(tmp_path, model={"w": torch.zeros(1).expand(2 * 10**9)})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ValueError, match=r"model\['w'\].*2000000000 elements.*4 bytes"):
        T.load_checkpoint(path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KiB


def test_a_deeply_nested_value_is_refused_with_a_value_error(tmp_path):
    import sys

    nested: list = []
    for _ in range(5000):
        nested = [nested]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)  # torch.save itself recurses
    try:
        path = _raw_checkpoint(tmp_path, extra=nested)
    finally:
        sys.setrecursionlimit(limit)
    with pytest.raises(ValueError, match="nested deeper than 32"):
        T.load_checkpoint(path)


def test_a_refused_run_leaves_the_existing_run_untouched(tmp_path):
    """The clean-up of a fresh run that saved nothing must not touch a run it refused."""
    T.train(tiny(steps=1, eval_interval=1), tmp_path)
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(ValueError, match="already holds a run"):
        T.train(tiny(steps=1, eval_interval=1), tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files
