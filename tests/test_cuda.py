"""What only a CUDA GPU can show: a fine-tuning step replayed as CUDA graphs, dropout inside them, fine-tuning and a
short compiled pretraining run in the GPU's precision. Marked `cuda`: they run where torch sees a CUDA GPU and are
skipped elsewhere (tests/conftest.py); the CPU tests pin the device behind every other path. A T4 or V100 (fp16, no
graphs in fine-tuning) runs them too: what needs bf16 is skipped there, with the reason."""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import classifier  # noqa: E402
import cram  # noqa: E402
import finetune_glue as fg  # noqa: E402
from cram import Config, CrammedBERT  # noqa: E402
from hardware import Replay, amp_dtype, use_cuda_graphs  # noqa: E402
from test_cram import write_data  # noqa: E402
from test_glue import seeds_alone_and_as_one  # noqa: E402

pytestmark = pytest.mark.cuda
GPU = torch.device("cuda")


def needs_bf16():  # seeds as one model: bf16 only (finetune_glue.py refuses fp16's one loss scale for all seeds)
    if amp_dtype(GPU) != torch.bfloat16:
        pytest.skip(f"needs bf16 (an Ampere GPU or newer); this GPU computes in {amp_dtype(GPU)}")


def tiny_classifier(dropout=0.0, pool="cls"):
    torch.manual_seed(0)
    cfg = Config(n_layer=2, n_embd=64, n_head=2, ffn_hidden=128, dropout=dropout)
    return classifier.GlueModel(CrammedBERT(cfg, 50, 128), 64, 2, 32, dropout, pool, 3, False).to(GPU)


def test_a_step_replayed_as_a_cuda_graph_trains_as_the_plain_step_does():
    results = []
    for graphed in (False, True):
        model, lr = tiny_classifier(), torch.tensor(1e-3, device=GPU)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True, capturable=True)

        def step(ids, mask, y):
            with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
                loss = F.cross_entropy(model(ids, mask).float(), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            return loss.detach()
        run, gen = Replay(step) if graphed else step, torch.Generator().manual_seed(0)
        for i in range(12):  # two shapes, each coming back, and the lr changing every step
            width = (32, 64, 32)[i % 3]
            ids, y = torch.randint(5, 50, (8, width), generator=gen), torch.randint(0, 2, (8,), generator=gen)
            lr.fill_(1e-3 * (1 - i / 12))
            loss = run(ids.to(GPU), torch.ones(8, width, dtype=torch.bool, device=GPU), y.to(GPU))
        results.append((loss.item(), [p.detach().clone() for p in model.parameters()]))
    assert len(run.graphs) == 2  # each shape recorded once, the rest replays
    (plain_loss, plain), (graph_loss, graphed) = results
    assert graph_loss == pytest.approx(plain_loss, rel=1e-3)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(plain, graphed))


def test_dropout_draws_new_numbers_at_every_replay():
    run, x = Replay(lambda x: F.dropout(x, 0.5).clone()), torch.ones(4096, device=GPU)
    outs = [run(x).clone() for _ in range(4)]  # as it is, once more and recorded, replayed, replayed
    assert len(run.graphs) == 1 and not torch.equal(outs[2], outs[3]) and not torch.equal(outs[1], outs[2])


@pytest.mark.parametrize("seeds", [1, 2])  # the default (one after another), and two seeds as one model
def test_fine_tuning_on_cuda_replays_graphs_learns_and_reports_its_pace(seeds, monkeypatch):
    if seeds > 1:
        needs_bf16()
    made = []

    class Counted(Replay):
        def __init__(self, step):
            super().__init__(step)
            made.append(self)
    monkeypatch.setattr(fg, "Replay", Counted)
    rng = np.random.default_rng(0)
    seqs = [[2] + rng.integers(5, 50, size=rng.integers(3, 60)).tolist() + [3] for _ in range(1600)]
    labels = np.array([int(7 in s) for s in seqs])  # does the word 7 occur: about half of them
    models, paces = [tiny_classifier(0.1, "mean") for _ in range(seeds)], []  # dropout 0.1, as fine-tuning has
    args = argparse.Namespace(**{**fg.TINY, "epochs": 6, "batch_size": 16}, pad_id=0)  # 600 steps
    losses = fg.finetune(models, seqs, labels, args, list(range(seeds)), GPU, "", lambda *p: paces.append(p))
    for model in models:
        accuracy = (classifier.decide(classifier.predict(model.to(GPU), seqs, args, GPU)) == labels).mean()
        assert accuracy > 0.8
    assert len(losses) == seeds == len(set(losses)) and len(paces) == 1 and 0 < paces[0][0] < 1 < 1e3 * paces[0][1]
    if use_cuda_graphs(GPU):  # bf16; fp16 GPUs (T4, V100) take the plain step
        assert made and 1 <= len(made[0].graphs) <= 2  # widths 32 and 64: a graph each


def test_a_short_compiled_pretraining_run_in_the_gpu_s_precision_learns(tmp_path):
    data, out = write_data(tmp_path / "data"), tmp_path / "out"
    cram.main(["--preset", "tiny", "--device", "cuda", "--data_dir", str(data), "--out_dir", str(out),
               "--n_layer", "2", "--n_embd", "64", "--n_head", "2", "--ffn_hidden", "128", "--micro_batch", "8",
               "--batch_size", "16", "--max_steps", "60", "--eval_seqs", "8"])
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    losses = [m["loss"] for m in metrics if "loss" in m]
    assert len(losses) == 60 and np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5
    assert f'"amp": "{amp_dtype(GPU)}"' in (out / "log.txt").read_text(encoding="utf-8")  # bf16 from Ampere on


def test_seeds_trained_as_one_model_in_graphs_learn_what_each_learns_alone():
    """The CPU's test (test_glue.py) on the GPU: vmap's kernels in bf16, in CUDA graphs (Replay); 200 rows in batches
    of 16, so the graphs are recorded and replayed."""
    needs_bf16()
    init, (losses, alone), (losses_as_one, as_one) = seeds_alone_and_as_one(GPU, n_rows=200, batch_size=16)
    assert losses_as_one == pytest.approx(losses, rel=0.1)
    for start, a, b in zip(init, alone, as_one):  # bf16 rounds the two ways apart: far less than training moved them
        moved, apart = (sum(((x[k] - y[k]).float() ** 2).sum() for k in x) ** 0.5 for x, y in ((a, start), (a, b)))
        assert apart < 0.2 * moved  # a seed trained in another seed's batch order: 0.33 (on the CPU, 2026-11-26)
