"""benchmarks/gpu_step.py on the CPU (so CI runs its code paths) and the GPU peak table."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from mini_transformer.hardware import GPU_PEAK_FLOPS, gpu_peak_flops, where_it_ran

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark():
    spec = importlib.util.spec_from_file_location("gpu_step", ROOT / "benchmarks" / "gpu_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_runs_on_the_cpu_and_reports_rate_and_ceiling_share(tmp_path, capsys):
    torch.set_num_threads(1)
    out = tmp_path / "r.json"
    argv = [
        "--preset",
        "tiny",
        "--device",
        "cpu",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--profile",
        "3",
        "--json",
        str(out),
    ]
    r = load_benchmark().main(argv)
    printed = capsys.readouterr().out
    assert "tokens/s" in printed and "MFU" in printed and "Self CPU" in printed
    assert json.loads(out.read_text())["tokens_per_s"] == r["tokens_per_s"] > 0
    assert r["tokens_per_s"] == pytest.approx(8 * 32 / r["step_time_s"])
    assert r["device_type"] == "cpu" and r["dtype"] == "float32"
    assert "CPU" in r["mfu_basis"] and 0 < r["mfu"] < 1
    assert r["achieved_flops_per_s"] == pytest.approx(r["mfu"] * r["peak_flops"])


def test_the_benchmark_refuses_bad_input(capsys):
    with pytest.raises(SystemExit) as exc:
        load_benchmark().main(["--device", "tpu", "--preset", "tiny"])
    assert exc.value.code == 2 and "device must be" in capsys.readouterr().err


@pytest.mark.parametrize(
    "name,key",
    [
        ("NVIDIA H100 80GB HBM3", "H100"),  # the SXM part
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
    ],
)
def test_gpu_peaks_tell_the_parts_apart(name, key):
    assert gpu_peak_flops(name) == (GPU_PEAK_FLOPS[key], f"data sheet, bf16 dense ({key})")


def test_the_h100_sxm_and_pcie_peaks_are_the_data_sheets():
    # NVIDIA H100 data sheet, BF16 tensor core dense (half the "with sparsity" figures)
    assert GPU_PEAK_FLOPS["H100"] == 989e12 and GPU_PEAK_FLOPS["H100 PCIe"] == 756e12


def test_an_unknown_gpu_says_so():
    peak, source = gpu_peak_flops("Tesla T4")
    assert peak is None and "unknown GPU 'Tesla T4'" in source


def test_where_it_ran_names_device_threads_and_versions():
    r = where_it_ran("cpu")
    assert r["device"].startswith("CPU (") and r["device_type"] == "cpu"
    assert r["threads"] == torch.get_num_threads() and r["torch"] == torch.__version__
