"""For the project's developers: the test suite as a GPU machine runs it, on a CPU. Python imports this file at the
start of every process whose PYTHONPATH names this folder, pytest's workers and every script a test starts alike:

    PYTHONPATH=.ci/gpu_machine python -m pytest -q -n 2 -m "not cuda" tests

torch then says it has one H100, as a GPU machine's torch does, unless CUDA_VISIBLE_DEVICES="" hides it (what
tests/conftest.py sets for every process a test starts). A test that leaves a script to the machine's choice, or
asks torch about the GPU where conftest.py hid it, then meets a GPU this CPU build cannot use, and fails here, as it
would on the lent machine. The tests marked `cuda` need the real GPU: `-m "not cuda"` leaves them out.
(2026-12-07, on the dev VM: none failed; docs/notes.md.)
"""
import os

if os.environ.get("CUDA_VISIBLE_DEVICES") != "":
    import torch

    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.get_device_name = lambda *args, **kwargs: "NVIDIA H100 80GB HBM3"
    torch.cuda.get_device_capability = lambda *args, **kwargs: (9, 0)
    torch.cuda.is_bf16_supported = lambda *args, **kwargs: True
