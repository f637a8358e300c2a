"""The GPU paths, tested on a CPU: device decisions are functions of what torch reports (monkeypatched here to a
T4, an A100, an H100), fp16 and bf16 run under CPU autocast, DDP runs as two gloo processes, and checkpoints are
loaded as a GPU run loads them."""
import json
import subprocess
import sys
import types

import pytest
import torch

from test_cram import ROOT, TINY_FLAGS, write_data
import cram  # noqa: E402  (test_cram put the project on sys.path)
import hardware  # noqa: E402


def run_tiny(tmp_path, *flags, out="out"):
    data = tmp_path / "data"
    if not data.exists():
        write_data(data)
    return cram.main(["--data_dir", str(data), "--out_dir", str(tmp_path / out), *TINY_FLAGS, *flags])


# ---------------------------------------------------------------------------------------------- precision

@pytest.mark.parametrize("capability, dtype", [((7, 0), torch.float16), ((7, 5), torch.float16),
                                               ((8, 0), torch.bfloat16), ((8, 9), torch.bfloat16),
                                               ((9, 0), torch.bfloat16)])
def test_bf16_from_ampere_on_and_fp16_before_it_even_where_bf16_is_emulated(capability, dtype, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # what a T4 answers (emulation)
    assert hardware.amp_dtype(torch.device("cuda", 0)) == dtype
    assert hardware.amp_dtype(torch.device("cpu")) is None and hardware.amp_dtype(torch.device("mps")) is None


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
    step, train_time, data_pos, _, micro = cram.resume(str(path), cfg, meta, model, optimizer, scaler)
    assert (step, data_pos, micro) == (3, ckpt["data_pos"], 4) and train_time > 0
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


# ---------------------------------------------------------------------------------------------- DDP (2 x gloo)

def torchrun(tmp_path, port, patch, *flags):
    """cram.main on two gloo processes, after `patch` (Python source, sees `cram`, `rank`, `time`) ran on each."""
    script = tmp_path / "run.py"
    script.write_text(f"import os, sys, time\nsys.path.insert(0, {str(ROOT)!r})\nimport cram\n"
                      f"rank = int(os.environ['RANK'])\n{patch}\ncram.main(sys.argv[1:])\n")
    write_data(tmp_path / "data")
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(port), str(script), "--data_dir", str(tmp_path / "data"), "--out_dir",
                           str(tmp_path / "out"), *TINY_FLAGS, *flags],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


SLOW_EVAL = """
evaluate = cram.evaluate
def slow(*args, **kw):
    time.sleep(2.0)
    return evaluate(*args, **kw)
if rank == 0:
    cram.evaluate = slow
"""


def test_under_ddp_rank_zero_s_evaluation_costs_no_budget(tmp_path):
    # a 3-second budget, evaluated every quarter, each evaluation 2 s: charged to the budget, the first would end it
    p = torchrun(tmp_path, 29531, SLOW_EVAL, "--budget_hours", str(3 / 3600), "--eval_every", "0.25",
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


def test_under_ddp_a_nan_on_one_rank_stops_both_with_one_line(tmp_path):
    p = torchrun(tmp_path, 29532, NAN_ON_RANK_1, "--max_steps", "20")
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
                "--device", "cpu", "--hf"])
    assert seen == {"ours": torch.bfloat16, "hf": torch.bfloat16}
    assert "(4096^2, bfloat16)" in capsys.readouterr().out
