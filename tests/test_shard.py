"""--shard as a specification: ZeRO-3 through FSDP2 on two gloo processes trains as DDP does on the same data and
masks, each rank holding half of the training state, and writes the one checkpoint file every tool reads."""
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from test_cram import ROOT
from test_glue import write_task
import cram  # noqa: E402  (test_cram put the project on sys.path)
import fill_mask  # noqa: E402
import finetune_glue  # noqa: E402
import prepare  # noqa: E402

# One micro-batch of 2 per rank at first, two later (the first of them without a gradient sync); the last block
# narrow, so --narrow composes with --shard and both kinds of block run sharded; a clip that clips every step;
# a checkpoint at every step, as the kill below needs, and before the first (no Adam moments yet: see full_state).
FLAGS = ["--preset", "tiny", "--n_layer", "2", "--n_embd", "32", "--n_head", "2", "--ffn_hidden", "64", "--narrow",
         "1", "--micro_batch", "2", "--batch_size", "8", "--max_steps", "12", "--eval_every", "0.5", "--grad_clip",
         "0.1", "--ckpt_every_min", "0", "--device", "cpu"]

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


def torchrun(data, out, port, *flags, patch=SPY):
    """cram.main with FLAGS on two gloo processes, after `patch` ran on each (it sees cram, rank, torch)."""
    out.mkdir(parents=True, exist_ok=True)
    script = out.parent / f"run_{out.name}.py"
    script.write_text(f"import os, sys\nsys.path.insert(0, {str(ROOT)!r})\nimport torch\nimport cram\n"
                      f"rank = int(os.environ['RANK'])\n{patch}\ncram.main(sys.argv[1:])\n", encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(port), str(script), "--data_dir", str(data), "--out_dir", str(out), *FLAGS, *flags],
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


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A real prepare.py corpus (a WordPiece tokenizer beside it, for fill_mask.py and finetune_glue.py), trained
    12 steps by DDP and by --shard."""
    tmp = tmp_path_factory.mktemp("shard")
    (tmp / "txt").mkdir()
    rng = np.random.default_rng(0)
    words = "the cat sat on the mat and a dog ran in the park with her old friend over there".split()
    for i in range(200):
        (tmp / "txt" / f"{i:03d}.txt").write_text(" ".join(rng.choice(words, size=5)).capitalize() + ". The "
                                                  "capital of france is paris.", encoding="utf-8")
    prepare.main([str(tmp / "txt"), "--vocab_size", "100", "--seq_len", "16", "--no_filter", "--out",
                  str(tmp / "data")])
    ddp, shard = torchrun(tmp / "data", tmp / "ddp", 29541), torchrun(tmp / "data", tmp / "shard", 29542, "--shard")
    for p in (ddp, shard):
        assert p.returncode == 0, p.stderr[-3000:]
    return tmp, ddp.stdout, shard.stdout


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
    cram.main(["--data_dir", str(tmp / "data"), "--out_dir", str(tmp_path / "alone"), *FLAGS, "--resume",
               "--max_steps", "14"])
    log = (tmp_path / "alone" / "log.txt").read_text(encoding="utf-8")
    assert "resuming at step 12" in log and "done: 14 steps" in log


def test_kill_and_resume_of_a_sharded_run_continues_it_bit_for_bit(runs):
    tmp, _, _ = runs
    killed = torchrun(tmp / "data", tmp / "killed", 29543, "--shard", patch=KILL_AFTER_STEP_6)
    assert killed.returncode != 0 and torch.load(tmp / "killed" / "ckpt.pt", weights_only=True)["step"] == 6
    resumed = torchrun(tmp / "data", tmp / "killed", 29544, "--shard", "--resume", patch="")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming at step 6" in resumed.stdout
    assert curve(tmp / "killed") == curve(tmp / "shard")  # every loss and evaluation, to the last bit
    ends = [torch.load(tmp / name / "ckpt.pt", weights_only=True) for name in ("shard", "killed")]
    assert all(torch.equal(ends[0]["model"][k], v) for k, v in ends[1]["model"].items())


def test_resume_with_shard_loads_a_one_device_checkpoint_into_the_shards_unchanged(runs, tmp_path):
    tmp, _, _ = runs  # its data; one process trains 3 steps, then 2 ranks load the file and, at t = 1, save it again
    one = tmp_path / "one"
    cram.main(["--data_dir", str(tmp / "data"), "--out_dir", str(one), *FLAGS, "--max_steps", "3"])
    before = torch.load(one / "ckpt.pt", weights_only=True)
    p = torchrun(tmp / "data", one, 29545, "--shard", "--resume", "--max_steps", "3", patch=LEFT_AT_EXIT)
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
        cram.main(["--data_dir", str(tmp / "data"), "--out_dir", str(tmp_path / "zero"), *FLAGS])
    assert torch.load(tmp_path / "zero" / "ckpt.pt", weights_only=True)["optimizer"]["state"] == {}
    p = torchrun(tmp / "data", tmp_path / "zero", 29546, "--shard", "--resume", patch="")
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
        cram.main(["--data_dir", str(tmp / "data"), "--out_dir", str(tmp_path / "out"), *FLAGS, *flags])
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


def test_bench_prints_the_memory_arithmetic_of_ddp_and_shard(capsys):
    import bench
    bench.main(["--memory"])
    out = capsys.readouterr().out
    n = 119_589_889  # the paper model (test_cram): 16 bytes a parameter under DDP; --shard on 8: 16/8 + 4 (the whole
    assert f"119.6M parameters | 1 GPU, or DDP on any number: {16 * n / 1e9:.2f} GB" in out  # gradient, accumulating)
    assert f"--shard on 8: 0.06 + 0.54 + 0.12 = {(16 / 8 + 4) * n / 1e9:.2f} GB" in out and "285.3M parameters" in out
    assert "16 GB: DDP 0.81B parameters | --shard on 2 1.08B" in out  # (16 - 3) GB / 16 bytes, / (4 + 16 / 2) bytes
