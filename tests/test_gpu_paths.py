"""The GPU paths, tested on a CPU: device decisions are functions of what torch reports (monkeypatched here to a
T4, an A100, an H100), fp16 and bf16 run under CPU autocast, DDP and --shard (ZeRO-3 through FSDP2) run as two gloo
processes, and checkpoints are loaded as a GPU run loads them. Last, the tests' own machine: every test not marked
`cuda` gets the CPU and the tiny preset, whatever the machine has (conftest.py)."""
import json
import os
import re
import shutil
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from test_cram import ROOT, TINY_FLAGS, write_data
from test_glue import write_task
from conftest import built_once
import bench  # noqa: E402  (test_cram put the project on sys.path)
import cram  # noqa: E402
import fill_mask  # noqa: E402
import finetune_glue  # noqa: E402
import hardware  # noqa: E402
import prepare  # noqa: E402


def run_tiny(tmp_path, *flags, out="out"):
    data = tmp_path / "data"
    if not data.exists():
        write_data(data)
    return cram.main(["--data_dir", str(data), "--out_dir", str(tmp_path / out), *TINY_FLAGS, *flags])


# ---------------------------------------------------------------------------------------------- precision

@pytest.mark.parametrize("capability, dtype", [((6, 0), torch.float16), ((6, 1), None), ((7, 0), torch.float16),
                                               ((7, 5), torch.float16), ((8, 0), torch.bfloat16),
                                               ((8, 9), torch.bfloat16), ((9, 0), torch.bfloat16)])
def test_bf16_from_ampere_on_and_fp16_before_it_even_where_bf16_is_emulated_but_fp32_where_fp16_is_slow(
        capability, dtype, monkeypatch):  # a GeForce 10 series (6.1) runs fp16 at 1/64 of fp32; a P100 (6.0) at 2x
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # what a T4 answers (emulation)
    assert hardware.amp_dtype(torch.device("cuda", 0)) == dtype
    assert hardware.amp_dtype(torch.device("cpu")) is None and hardware.amp_dtype(torch.device("mps")) is None


@pytest.mark.parametrize("gpu, capability, memory, seeds", [
    ("a T4", (7, 5), 16e9, 1), ("an RTX 3060", (8, 6), 12e9, 3), ("an A100", (8, 0), 40e9, 5),
    ("an H100", (9, 0), 80e9, 5)])
def test_a_task_s_seeds_train_as_one_model_where_steps_are_cuda_graphs_as_many_as_fit(gpu, capability, memory, seeds,
                                                                                      monkeypatch):
    """The paper's model, 119.6 M parameters, 16 bytes each (fp32 weights, gradients, AdamW's moments): 1.9 GB a
    seed, in half the GPU's memory. A T4 computes in fp16, without graphs: one seed at a time, as on a CPU or a Mac."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    properties = types.SimpleNamespace(total_memory=memory)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: properties)
    assert hardware.seeds_at_once(torch.device("cuda", 0), 5, 119.6e6) == seeds, gpu
    assert hardware.seeds_at_once(torch.device("cuda", 0), 1, 119.6e6) == 1  # never more than the run's seeds
    assert hardware.seeds_at_once(torch.device("cpu"), 5, 1e6) == 1  # a CPU: one after another
    assert hardware.seeds_at_once(torch.device("mps"), 5, 1e6) == 1


@pytest.mark.parametrize("gpu, capability, memory, long_run", [
    ("a T4", (7, 5), 16e9, (False, 1)), ("an A100", (8, 0), 40e9, (True, 5)), ("an H100", (9, 0), 80e9, (True, 5))])
def test_fine_tuning_is_compiled_with_its_seeds_as_one_model_where_the_run_is_long_enough_to_pay(
        gpu, capability, memory, long_run, monkeypatch):
    """hardware.fine_tuning_plan, finetune_glue.py's defaults: (compile?, seeds in a step). Compiled, the seeds as one
    model, where steps are CUDA graphs (bf16) and the run has COMPILE_PAYS batches a head shape (GLUE's protocol:
    1,483,075 for 3); a short run (CoLA's 5 seeds, 13,375) does not earn its compile back. A flag given wins; fp16
    refuses seeds as one."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    properties = types.SimpleNamespace(total_memory=memory)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: properties)
    monkeypatch.setattr(torch, "__version__", torch.torch_version.TorchVersion("2.11.0+cu130"))  # as measured
    plan, cuda, n = hardware.fine_tuning_plan, torch.device("cuda", 0), 119.6e6
    assert plan(cuda, 1_483_075, 5, n) == long_run, gpu
    assert plan(cuda, hardware.COMPILE_PAYS, 5, n) == long_run and plan(cuda, 13_375, 5, n) == (False, 1)
    assert plan(cuda, 250_000, 5, n, heads=3) == (False, 1)  # 3 head shapes compile 3 times the graphs
    assert plan(cuda, 1_483_075, 5, n, heads=3) == long_run  # the protocol's 3 (2 classes, 3, a regression)
    assert plan(cuda, 1_483_075, 1, n) == (long_run[0], 1)  # one seed: compiled alone
    assert plan(cuda, 1_483_075, 5, n, compile=False) == (False, 1)  # --no-compile: one seed after another
    assert plan(cuda, 1_483_075, 5, n, together=1) == (long_run[0], 1)  # --seeds_together 1, still compiled
    assert plan(cuda, 100, 5, n, compile=True) == (True, long_run[1])  # --compile: and the seeds as one
    for other in (torch.device("cpu"), torch.device("mps")):
        assert plan(other, 1_483_075, 5, n) == (False, 1) and plan(other, 10, 5, n, compile=True) == (True, 1)
    monkeypatch.setattr(sys, "platform", "win32")  # torch ships no Triton for Windows: its compile fails there
    assert plan(cuda, 1_483_075, 5, n) == (False, 1)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(torch, "__version__", torch.torch_version.TorchVersion("2.6.0+cu124"))
    assert plan(cuda, 1_483_075, 5, n) == (False, 1)  # compiled vmap not tried before 2.11: one seed, uncompiled
    if capability < (8, 0):
        with pytest.raises(cram.CramError, match="--seeds_together 2 needs bf16"):
            plan(cuda, 10, 5, n, together=2)


@pytest.mark.parametrize("gpu, memory, micro, long_rows, a_quarter_free", [
    ("an 8 GB card", 8e9, 64, 16, 1), ("an RTX 3060", 12e9, 128, 32, 16), ("a T4", 16e9, 128, 32, 32),
    ("an A10G", 24e9, 256, 64, 64), ("an A100 40GB", 40e9, 512, 128, 128), ("an H100", 80e9, 512, 256, 256)])
def test_the_paper_s_micro_batch_is_as_many_sequences_as_the_gpu_allows(gpu, memory, micro, long_rows, a_quarter_free,
                                                                        monkeypatch):
    """--micro_batch 0 (the paper's default): the largest power of two whose state and activations fill at most 70%
    of the GPU (the paper model compiled: 12.8 GiB at 256, 23.9 at 512, measured on an H100), 512 at most, as the
    paper ran 512 on an A6000; 128 off CUDA; at most an eighth of the batch target shared by the GPUs."""
    free, capability = {"memory": memory}, {"now": (8, 0)}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["memory"], memory))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability["now"])
    cfg = cram.parse_config(["--preset", "paper"])
    with torch.device("meta"):
        model = cram.CrammedBERT(cfg, 32768, 128)  # 119.6 M parameters
    cuda, fit = torch.device("cuda", 0), hardware.fit_micro_batch
    assert cfg.micro_batch == 0 and fit(cuda, model, cfg, 128) == micro, gpu
    assert fit(cuda, model, cfg, 512) == long_rows  # rows of 512 tokens: 4x the activations
    assert fit(cuda, model, cfg, 128, compiled=False) == min(micro, long_rows * 2)  # eager: twice, a margin
    assert fit(cuda, model, cfg, 128, world=16) == 64 and fit(cuda, model, cfg, 128, world=4) == min(micro, 256)
    capability["now"] = (6, 1)  # a GeForce 10 series computes in fp32: activations twice the bytes
    assert fit(cuda, model, cfg, 128) == min(micro, long_rows * 2) and fit(cuda, model, cfg, 512) == long_rows // 2
    capability["now"] = (8, 0)
    free["memory"] = memory / 4  # another process holds three quarters of the GPU: what is free counts
    assert fit(cuda, model, cfg, 128) == a_quarter_free
    assert fit(torch.device("cpu"), model, cfg, 128) == 128
    assert fit(torch.device("mps"), model, replace(cfg, batch_size=64), 128) == 8


def test_cram_resolves_the_micro_batch_before_training_and_logs_what_it_picked(tmp_path):
    loss = run_tiny(tmp_path, "--max_steps", "2", "--micro_batch", "0", "--batch_size", "32")
    config = json.loads((tmp_path / "out" / "log.txt").read_text(encoding="utf-8").split("config: ")[1].split("\n")[0])
    assert config["micro_batch"] == 4 and loss == loss  # a CPU: 128, but an eighth of the batch target at most


class SpyScaler(torch.amp.GradScaler):
    made = []

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        SpyScaler.made.append(self.is_enabled())


def test_before_ampere_pretraining_runs_fp16_with_a_grad_scaler(tmp_path, monkeypatch):
    monkeypatch.setattr(cram, "amp_dtype", lambda device: torch.float16)  # what a T4 gets (the test above)
    monkeypatch.setattr(torch.amp, "GradScaler", SpyScaler)
    SpyScaler.made.clear()
    loss = run_tiny(tmp_path, "--max_steps", "6")
    ckpt = torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)
    assert SpyScaler.made == [True] and "scale" in ckpt["scaler"] and loss == loss  # a live scaler, saved; finite
    assert '"amp": "torch.float16"' in (tmp_path / "out" / "log.txt").read_text()


def test_the_loss_is_computed_inside_the_model_and_equals_the_cross_entropy_of_its_logits():
    torch.manual_seed(0)
    model = cram.CrammedBERT(cram.Config(n_layer=2, n_embd=32, n_head=2, ffn_hidden=64), 50, 16)
    ids = torch.randint(5, 50, (3, 16))
    inputs, positions, targets = cram.mask_tokens(ids, 4, 50, 0.25, torch.Generator().manual_seed(0))
    logits = model(inputs, positions)
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 50), targets.reshape(-1))
    assert torch.allclose(model(inputs, positions, targets), expected, atol=1e-6)


@pytest.mark.slow
def test_torch_compile_trains_the_model_with_its_loss_inside_under_autocast():
    torch.manual_seed(0)
    model = cram.CrammedBERT(cram.Config(n_layer=1, n_embd=32, n_head=2, ffn_hidden=64), 50, 16)
    compiled = torch.compile(model)
    ids = torch.randint(5, 50, (2, 16))
    inputs, positions, targets = cram.mask_tokens(ids, 4, 50, 0.25, torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = compiled(inputs, positions, targets)
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss) and model.embed.tok.weight.grad is not None
    assert abs(loss.item() - model(inputs, positions, targets).item()) < 0.05  # bf16 vs fp32


# ---------------------------------------------------------------------------------------------- MFU

@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA A100-SXM4-80GB", 312e12),
    ("NVIDIA A100-PCIE-40GB", 312e12), ("NVIDIA A100 80GB PCIe", 312e12), ("NVIDIA RTX A1000", None),
    ("NVIDIA RTX A6000", 155e12), ("NVIDIA RTX 6000 Ada Generation", None), ("Tesla T4", 65e12),
    ("Tesla V100-SXM2-16GB", 125e12), ("NVIDIA L4", 121e12), ("NVIDIA L40", None), ("NVIDIA GeForce RTX 4090 D", None),
    ("NVIDIA H100 NVL", None), ("NVIDIA H200", 989e12), ("NVIDIA B200", None)])
def test_mfu_uses_a_peak_only_for_a_gpu_named_exactly(name, peak, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert hardware.device_peak_flops(torch.device("cuda", 0)) == peak
    assert hardware.device_peak_flops(torch.device("cpu")) is None


# ---------------------------------------------------------------------------------------------- checkpoints

@pytest.mark.filterwarnings("ignore:for .* copying from a non-meta parameter")  # the meta model keeps no values
def test_resume_reads_to_the_cpu_and_restores_a_model_on_another_device(tmp_path):
    run_tiny(tmp_path, "--max_steps", "3")
    path, cfg = tmp_path / "out" / "ckpt.pt", cram.parse_config(TINY_FLAGS)
    ckpt = cram.read_checkpoint(str(path))
    assert all(t.device.type == "cpu" for t in [*ckpt["model"].values(), ckpt["rng"]["torch"]])
    meta = ckpt["meta"]
    with torch.device("meta"):  # stands in for CUDA: any tensor off the CPU made set_rng_state raise TypeError
        model = cram.CrammedBERT(cfg, meta["vocab_size"], meta["seq_len"])
    optimizer = cram.make_optimizer(model, cfg, torch.device("meta"))
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    clock, micro, _ = cram.resume(str(path), cfg, meta, model, optimizer, scaler)
    assert (clock.step, clock.data_pos, micro) == (3, ckpt["data_pos"], 4) and clock.train_time > 0
    assert torch.equal(torch.get_rng_state(), ckpt["rng"]["torch"])


def test_a_checkpoint_from_a_bf16_or_cpu_run_resumes_on_an_fp16_gpu(tmp_path, monkeypatch):
    run_tiny(tmp_path, "--max_steps", "3")  # fp32: its GradScaler is off and saves an empty state
    assert torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)["scaler"] == {}
    monkeypatch.setattr(cram, "amp_dtype", lambda device: torch.float16)  # a T4 continues it
    run_tiny(tmp_path, "--max_steps", "5", "--resume")
    assert "scale" in torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)["scaler"]


class Payload:  # a pickle that runs code when it is loaded: here, it only creates a file
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return open, (self.marker, "w")


def test_a_checkpoint_that_would_run_code_runs_nothing_and_is_called_damaged(tmp_path, capsys):
    import fill_mask
    run_tiny(tmp_path, "--max_steps", "2")
    path, marker = tmp_path / "out" / "ckpt.pt", tmp_path / "pwned"
    state = torch.load(path, weights_only=True)
    torch.save({**state, "info": Payload(str(marker))}, path)
    with pytest.raises(cram.CramError, match="damaged or not a cram.py checkpoint"):
        cram.read_checkpoint(str(path))
    with pytest.raises(SystemExit, match="damaged or not a cram.py checkpoint"):
        fill_mask.main([str(path), "a [MASK] ."])
    with pytest.raises(SystemExit, match="damaged or not a cram.py checkpoint"):
        run_tiny(tmp_path, "--max_steps", "4", "--resume")
    assert not marker.exists()


def test_checkpoints_hold_plain_values_and_older_ones_with_a_torch_version_object_still_load(tmp_path):
    run_tiny(tmp_path, "--max_steps", "2")
    path = tmp_path / "out" / "ckpt.pt"
    state = torch.load(path, weights_only=True)  # would raise on any object that is not a plain value
    assert type(state["info"]["torch"]) is str
    state["info"]["torch"] = torch.__version__  # a TorchVersion, as checkpoints written before 2026-11-24 hold
    torch.save(state, path)
    assert cram.read_checkpoint(str(path))["step"] == 2
    run_tiny(tmp_path, "--max_steps", "4", "--resume")


def test_on_torch_2_4_which_has_no_safe_globals_an_older_checkpoint_still_loads(tmp_path, monkeypatch):
    run_tiny(tmp_path, "--max_steps", "2")  # requirements.txt allows torch 2.4: safe_globals came in 2.5
    path = tmp_path / "out" / "ckpt.pt"
    state = torch.load(path, weights_only=True)
    state["info"]["torch"] = torch.__version__  # a TorchVersion, as checkpoints written before 2026-11-24 hold
    torch.save(state, path)
    monkeypatch.delattr(torch.serialization, "safe_globals", raising=False)  # on torch 2.4 it is not there
    assert cram.read_checkpoint(str(path))["step"] == 2
    assert "trained 2 steps" in fill_mask.how_trained(str(path), {})  # fill_mask.py's line on how far the model trained
    run_tiny(tmp_path, "--max_steps", "3", "--resume")


# ---------------------------------------------------------------------------------------------- out of memory

def test_out_of_memory_is_one_line_naming_micro_batch_and_resume_takes_a_smaller_one(tmp_path, monkeypatch):
    forward = cram.CrammedBERT.forward
    def forward_that_runs_out(self, ids, positions, targets=None):
        if targets is not None and len(ids) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has 15 GiB")
        return forward(self, ids, positions, targets)
    monkeypatch.setattr(cram.CrammedBERT, "forward", forward_that_runs_out)
    with pytest.raises(SystemExit) as e:
        run_tiny(tmp_path, "--max_steps", "4")
    message = str(e.value)
    assert message.count("\n") == 0 and "--micro_batch 4" in message and "--resume --micro_batch 2" in message
    assert "Tried to allocate 2.00 GiB" in message and (tmp_path / "out" / "ckpt.pt").exists()
    run_tiny(tmp_path, "--max_steps", "4", "--resume", "--micro_batch", "2")  # fits now; the target stays 8
    lines = (tmp_path / "out" / "log.txt").read_text()
    assert "micro-batch 4 -> 2" in lines and "done: 4 steps" in lines
    assert [json.loads(x)["batch"] for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()
            if '"batch"' in x][-1] == 8


def test_out_of_memory_on_torch_2_4_which_has_no_torch_out_of_memory_error_is_still_one_line(tmp_path, monkeypatch):
    forward = cram.CrammedBERT.forward  # torch 2.4 raises torch.cuda.OutOfMemoryError; torch.OutOfMemoryError is 2.5's
    def forward_that_runs_out(self, ids, positions, targets=None):
        if targets is not None and len(ids) > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has 15 GiB")
        return forward(self, ids, positions, targets)
    monkeypatch.setattr(cram.CrammedBERT, "forward", forward_that_runs_out)
    monkeypatch.delattr(torch, "OutOfMemoryError")
    with pytest.raises(SystemExit, match="out of memory with --micro_batch 4"):
        run_tiny(tmp_path, "--max_steps", "4")
    assert (tmp_path / "out" / "ckpt.pt").exists()


# ---------------------------------------------------------------------------------------------- DDP (2 x gloo)

def torchrun(tmp_path, patch, *flags):
    """cram.main on two gloo processes, after `patch` (Python source, sees `cram`, `rank`, `time`) ran on each."""
    script = tmp_path / "run.py"
    script.write_text(f"import os, sys, time\nsys.path.insert(0, {str(ROOT)!r})\nimport cram\n"
                      f"rank = int(os.environ['RANK'])\n{patch}\ncram.main(sys.argv[1:])\n")
    write_data(tmp_path / "data")
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                           str(script), "--data_dir", str(tmp_path / "data"), "--out_dir",
                           str(tmp_path / "out"), *TINY_FLAGS, *flags],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.mark.slow
def test_under_ddp_the_gpus_agree_on_the_smallest_micro_batch_any_of_them_holds(tmp_path):
    """--micro_batch 0 on two GPUs that hold different micro-batches (rank 0: 4, rank 1: 2): both train with 2, else
    their data slices and accumulation counts would differ and DDP would wait forever."""
    patch = "cram.fit_micro_batch = lambda *a, **k: 4 if rank == 0 else 2"
    p = torchrun(tmp_path, patch, "--micro_batch", "0", "--batch_size", "16", "--max_steps", "2")
    assert p.returncode == 0, p.stderr[-2000:]
    log = (tmp_path / "out" / "log.txt").read_text(encoding="utf-8")
    assert json.loads(log.split("config: ")[1].split("\n")[0])["micro_batch"] == 2


KEEP_GRADS = """
import atexit, contextlib, hardware
no_sync_until, where = hardware.Ranks.no_sync_until, []  # per micro-batch: where its gradients are, after backward
@contextlib.contextmanager
def spy(self, last, train_model):
    with no_sync_until(self, last, train_model):
        yield
    where.append(next(self.model.parameters()).grad.data_ptr())
hardware.Ranks.no_sync_until = spy
atexit.register(lambda: rank or print("where", where, flush=True))
"""


@pytest.mark.slow
def test_under_ddp_accumulation_adds_into_ddps_own_buffers_not_a_second_copy_of_the_gradients(tmp_path):
    """DDP (gradient_as_bucket_view) keeps the gradients in its buckets; gradients set to None after a step would
    come back as new tensors in the next step's micro-batches before the sync: 4 more bytes a parameter."""
    p = torchrun(tmp_path, KEEP_GRADS, "--micro_batch", "2", "--batch_size", "8", "--max_steps", "3")
    assert p.returncode == 0, p.stderr[-2000:]
    where = json.loads(p.stdout.split("where ")[1].split("\n")[0])
    assert len(where) == 5 and len(set(where[1:])) == 1  # 1, 2, 2 micro-batches (the ramp); after the 1st, the bucket


SLOW_EVAL = """
evaluate = cram.evaluate
def slow(*args, **kw):
    time.sleep(2.0)
    return evaluate(*args, **kw)
if rank == 0:
    cram.evaluate = slow
"""


@pytest.mark.slow
def test_under_ddp_rank_zero_s_evaluation_costs_no_budget(tmp_path):
    # a 3-second budget, evaluated every quarter, each evaluation 2 s: charged to the budget, the first would end it
    p = torchrun(tmp_path, SLOW_EVAL, "--budget_hours", str(3 / 3600), "--eval_every", "0.25",
                 "--max_steps", "0")
    assert p.returncode == 0, p.stderr[-3000:]
    evals = [line for line in p.stdout.splitlines() if line.startswith("eval")]
    assert len(evals) == 4, p.stdout[-3000:]  # at 25, 50 and 75% of the budget, and at the end
    assert float(evals[-1].split("budget")[1].strip(" %")) >= 100.0  # the last line reports the shared clock
    ckpt = torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)
    assert 3.0 <= ckpt["train_time"] < 4.5


NAN_ON_RANK_1 = """
forward = cram.CrammedBERT.forward
def nan_later(self, ids, positions, targets=None):
    out = forward(self, ids, positions, targets)
    nan_later.calls = getattr(nan_later, "calls", 0) + 1
    return out * float("nan") if targets is not None and nan_later.calls > 3 else out
if rank == 1:
    cram.CrammedBERT.forward = nan_later
"""


@pytest.mark.slow
def test_under_ddp_a_nan_on_one_rank_stops_both_with_one_line(tmp_path):
    p = torchrun(tmp_path, NAN_ON_RANK_1, "--max_steps", "20")
    assert p.returncode != 0
    both = p.stdout + p.stderr
    assert both.count("cram.py: error: loss is nan") == 1, both[-3000:]
    assert "RuntimeError" not in both and "Connection closed" not in both, both[-3000:]


def test_ddp_wraps_the_model_without_broadcasting_its_fixed_buffers(tmp_path, monkeypatch):
    made = {}
    class FakeDDP(torch.nn.Module):  # records how train() wraps the model, then runs it as one process
        def __init__(self, module, **kw):
            super().__init__()
            self.module = module
            made.update(kw)

        def forward(self, *args):
            return self.module(*args)
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", FakeDDP)
    for name in ("init_process_group", "barrier", "destroy_process_group", "all_reduce"):
        monkeypatch.setattr(torch.distributed, name, lambda *args, **kw: None)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    run_tiny(tmp_path, "--max_steps", "2")
    assert made["broadcast_buffers"] is False  # pos_table and attn_bias never change: no copy per forward
    assert made["gradient_as_bucket_view"] is True  # no second copy of the gradients
    with pytest.raises(SystemExit, match="--micro_batch 8 on 2 devices is 16 sequences a step, more than --batch"):
        run_tiny(tmp_path, "--max_steps", "2", "--micro_batch", "8", out="wide")


# ---------------------------------------------------------------------------------------------- --shard (2 x gloo)

# One micro-batch of 2 per rank at first, two later (the first of them without a gradient sync); the last block
# narrow, so --narrow composes with --shard and both kinds of block run sharded; a clip that clips every step;
# a checkpoint at every step, as the kill below needs, and before the first (no Adam moments yet: see full_state).
SHARD_FLAGS = ["--preset", "tiny", "--n_layer", "2", "--n_embd", "32", "--n_head", "2", "--ffn_hidden", "64",
               "--narrow", "1", "--micro_batch", "2", "--batch_size", "8", "--max_steps", "12", "--eval_every", "0.5",
               "--grad_clip", "0.1", "--ckpt_every_min", "0", "--device", "cpu"]

# Run on every rank before cram.main: prints what this rank holds, and the gradients and norm of each clip.
SPY = """
import atexit
from torch.distributed.tensor import DTensor
def say(line):  # one write: the two ranks' lines never interleave
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()
def local(t):  # this rank's part of a tensor (all of it, if not sharded)
    return t.to_local().numel() if isinstance(t, DTensor) else t.numel()
make_optimizer = cram.make_optimizer
def spy_optimizer(model, cfg, device):
    opt = make_optimizer(model, cfg, device)
    atexit.register(lambda: say(f"rank {rank} holds {sum(local(p) for p in model.parameters())} weights, "
                                f"{sum(local(s[k]) for s in opt.state.values() for k in ('exp_avg', 'exp_avg_sq'))} "
                                "moments"))
    return opt
cram.make_optimizer = spy_optimizer
clip = torch.nn.utils.clip_grad_norm_
def spy_clip(params, max_norm):
    params = list(params)
    norm = clip(params, max_norm)
    whole = norm.full_tensor() if isinstance(norm, DTensor) else norm
    say(f"rank {rank} clips {sum(local(p.grad) for p in params)} gradients of norm {whole.item():.9g}")
    return norm
torch.nn.utils.clip_grad_norm_ = spy_clip
"""

LOADS = """
load = torch.load
def spy_load(f, *args, **kw):
    sys.stdout.write(f"rank {rank} loads {f} mmap={kw.get('mmap', False)}\\n")  # one write: see SPY's say
    sys.stdout.flush()
    return load(f, *args, **kw)
torch.load = spy_load
"""

KILL_AFTER_STEP_6 = """
save_checkpoint = cram.save_checkpoint
def save_then_die(path, state):  # rank 0 writes; kill -9 right after step 6's checkpoint is on disk
    save_checkpoint(path, state)
    if state["step"] == 6:
        os.kill(os.getpid(), 9)
cram.save_checkpoint = save_then_die
"""

LEFT_AT_EXIT = """
import atexit, gc
from torch.distributed.fsdp import FSDPModule
atexit.register(lambda: print(f"rank {rank} leaves {sum(isinstance(o, FSDPModule) for o in gc.get_objects())} "
                              "sharded modules to Python's shutdown", flush=True))
"""


def sharded_run(data, out, *flags, patch=SPY):
    """cram.main with SHARD_FLAGS on two gloo processes, after `patch` ran on each (it sees cram, rank, torch)."""
    out.mkdir(parents=True, exist_ok=True)
    script = out.parent / f"run_{out.name}.py"
    script.write_text(f"import os, sys\nsys.path.insert(0, {str(ROOT)!r})\nimport torch\nimport cram\n"
                      f"rank = int(os.environ['RANK'])\n{patch}\ncram.main(sys.argv[1:])\n", encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                           str(script), "--data_dir", str(data), "--out_dir", str(out), *SHARD_FLAGS,
                           *flags],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def curve(folder):
    """step -> loss, and the evaluations, of a run's metrics.jsonl (a resumed run's lines replace the lost ones)."""
    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    return {m["step"]: m["loss"] for m in lines if "loss" in m}, [m["val_loss"] for m in lines if "val_loss" in m]


HOLDS, CLIPS = r"holds (\d+) weights, (\d+) moments", r"clips (\d+) gradients of norm (\S+)"


def spied(stdout, pattern):
    """{rank: [(numbers), ...]}: SPY's lines of one kind, in order (one may land before a print's newline)."""
    found = {}
    for rank, *numbers in re.findall(rf"rank (\d) {pattern}$", stdout, re.M):
        found.setdefault(int(rank), []).append(tuple(float(x) for x in numbers))
    return found


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """A real prepare.py corpus (a WordPiece tokenizer beside it, for fill_mask.py and finetune_glue.py), trained
    12 steps by DDP and by --shard: (its folder, the two runs' output)."""
    if hardware.fsdp2() is None:  # torch 2.4-2.5: --shard is refused in one line (test_shard_on_a_torch_without_...)
        pytest.skip(f"--shard needs FSDP2, torch >= 2.6; this is torch {torch.__version__}")
    tmp, ddp, shard = built_once(tmp_path_factory, "shard", build_runs)
    return Path(tmp), ddp, shard


def build_runs(tmp):
    (tmp / "txt").mkdir()
    rng = np.random.default_rng(0)
    words = "the cat sat on the mat and a dog ran in the park with her old friend over there".split()
    for i in range(200):
        (tmp / "txt" / f"{i:03d}.txt").write_text(" ".join(rng.choice(words, size=5)).capitalize() + ". The "
                                                  "capital of france is paris.", encoding="utf-8")
    prepare.main([str(tmp / "txt"), "--vocab_size", "100", "--seq_len", "16", "--no_filter", "--out",
                  str(tmp / "data")])
    ddp = sharded_run(tmp / "data", tmp / "ddp")  # the same flags without --shard: DDP
    shard = sharded_run(tmp / "data", tmp / "shard", "--shard")
    for p in (ddp, shard):
        assert p.returncode == 0, p.stderr[-3000:]
    return [str(tmp), ddp.stdout, shard.stdout]


@pytest.mark.slow
def test_sharded_training_follows_ddp_step_for_step(runs):
    tmp, ddp, shard = runs
    (losses, vals), (losses_s, vals_s) = curve(tmp / "ddp"), curve(tmp / "shard")
    # fp32 either way, and the same gradients (two ranks: a + b, whichever collective); the clip norm sums its squares
    # in another order (per shard, then across ranks), so the clip factor differs in the last bits and the losses by a
    # few ulps (measured <= 4.8e-7 over 12 steps, one ulp at a loss of 4). 1e-5 is 20 times that and a hundred times
    # below what one step changes the loss by. (Longer, hotter runs amplify it: notes.)
    assert sorted(losses) == sorted(losses_s) == list(range(1, 13))
    assert max(abs(losses[s] - losses_s[s]) for s in losses) < 1e-5, (losses, losses_s)
    assert len(vals) == len(vals_s) == 2 and np.allclose(vals, vals_s, rtol=0, atol=1e-5)
    norms, norms_s = spied(ddp, CLIPS), spied(shard, CLIPS)
    whole = [n for _, n in norms[0]]
    assert [n for _, n in norms_s[0]] == [n for _, n in norms_s[1]]  # both ranks clip by the one global norm
    assert np.allclose(whole, [n for _, n in norms_s[0]], rtol=1e-5, atol=0) and min(whole) > 0.1  # all clipped
    assert "batch     4" in shard and "batch     8" in shard  # one micro-batch per rank, then two


def test_each_rank_holds_half_of_the_weights_gradients_and_moments_where_ddp_holds_all(runs):
    _, ddp, shard = runs
    held, held_s = spied(ddp, HOLDS), spied(shard, HOLDS)
    assert held[0] == held[1] and len(held[0]) == 1
    weights, moments = held[0][0]
    assert moments == 2 * weights  # AdamW: two moments per weight
    grads = {rank: {n for n, _ in clips} for rank, clips in spied(ddp, CLIPS).items()}
    grads_s = {rank: {n for n, _ in clips} for rank, clips in spied(shard, CLIPS).items()}
    assert grads == {0: {weights}, 1: {weights}}  # at every step
    for whole, part0, part1 in [(weights, held_s[0][0][0], held_s[1][0][0]), (moments, held_s[0][0][1],
                                held_s[1][0][1]), (weights, *grads_s[0], *grads_s[1])]:
        assert part0 + part1 == whole and abs(part0 - whole / 2) <= 0.01 * whole


def test_a_sharded_checkpoint_is_the_one_file_every_tool_reads(runs, tmp_path):
    tmp, _, _ = runs
    ddp, shard = (torch.load(tmp / name / "ckpt.pt", weights_only=True) for name in ("ddp", "shard"))
    assert ddp["model"].keys() == shard["model"].keys() and shard["model"]["embed.pos_scale"].shape == ()
    for key, value in ddp["model"].items():
        assert shard["model"][key].shape == value.shape and torch.allclose(shard["model"][key], value, atol=1e-5)
    assert shard["optimizer"]["param_groups"] == ddp["optimizer"]["param_groups"]  # parameters by index, as ever
    for i, state in ddp["optimizer"]["state"].items():
        for key, value in state.items():
            assert shard["optimizer"]["state"][i][key].shape == value.shape
            assert torch.allclose(shard["optimizer"]["state"][i][key], value, rtol=1e-3, atol=1e-9)
    [[preds]] = fill_mask.main([str(tmp / "shard" / "ckpt.pt"), "the capital of france is [MASK] ."])
    assert len(preds) == 5 and all(0 <= q <= 1 for _, q in preds)
    write_task(tmp_path / "glue", "RTE")
    table = finetune_glue.main([str(tmp / "shard" / "ckpt.pt"), "--glue_dir", str(tmp_path / "glue"), "--tasks",
                                "rte", "--epochs", "1", "--seeds", "1", "--max_len", "16", "--device", "cpu", "--out",
                                str(tmp_path / "rte")])
    assert list(table) == ["rte"]
    shutil.copytree(tmp / "shard", tmp_path / "alone")  # one process continues it, without --shard
    cram.main(["--data_dir", str(tmp / "data"), "--out_dir", str(tmp_path / "alone"), *SHARD_FLAGS, "--resume",
               "--max_steps", "14"])
    log = (tmp_path / "alone" / "log.txt").read_text(encoding="utf-8")
    assert "resuming at step 12" in log and "done: 14 steps" in log


@pytest.mark.slow
def test_kill_and_resume_of_a_sharded_run_continues_it_bit_for_bit(runs):
    tmp, _, _ = runs
    killed = sharded_run(tmp / "data", tmp / "killed", "--shard", patch=KILL_AFTER_STEP_6)
    assert killed.returncode != 0 and torch.load(tmp / "killed" / "ckpt.pt", weights_only=True)["step"] == 6
    resumed = sharded_run(tmp / "data", tmp / "killed", "--shard", "--resume", patch=LOADS)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming at step 6" in resumed.stdout
    # each rank maps the file (one copy in memory, its pages shared), none reads a whole private copy
    # (a line may still hold both: the other rank's print can land between one's text and its newline, 1 run in 8)
    loads = re.findall(r"rank (\d) loads .*?ckpt\.pt mmap=(True|False)", resumed.stdout)  # (a path may hold spaces)
    assert sorted(loads) == [("0", "True"), ("1", "True")]
    assert curve(tmp / "killed") == curve(tmp / "shard")  # every loss and evaluation, to the last bit
    ends = [torch.load(tmp / name / "ckpt.pt", weights_only=True) for name in ("shard", "killed")]
    assert all(torch.equal(ends[0]["model"][k], v) for k, v in ends[1]["model"].items())


@pytest.mark.slow
def test_resume_with_shard_loads_a_one_device_checkpoint_into_the_shards_unchanged(runs, tmp_path):
    tmp, _, _ = runs  # its data; one process trains 3 steps, then 2 ranks load the file and, at t = 1, save it again
    one = tmp_path / "one"
    cram.main(["--data_dir", str(tmp / "data"), "--out_dir", str(one), *SHARD_FLAGS, "--max_steps", "3"])
    before = torch.load(one / "ckpt.pt", weights_only=True)
    p = sharded_run(tmp / "data", one, "--shard", "--resume", "--max_steps", "3", patch=LEFT_AT_EXIT)
    assert p.returncode == 0, p.stderr[-3000:]
    # they hold gloo's process group in reference cycles: freed at shutdown, its threads found no Python (1 run in 12)
    assert re.findall(r"rank (\d) leaves (\d+) sharded modules", p.stdout) in ([("0", "0"), ("1", "0")],
                                                                           [("1", "0"), ("0", "0")])
    after = torch.load(one / "ckpt.pt", weights_only=True)
    assert after["step"] == 3 and after["model"].keys() == before["model"].keys()
    assert all(torch.equal(after["model"][k], v) for k, v in before["model"].items())
    same_groups = [{**g, "betas": tuple(g["betas"])} for g in after["optimizer"]["param_groups"]]  # DCP: a list
    assert same_groups == before["optimizer"]["param_groups"]
    assert all(torch.equal(after["optimizer"]["state"][i][k], v) for i, s in before["optimizer"]["state"].items()
               for k, v in s.items())
    assert curve(one)[1][-1] == before["val_loss"]  # the sharded evaluation of the same weights, to the last bit


@pytest.mark.slow
def test_a_sharded_resume_refuses_a_file_without_a_weight_of_this_code_as_one_process_does(runs, tmp_path):
    """DCP fills a weight the file lacks with the model's fresh init and goes on; a weight an edited cram.py added."""
    tmp, _, _ = runs
    one = tmp_path / "one"
    cram.main(["--data_dir", str(tmp / "data"), "--out_dir", str(one), *SHARD_FLAGS, "--max_steps", "2"])
    state = torch.load(one / "ckpt.pt", weights_only=True)
    del state["model"]["blocks.0.norm1.bias"]
    torch.save(state, one / "ckpt.pt")
    p = sharded_run(tmp / "data", one, "--shard", "--resume", "--max_steps", "3")
    assert p.returncode == 1 and "holds weights that this code does not build (Missing key(s) in state_dict: " \
        "blocks.0.norm1.bias)" in p.stderr, p.stderr[-3000:]
    assert torch.load(one / "ckpt.pt", weights_only=True)["step"] == 2  # not trained on


@pytest.mark.slow
def test_a_sharded_resume_refuses_adam_moments_of_another_size_in_one_line_as_one_process_does(runs, tmp_path):
    """A review (2026-12-07): DCP took a moment of 3 values for a weight of 3,200 and each rank died at the first step
    with a broadcast's traceback."""
    tmp, _, _ = runs
    one = tmp_path / "one"
    cram.main(["--data_dir", str(tmp / "data"), "--out_dir", str(one), *SHARD_FLAGS, "--max_steps", "2"])
    state = torch.load(one / "ckpt.pt", weights_only=True)
    state["optimizer"]["state"][0]["exp_avg"] = torch.zeros(3)
    torch.save(state, one / "ckpt.pt")
    p = sharded_run(tmp / "data", one, "--shard", "--resume", "--max_steps", "3")
    assert p.returncode == 1 and "is damaged or not a cram.py checkpoint (ValueError: the optimizer's exp_avg of a " \
        "weight" in p.stderr and "Traceback" not in p.stderr.split("cram.py: error")[0], p.stderr[-3000:]
    assert torch.load(one / "ckpt.pt", weights_only=True)["step"] == 2  # not trained on


@pytest.mark.slow
def test_a_file_saved_before_the_first_step_resumes_sharded_as_a_fresh_start(runs, tmp_path, monkeypatch):
    tmp, _, _ = runs
    class Crash(Exception):
        pass
    save_checkpoint = cram.save_checkpoint
    def save_then_crash(path, state):  # the first checkpoint (step 0, no Adam moments yet), then a crash
        save_checkpoint(path, state)
        raise Crash
    monkeypatch.setattr(cram, "save_checkpoint", save_then_crash)
    with pytest.raises(Crash):
        cram.main(["--data_dir", str(tmp / "data"), "--out_dir", str(tmp_path / "zero"), *SHARD_FLAGS])
    assert torch.load(tmp_path / "zero" / "ckpt.pt", weights_only=True)["optimizer"]["state"] == {}
    p = sharded_run(tmp / "data", tmp_path / "zero", "--shard", "--resume", patch="")
    assert p.returncode == 0, p.stderr[-3000:]
    assert curve(tmp_path / "zero") == curve(tmp / "shard")  # DCP's moments of an lr-0 step would count in Adam


@pytest.mark.parametrize("flags, message", [
    (["--offload"], "--offload moves the GPU shards of --shard to CPU memory: it needs --shard and a CUDA device"),
    (["--shard", "--offload"], "--offload moves the GPU shards of --shard to CPU memory: it needs --shard and a CUDA"),
    (["--shard"], "--shard splits the training state over the processes of torchrun: launch `torchrun"),
])
def test_bad_combinations_are_one_line_each_and_write_nothing(flags, message, runs, tmp_path):
    tmp, _, _ = runs
    with pytest.raises(SystemExit) as e:
        cram.main(["--data_dir", str(tmp / "data"), "--out_dir", str(tmp_path / "out"), *SHARD_FLAGS, *flags])
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


def test_evaluation_sends_its_batches_to_the_training_device_not_to_where_the_weights_wait():
    class Offloaded(torch.nn.Module):  # weights elsewhere (here "meta", under --offload CPU memory), compute on CPU
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Module()
            self.embed.tok = torch.nn.Embedding(50, 2, device="meta")

        def forward(self, ids, positions):
            assert ids.device.type == "cpu"
            return torch.zeros(*positions.shape, 50)                                    # (B, k, V)

    val = np.random.default_rng(0).integers(5, 50, size=(4, 16)).astype(np.uint16)
    cfg = cram.Config(micro_batch=2, eval_seqs=4)
    loss, _ = cram.evaluate(Offloaded(), val, cfg, 4, 50, lambda: torch.autocast("cpu", enabled=False),
                            torch.device("cpu"))
    assert loss == pytest.approx(np.log(50))


# ---------------------------------------------------------------------------------------------- bench.py

def test_bench_times_hugging_face_s_bert_in_the_same_precision_as_ours(monkeypatch, capsys):
    import bench
    seen = {}
    class BertForMaskedLM(torch.nn.Module):  # a stand-in for transformers' model: records its precision
        def __init__(self, config):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, input_ids, labels):
            seen["hf"] = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
            return types.SimpleNamespace(loss=self.linear(torch.ones(2, 4)).float().sum())
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(
        BertConfig=lambda **kw: kw, BertForMaskedLM=BertForMaskedLM))
    monkeypatch.setattr(hardware, "amp_dtype", lambda device: torch.bfloat16)  # as on an A100
    encode = cram.CrammedBERT.encode
    def spy(self, *args, **kw):
        seen["ours"] = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
        return encode(self, *args, **kw)
    monkeypatch.setattr(cram.CrammedBERT, "encode", spy)
    bench.main(["--preset", "tiny", "--vocab_size", "512", "--micro_batch", "2", "--steps", "1", "--warmup", "1",
                "--matmul_size", "64", "--device", "cpu", "--hf"])
    assert seen == {"ours": torch.bfloat16, "hf": torch.bfloat16}
    assert "(64^2, bfloat16)" in capsys.readouterr().out


def test_bench_beside_hf_s_bert_takes_half_the_micro_batch_that_fits_and_fp16_times_one_seed(capsys, monkeypatch):
    import bench
    class BertForMaskedLM(torch.nn.Module):  # HF's BERT took 2.1x our memory at 256 (H100): half our pick fits
        def __init__(self, config):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, input_ids, labels):
            return types.SimpleNamespace(loss=self.linear(torch.ones(2, 4)).sum())
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(
        BertConfig=lambda **kw: kw, BertForMaskedLM=BertForMaskedLM))
    monkeypatch.setattr(hardware, "fit_micro_batch", lambda *a, **kw: 8)  # as many as this "GPU" allows
    flags = ["--preset", "tiny", "--vocab_size", "512", "--micro_batch", "0", "--steps", "1", "--warmup", "1",
             "--matmul_size", "64", "--device", "cpu"]
    bench.main(flags)
    assert "micro-batch 8 x 1" in capsys.readouterr().out
    bench.main(flags + ["--hf"])
    assert "micro-batch 4 x 1" in capsys.readouterr().out
    monkeypatch.setattr(hardware, "amp_dtype", lambda device: torch.float16)  # a T4: finetune_glue.py refuses seeds
    bench.main(flags[:-4] + ["--device", "cpu", "--finetune", "5", "--seq_len", "16"])  # as one model there: not timed
    assert "5 seeds as one model: not in fp16" in capsys.readouterr().out


def test_bench_prints_the_memory_arithmetic_of_ddp_and_shard(capsys):
    import bench
    bench.main(["--memory"])
    out = capsys.readouterr().out
    n = 119_589_889  # the paper model (test_cram): 16 bytes a parameter under DDP; --shard on 8: 16/8 + 4 (the whole
    assert f"119.6M parameters | 1 GPU, or DDP on any number: {16 * n / 1e9:.2f} GB" in out  # gradient, accumulating)
    assert f"--shard on 8: 0.06 + 0.54 + 0.12 = {(16 / 8 + 4) * n / 1e9:.2f} GB" in out and "285.3M parameters" in out
    assert "16 GB: DDP 0.81B parameters | --shard on 2 1.08B" in out  # (16 - 3) GB / 16 bytes, / (4 + 16 / 2) bytes


# ---------------------------------------------------------------------------------------------- --offload, --shard

@pytest.mark.parametrize("device, offload, platform, backend", [
    ("cuda", False, "linux", "nccl"), ("cuda", True, "linux", "cpu:gloo,cuda:nccl"), ("cpu", False, "linux", "gloo"),
    ("cuda", True, "win32", "gloo"), ("cuda", False, "win32", "gloo")])
def test_offload_gives_the_process_group_a_cpu_backend_beside_nccl(device, offload, platform, backend, monkeypatch):
    monkeypatch.setattr(sys, "platform", platform)
    assert hardware.dist_backend(torch.device(device), offload) == backend


GROUP = """
import os, sys, torch
torch.distributed.init_process_group(sys.argv[1])
shard = torch.ones(3)  # a gradient shard in CPU memory, as --offload keeps it; clip_grad_norm_ reduces its norm
try:
    torch.distributed.all_reduce(shard)
    print(f"rank {os.environ['RANK']} reduced {shard.tolist()}", flush=True)
except Exception as e:
    print(f"rank {os.environ['RANK']} failed: {' '.join(str(e).split())[:80]}", flush=True)
torch.distributed.destroy_process_group()
"""


@pytest.mark.slow
def test_an_offloaded_run_s_group_reduces_cpu_tensors_which_an_nccl_only_group_cannot(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    script = tmp_path / "group_check.py"
    script.write_text(GROUP, encoding="utf-8")
    def run(backend):  # gloo stands in for NCCL on this CPU, for the same devices ("nccl" alone: CUDA only)
        spec = (backend if ":" in backend else f"cuda:{backend}").replace("nccl", "gloo")
        return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                               "--standalone", str(script), spec], capture_output=True, text=True,
                              timeout=120).stdout
    cuda = torch.device("cuda")
    assert "failed: No backend type associated with device type cpu" in run(hardware.dist_backend(cuda))
    assert run(hardware.dist_backend(cuda, offload=True)).count("reduced [2.0, 2.0, 2.0]") == 2


def test_shard_on_a_torch_without_fsdp2_is_one_line_saying_it_needs_2_6(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.distributed.fsdp", types.ModuleType("torch.distributed.fsdp"))  # 2.5
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda *args, **kw: None)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(SystemExit) as e:
        run_tiny(tmp_path, "--shard", "--max_steps", "2")
    assert "--shard needs torch >= 2.6" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_shard_gathers_weights_in_the_autocast_dtype_on_gpus_and_reduces_gradients_in_fp32(dtype, monkeypatch):
    if hardware.fsdp2() is None:
        pytest.skip(f"--shard needs FSDP2, torch >= 2.6; this is torch {torch.__version__}")
    calls = []
    fully_shard, policy, cpu_offload, no_offload = hardware.fsdp2()
    monkeypatch.setattr(hardware, "fsdp2", lambda: (lambda module, **kw: calls.append(kw), policy, cpu_offload,
                                                     no_offload))
    monkeypatch.setattr(torch.distributed, "init_device_mesh", lambda *args: "mesh")
    monkeypatch.setattr(hardware, "amp_dtype", lambda device: dtype)  # an A100 (bf16), a T4 (fp16)
    model = cram.CrammedBERT(cram.Config(n_layer=2, n_embd=32, n_head=2, ffn_hidden=64), 50, 16)
    hardware.shard_model(model, torch.device("cuda", 0), 2, offload=False)
    assert len(calls) == 3 and all(kw["mesh"] == "mesh" for kw in calls)  # two blocks, then the rest
    for kw in calls:
        p = kw["mp_policy"]
        assert (p.param_dtype, p.reduce_dtype, p.cast_forward_inputs) == (dtype, torch.float32, False)
    monkeypatch.setattr(hardware, "amp_dtype", lambda device: None)  # the CPU: fp32 throughout, as DDP
    assert hardware.shard_policy(torch.device("cpu")).param_dtype is None


# ---------------------------------------------------------------------------------------------- the tests' machine

SIMULATED_GPU = """
import os, sys
import torch
torch.cuda.is_available = lambda: os.environ.get("CUDA_VISIBLE_DEVICES") != ""  # a GPU, unless the environment hides it
sys.path.insert(0, sys.argv[1])
import cram
print(cram.parse_config([]).preset, cram.pick_device("auto").type)
"""


def test_on_a_gpu_machine_a_test_and_each_process_it_starts_still_get_the_cpu_and_the_tiny_preset():
    """conftest.py's pin_the_cpu: the suite answers on a GPU machine as on a CPU. There --device auto is CUDA (bf16)
    and --preset auto the paper's 120M-parameter model, so a test that left them to the machine got other answers,
    slowly (issue 42). In this process torch sees no GPU; in a process a test starts, on a simulated GPU machine
    (its torch sees CUDA unless CUDA_VISIBLE_DEVICES hides it), auto is the tiny preset and not CUDA."""
    assert not torch.cuda.is_available() and torch.cuda.device_count() == 0
    assert cram.parse_config([]).preset == "tiny" and cram.pick_device("auto").type in ("cpu", "mps")
    p = subprocess.run([sys.executable, "-c", SIMULATED_GPU, str(ROOT)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    preset, device = p.stdout.split()
    assert preset == "tiny" and device in ("cpu", "mps")  # Apple's GPU stays as torch reports it


def test_the_auto_preset_follows_the_device_training_runs_on_not_only_what_the_machine_has(monkeypatch):
    """A GPU user's reading, 2026-11-27: `cram.py --device cpu` on a GPU machine trained the 120M paper model on the
    CPU. bench.py passes its --device on."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert [cram.parse_config(a).preset for a in ([], ["--device", "cuda"], ["--device", "auto"], ["--device", "cpu"],
                                                  ["--device", "mps"], ["--device", "cpu", "--preset", "paper"])] == \
        ["paper", "paper", "paper", "tiny", "tiny", "paper"]
    seen = []
    monkeypatch.setattr(cram, "parse_config", lambda argv: seen.append(argv) or sys.exit(0))
    with pytest.raises(SystemExit):
        bench.main(["--device", "cpu"])
    assert seen[0][:4] == ["--preset", "auto", "--device", "cpu"]


def test_a_tool_a_test_starts_without_naming_its_device_and_preset_fails_that_test():
    """conftest.py's pinned_popen: each script a test starts names its device (cram.py and bench.py: its preset too)
    and runs with the GPU hidden, so a reader sees what it runs on, and a test that leaves it to the machine fails
    here, on a CPU, instead of only on a GPU machine (issue 42: fill_mask's pretraining had no --preset,
    finetune_glue.py's bad-input runs no --device)."""
    import conftest
    cram_py, pinned = str(ROOT / "cram.py"), ["--device", "cpu", "--preset", "tiny"]
    assert "cram.py is started without --device and --preset" in conftest.unpinned([sys.executable, cram_py, "--x"])
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", cram_py, "--device", "cpu"]
    assert "cram.py is started without --preset" in conftest.unpinned(torchrun)
    assert "without --device" in conftest.unpinned(f"{sys.executable} {ROOT / 'finetune_glue.py'} out/ckpt.pt")
    assert "shows it the GPU" in conftest.unpinned([sys.executable, cram_py, *pinned], env={"PATH": "/usr/bin"})
    assert conftest.unpinned([sys.executable, cram_py, *pinned], env={**os.environ, "X": "1"}) is None
    assert conftest.unpinned([sys.executable, cram_py, "--help"]) is None and conftest.unpinned(["git", "log"]) is None
    with pytest.raises(pytest.fail.Exception, match="fill_mask.py is started without --device"):
        subprocess.run([sys.executable, str(ROOT / "fill_mask.py"), "out/ckpt.pt", "a [MASK] ."])


def test_a_cuda_test_after_a_cpu_compile_in_its_worker_is_not_told_the_gpu_has_no_triton(monkeypatch, request):
    """The H200, 2026-11-27: a compiled `cuda` test failed with TritonMissing on the worker where a CPU test had
    compiled before it. torch caches its answer to "is there a GPU for Triton?" (torch.utils._triton, asked with the
    GPU hidden), so conftest.py's fixture that gives a `cuda` test the GPU back also makes torch ask again."""
    import conftest
    from torch.utils import _triton
    asks = getattr(_triton, "_device_supports_tma", None) or _triton._device_supports_tensor_descriptor  # 2.14's name
    request.addfinalizer(asks.cache_clear)  # asked below with a simulated GPU
    asks.cache_clear()
    assert not asks()  # asked as a CPU test's compile asks: no GPU, and cached
    monkeypatch.setitem(conftest.REAL, "is_available", lambda: True)  # this machine's torch, as a GPU machine's
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))  # an H100
    monkeypatch.setattr(torch.version, "hip", None)
    conftest.show_the_gpu(monkeypatch)
    assert torch.cuda.is_available() and asks()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the GPU hidden again, as after a `cuda` test
    conftest.forget_what_torch_asked_of_cuda()  # what that fixture does then
    assert not asks()


def test_under_pytest_xdist_each_worker_and_what_it_starts_take_their_share_of_the_cores_not_all_of_them():
    """conftest.py: under `pytest -n N`, N workers times all the cores' threads each made 16 cores run 128 threads."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 0))
    if not workers:
        pytest.skip("not under pytest-xdist: the threads are torch's own choice")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert torch.get_num_threads() == max(1, cores // workers) == int(os.environ["OMP_NUM_THREADS"])
    p = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], capture_output=True,
                       text=True, timeout=120)
    assert int(p.stdout) == max(1, cores // workers), p.stderr[-3000:]


@pytest.mark.slow
def test_under_pytest_xdist_the_slow_tests_start_first_one_or_two_to_a_worker(tmp_path):
    """conftest.py sorts the slow tests first; pytest-xdist hands each worker a run of consecutive tests at the start
    (a quarter of its share), so on 12 workers the first got 13 slow tests in a row and the suite ran past 300 s on
    an H100 (notes, 2026-11-27). Here 6 slow tests among 60 quick ones on 3 workers, with conftest.py as a plugin:
    each worker starts with two of them at most, not five."""
    pytest.importorskip("xdist")
    suite = tmp_path / "test_some.py"
    quick = "".join(f"def test_quick_{i}(): pass\n" for i in range(60))
    suite.write_text("import os, pathlib, pytest\n" + quick + "".join(
        f"@pytest.mark.slow\ndef test_slow_{i}():\n    (pathlib.Path(os.environ['OUT']) / '{i}')"
        f".write_text(os.environ['PYTEST_XDIST_WORKER'], encoding='utf-8')\n" for i in range(6)), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "OUT": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "3", "-p", "conftest", "-p", "no:cacheprovider",
                        str(suite)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert p.returncode == 0 and "66 passed" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
    workers = [(tmp_path / str(i)).read_text(encoding="utf-8") for i in range(6)]
    assert max(workers.count(w) for w in workers) <= 2, workers


@pytest.mark.cuda
def test_a_test_marked_cuda_sees_the_gpu_and_so_do_the_processes_it_starts():
    """The `cuda` marker (conftest.py): skipped without a GPU; with one, the test, and what it starts, see it."""
    assert torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES") != ""
    torch.manual_seed(0)
    model = cram.CrammedBERT(cram.Config(n_layer=1, n_embd=32, n_head=2, ffn_hidden=64), 50, 16).eval()
    ids = torch.randint(5, 50, (2, 16))
    inputs, positions, _ = cram.mask_tokens(ids, 4, 50, 0.25, torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected, got = model(inputs, positions), model.cuda()(inputs.cuda(), positions.cuda())
    assert got.device.type == "cuda" and torch.allclose(got.cpu(), expected, atol=1e-3)
    p = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True,
                       text=True, timeout=120)
    assert p.stdout.strip() == "True", p.stderr[-3000:]
