"""Data parallel training under torchrun (two CPU processes, gloo): Ctrl-C, then ``--resume``,
gives the weights of the uninterrupted run, with dropout on (each rank draws its own masks)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from mini_transformer.checkpoints import load_checkpoint

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from mini_transformer.core import get_preset
    from mini_transformer.train import train

    mode, out = sys.argv[1], sys.argv[2]
    cfg = get_preset("tiny", dropout=0.2, steps=6, eval_interval=2, eval_batches=1,
                     device="cpu", threads=1, progress=False, peak_flops=1e11)

    def ctrl_c_at_step_4(model):  # rank 1 only: every rank must stop at the same step
        seen = [0]

        def pre(module, args):
            if module.training and os.environ["RANK"] == "1":
                seen[0] += 1
                if seen[0] == 4:
                    os.kill(os.getpid(), signal.SIGINT)

        model.register_forward_pre_hook(pre)

    if mode == "interrupt":
        try:
            train(cfg, out, setup_hook=ctrl_c_at_step_4)
            sys.exit("not interrupted")
        except KeyboardInterrupt:
            pass
    else:
        train(cfg, out, resume=mode == "resume")
    """
)


def _torchrun(script, *args) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = subprocess.run(cmd + [str(script), *map(str, args)], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-3000:]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")
def test_resume_after_ctrl_c_is_bit_identical_under_torchrun(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    _torchrun(script, "full", tmp_path / "full")
    _torchrun(script, "interrupt", tmp_path / "cut")
    stopped = load_checkpoint(tmp_path / "cut" / "last.pt")
    assert 0 < stopped["step"] < 6  # saved at the step boundary after Ctrl-C, before the end
    _torchrun(script, "resume", tmp_path / "cut")
    full = load_checkpoint(tmp_path / "full" / "last.pt")
    resumed = load_checkpoint(tmp_path / "cut" / "last.pt")
    assert full["step"] == resumed["step"] == 6
    for name, weight in full["model"].items():
        assert torch.equal(weight, resumed["model"][name]), name
