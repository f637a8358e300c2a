"""The machine: which precision a GPU computes natively, its peak for MFU, and what every log records about it.

Plain functions of what torch reports (device capability, device name), so tests can give them a T4's, an A100's
or an H100's answers on a CPU (tests/test_gpu_paths.py), or a Mac's and a Windows laptop's (tests/test_platforms.py).
cram.py, finetune_glue.py and bench.py share them; every script's main() calls safe_console() first.
"""
import contextlib
import os
import platform
import re
import subprocess
import sys
import time

import numpy as np
import torch


def amp_dtype(device):
    """Autocast precision, what the GPU computes natively: bf16 from Ampere (capability 8.0) on; fp16 with a GradScaler
    before it (T4 7.5, V100 7.0: is_bf16_supported() says yes, but emulated, with no flash attention or compiled
    kernels for it); None (fp32) on the CPU and MPS."""
    if device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.get_device_capability(device) >= (8, 0) else torch.float16


def autocast(device, dtype):
    """Autocast to dtype (amp_dtype's pick), or no context at all for None (fp32): older torch (2.4, the oldest that
    requirements.txt allows) refuses an autocast on "mps" even when it is disabled."""
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def compile_by_default(device):
    """--compile auto: torch.compile on CUDA, except on Windows, where its GPU kernels need Triton, which torch does not
    ship there. Off on the CPU, and on Apple's GPU (mps), whose compiler backend torch calls a prototype."""
    return device.type == "cuda" and sys.platform != "win32"


def dist_backend(device, offload=False):
    """torchrun's collective library: NCCL between CUDA GPUs, gloo on CPUs and on Windows, which has no NCCL build.
    offload (--offload): the shards and their gradients live in CPU memory, and the gradient clip and GradScaler's
    overflow check reduce them there; NCCL has no CPU tensors, so gloo serves the CPU beside it."""
    if device.type != "cuda" or sys.platform == "win32":
        return "gloo"
    return "cpu:gloo,cuda:nccl" if offload else "nccl"


def safe_console():
    """What a script prints never raises: a character the console's encoding lacks (cp1252 on Windows, also for output
    redirected to a file) is written as an escape, e.g. \\u03a9. Every script's main() calls this first."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # None under pythonw.exe; some embedders' streams cannot be reconfigured
            stream.reconfigure(errors="backslashreplace")


# Dense tensor-core peak FLOP/s in the precision amp_dtype picks (bf16; fp16 before Ampere), for MFU. The whole
# name of torch.cuda.get_device_name() must match: "H100 PCIe" is not an H100 SXM, "RTX A1000" no A100; else n/a.
GPU_PEAK_FLOPS = {r"NVIDIA H100 80GB HBM3|NVIDIA H100 SXM.*|NVIDIA H200": 989e12, r"NVIDIA H100 PCIe": 756e12,
                  r"NVIDIA A100[- ](SXM4|PCIE|80GB).*": 312e12, r"NVIDIA L40S": 362e12, r"NVIDIA RTX A6000": 155e12,
                  r"NVIDIA GeForce RTX 4090": 165e12, r"NVIDIA GeForce RTX 3090": 71e12, r"NVIDIA RTX A4000": 77e12,
                  r"NVIDIA A10G": 70e12, r"NVIDIA L4": 121e12, r"Tesla V100-SXM2.*": 125e12,
                  r"Tesla V100-PCIE.*": 112e12, r"Tesla T4": 65e12}


def device_peak_flops(device):
    if device.type != "cuda":  # no MFU on a CPU or MPS
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for pattern, v in GPU_PEAK_FLOPS.items() if re.fullmatch(pattern, name)), None)


def run_info(device):
    """Versions, device and git commit: every log and checkpoint records where its numbers came from."""
    git = lambda *a: subprocess.run(["git", *a], capture_output=True, encoding="utf-8", errors="replace",  # noqa: E731
                                    timeout=5, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    try:  # "-dirty": the code that ran differs from the commit
        commit = git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain", "--", "*.py") else "")
    except (OSError, subprocess.SubprocessError):
        commit = ""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    return {"python": platform.python_version(), "torch": str(torch.__version__), "numpy": np.__version__,
            "device": f"{device.type}: {name}", "threads": torch.get_num_threads(), "git": commit or "unknown",
            "host": platform.node(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
