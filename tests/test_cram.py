"""cram.py as a specification: the architecture, the masking rule, the two schedules, and the training loop."""
import ast
import dataclasses
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import cram  # noqa: E402
import prepare  # noqa: E402
import hardware  # noqa: E402
from cram import Config, CrammedBERT, batch_size_at, lr_at, mask_tokens, sinusoidal_table  # noqa: E402

TINY = dict(n_layer=2, n_embd=32, n_head=2, ffn_hidden=64)
TINY_FLAGS = ["--preset", "tiny", "--n_layer", "2", "--n_embd", "32", "--n_head", "2", "--ffn_hidden", "64",
              "--micro_batch", "4", "--batch_size", "8", "--eval_seqs", "16", "--eval_every", "0.5", "--device", "cpu"]


def write_data(folder, n_train=64, n_val=8, T=32, vocab=64, seed=0):
    """A learnable toy corpus in prepare.py's format: every row repeats one of 8 short random 'sentences'."""
    rng = np.random.default_rng(seed)
    sentences = rng.integers(5, vocab, size=(8, 8))
    def rows(n):
        return np.array([np.resize(sentences[rng.integers(8)], T) for _ in range(n)], dtype=np.uint16)
    folder.mkdir(parents=True, exist_ok=True)
    rows(n_train).tofile(folder / "train.bin")
    rows(n_val).tofile(folder / "val.bin")
    meta = {"version": 1, "tokenizer": "wordpiece", "tokenizer_file": None, "vocab_size": vocab,
            "special_ids": {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}, "dot_id": 5, "seq_len": T,
            "dtype": "uint16", "num_sequences": {"train": n_train, "val": n_val},
            "num_tokens": {"train": n_train * T, "val": n_val * T}}
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def run_cram(*args, check=True, **kw):
    """cram.py as a process, on the CPU with the tiny preset whatever the machine has (args, later, may say else)."""
    p = subprocess.run([sys.executable, str(ROOT / "cram.py"), "--device", "cpu", "--preset", "tiny", *args],
                       capture_output=True, text=True, cwd=ROOT, **kw)
    if check:
        assert p.returncode == 0, p.stderr[-3000:]
    return p


# ---------------------------------------------------------------------------------------------- architecture

def test_paper_model_has_119_6M_parameters_and_94_4M_without_embeddings():
    with torch.device("meta"):
        model = CrammedBERT(Config(), vocab_size=32768, seq_len=128)
    total = sum(p.numel() for p in model.parameters())
    assert round(total / 1e6, 1) == 119.6
    assert round((total - 32768 * 768) / 1e6, 1) == 94.4


def test_linears_in_blocks_have_no_bias_and_decoder_is_tied():
    model = CrammedBERT(Config(**TINY), 50, 16)
    assert all(m.bias is None for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert not any("decoder" in n or "token_type" in n for n, _ in model.named_parameters())
    assert all(m.eps == 1e-12 for m in model.modules() if isinstance(m, torch.nn.LayerNorm))


def test_shapes_of_encoder_and_sparse_head():
    model = CrammedBERT(Config(**TINY), 50, 16)
    ids = torch.randint(0, 50, (3, 16))
    assert model.encode(ids).shape == (3, 16, 32)
    positions = torch.randint(0, 16, (3, 4))
    assert model(ids, positions).shape == (3, 4, 50)


def test_sparse_head_equals_dense_logits_at_the_masked_positions():
    model = CrammedBERT(Config(**TINY), 50, 16)
    ids, positions = torch.randint(0, 50, (2, 16)), torch.tensor([[0, 5, 9], [1, 2, 15]])
    dense = model.encode(ids) @ model.embed.tok.weight.T                      # (B, T, V)
    expected = torch.stack([dense[b, positions[b]] for b in range(2)])
    torch.testing.assert_close(model(ids, positions), expected)


@pytest.mark.parametrize("narrow, local_bias", [(1, 0.0), (2, 0.0), (1, 1.0), (2, 1.0)])
def test_narrow_blocks_compute_only_the_masked_positions_and_that_is_exact(narrow, local_bias):
    torch.manual_seed(0)
    model = CrammedBERT(Config(**{**TINY, "n_layer": 3, "narrow": narrow, "local_bias": local_bias}), 50, 16).eval()
    ids, positions = torch.randint(0, 50, (2, 16)), torch.tensor([[0, 5, 9, 12], [1, 2, 15, 7]])
    dense = model.encode(ids) @ model.embed.tok.weight.T                      # every position, as fine-tuning sees
    torch.testing.assert_close(model(ids, positions), dense.gather(1, positions[..., None].expand(-1, -1, 50)))
    other = ids.clone()
    other[:, 3] = (ids[:, 3] + 1) % 50  # a narrow block's keys and values are the last wide block's, at every position
    assert not torch.allclose(model(other, positions), model(ids, positions))


def test_a_narrow_block_reads_keys_and_values_from_the_last_wide_block():
    torch.manual_seed(0)
    model = CrammedBERT(Config(**{**TINY, "n_layer": 2, "narrow": 1}), 50, 16).eval()
    ids = torch.randint(0, 50, (2, 16))
    wide, narrow = model.blocks
    with torch.no_grad():
        x = wide(model.embed(ids))
        want = model.final_norm(narrow(x, None, x))  # queries and keys from the same states: the same, here
        torch.testing.assert_close(model.encode(ids), want)
        one = model.encode(ids, positions=torch.tensor([[3], [7]]))              # (B, 1, C): one query, all keys
        torch.testing.assert_close(one[:, 0], torch.stack([want[0, 3], want[1, 7]]))


def test_one_narrow_block_is_the_same_function_as_none_its_context_is_its_own_input():
    torch.manual_seed(0)
    wide = CrammedBERT(Config(**{**TINY, "local_bias": 1.0}), 50, 16).eval()
    narrow = CrammedBERT(Config(**{**TINY, "local_bias": 1.0, "narrow": 1}), 50, 16).eval()
    narrow.load_state_dict(wide.state_dict())
    ids, pad = torch.randint(0, 50, (2, 16)), torch.ones(2, 16, dtype=torch.bool)
    pad[1, 12:] = False
    torch.testing.assert_close(narrow.encode(ids, pad), wide.encode(ids, pad))  # fine-tuning sees the same model


def test_narrow_off_is_the_paper_model_and_narrow_blocks_cost_fewer_flops():
    cfg = Config()
    assert cfg.narrow == 0 and cram.parse_config(["--preset", "paper"]).narrow == 0
    with torch.device("meta"):
        model = CrammedBERT(cfg, 32768, 128)
        flops = {n: cram.flops_per_token(model, Config(narrow=n), 128) for n in (0, 8, 12)}
    assert round(flops[0] / 1e6) == 623  # RECIPE.md's count
    assert round(flops[0] / flops[8], 1) == 1.4 and round(flops[0] / flops[12], 1) == 1.7


def test_sdpa_attention_equals_naive_softmax_attention_with_padding_mask():
    torch.manual_seed(0)
    attn = cram.Attention(Config(**TINY)).eval()
    x = torch.randn(2, 7, 32)
    pad = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    q, k, v = attn.qkv(x).view(2, 7, 3, 2, 16).permute(2, 0, 3, 1, 4)
    scores = q @ k.transpose(-1, -2) / math.sqrt(16)
    scores = scores.masked_fill(~pad[:, None, None, :], float("-inf"))
    naive = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 7, 32)
    torch.testing.assert_close(attn(x, pad[:, None, None, :]), attn.out(naive), atol=1e-5, rtol=1e-5)


def test_local_bias_is_minus_slope_times_distance_halved_per_head_last_head_global_and_off_in_the_paper():
    assert CrammedBERT(Config(**TINY), 50, 16).attn_bias is None  # the paper: no bias, flash attention stays on
    four = CrammedBERT(Config(**{**TINY, "n_head": 4}, local_bias=2.0), 50, 16).attn_bias  # slopes 2, 1, 1/2, 0
    assert [four[h, 3, 7].item() for h in range(4)] == [-8.0, -4.0, -2.0, 0.0] and torch.equal(four, four.mT)
    torch.manual_seed(0)
    model = CrammedBERT(Config(**TINY, local_bias=1.0), 50, 16).eval()
    assert model.attn_bias[0, 3, 7].item() == -4.0 and model.attn_bias[1].abs().max() == 0
    ids, pad = torch.randint(5, 50, (2, 6)), torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    seen = {}
    model.blocks[0].attn.register_forward_hook(lambda m, inp, out: seen.update(x=inp[0], mask=inp[1]))
    model.encode(ids, pad)
    attn, x = model.blocks[0].attn, seen["x"]
    q, k, v = attn.qkv(x).view(2, 6, 3, 2, 16).permute(2, 0, 3, 1, 4)
    scores = q @ k.transpose(-1, -2) / math.sqrt(16) + model.attn_bias[:, :6, :6]
    scores = scores.masked_fill(~pad[:, None, None, :], float("-inf"))
    naive = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 6, 32)
    torch.testing.assert_close(attn(x, seen["mask"]), attn.out(naive), atol=1e-5, rtol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as on a GPU: bf16 q and k, a float32 bias
        out = model(ids, torch.tensor([[0, 5], [1, 3]]))
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


def test_sinusoidal_table_follows_the_formula():
    table = sinusoidal_table(128, 768)
    p, i = 37, 100
    assert table[p, 2 * i].item() == pytest.approx(math.sin(p / 10000 ** (2 * i / 768)), abs=1e-5)
    assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(p / 10000 ** (2 * i / 768)), abs=1e-5)


def test_positions_are_scaled_by_one_learnable_scalar_initialised_to_one_over_sqrt_d():
    model = CrammedBERT(Config(**TINY), 50, 16)
    assert model.embed.pos_scale.shape == () and model.embed.pos_scale.requires_grad
    assert model.embed.pos_scale.item() == pytest.approx(1 / math.sqrt(32))


def test_the_tiny_preset_starts_the_position_scalar_at_zero_and_adds_the_local_bias():
    cfg = cram.parse_config(["--preset", "tiny"])
    model = CrammedBERT(cfg, 50, 16)
    assert model.embed.pos_scale.item() == 0.0 and model.embed.pos_scale.requires_grad
    assert cram.parse_config(["--preset", "paper"]).pos_scale_init == 1.0
    assert cfg.local_bias == 1.0 and cfg.n_head == 4 and cram.parse_config(["--preset", "paper"]).local_bias == 0.0


def test_glu_feedforward_gates_one_half_with_gelu_of_the_other():
    ffn = cram.GLUFeedForward(Config(**TINY))
    x = torch.randn(4, 32)
    a, gate = (x @ ffn.up.weight.T).chunk(2, dim=-1)
    torch.testing.assert_close(ffn(x), (F.gelu(gate) * a) @ ffn.down.weight.T)


# ---------------------------------------------------------------------------------------------- masking

def test_under_autocast_the_residual_stream_is_in_the_autocast_dtype_and_without_it_fp32():
    """A bf16 residual stream moves half the bytes of an fp32 one (+7% tokens/s at the paper shape on an H200, notes
    2026-11-26). Without autocast (the CPU, the official function's test) nothing is cast."""
    model, seen = CrammedBERT(Config(n_layer=2, n_embd=32, n_head=2, ffn_hidden=64), 50, 16), []
    model.blocks[1].register_forward_pre_hook(lambda block, inputs: seen.append(inputs[0].dtype))
    ids = torch.randint(0, 50, (2, 16))
    model.encode(ids)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model.encode(ids)
    assert seen == [torch.float32, torch.bfloat16]


def test_masking_picks_exactly_a_quarter_of_each_sequence_split_26_3_3():
    ids = torch.randint(5, 1000, (64, 128))
    inputs, positions, targets = mask_tokens(ids, 4, 1000, 0.25, torch.Generator().manual_seed(0))
    assert positions.shape == targets.shape == (64, 32)
    assert all(len(set(row.tolist())) == 32 for row in positions)             # distinct positions
    assert torch.equal(targets, ids.gather(1, positions))                      # targets are the originals
    slots = inputs.gather(1, positions)
    assert (slots[:, :26] == 4).all()                                          # 80%: [MASK]
    assert torch.equal(slots[:, 29:], targets[:, 29:])                         # 10%: unchanged
    changed = (inputs != ids).sum(1)
    assert (changed <= 29).all() and (changed >= 26).all()                     # nothing else touched


def test_evaluation_reports_the_mask_slots_apart_from_the_easy_kept_ones():
    V = 50

    class Copier(torch.nn.Module):  # predicts, with logit 10, that each predicted slot holds the token it sees
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Module()
            self.embed.tok = torch.nn.Embedding(V, 2)

        def forward(self, ids, positions):
            return 10.0 * F.one_hot(ids.gather(1, positions), V).float()           # (B, k, V)

    val = np.random.default_rng(0).integers(5, V, size=(8, 128)).astype(np.uint16)
    cfg = Config(**{**TINY, "micro_batch": 4, "eval_seqs": 8})
    loss, mask_loss = cram.evaluate(Copier(), val, cfg, 4, V, lambda: torch.autocast("cpu", enabled=False),
                                    torch.device("cpu"))
    wrong = math.log(math.exp(10) + V - 1)  # CE of a confident wrong guess: every [MASK] slot
    assert mask_loss == pytest.approx(wrong, rel=1e-5)
    assert loss < 0.95 * mask_loss  # the 3 kept slots of 32 cost ~0


def test_evaluation_scores_the_same_masks_at_any_micro_batch_so_runs_compare():
    """A GPU picks its own micro-batch, an out-of-memory resume halves it: the validation loss must not move."""
    class ByPosition(torch.nn.Module):  # logits that depend on the slot's position: the loss, on which slots are drawn
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(3 * torch.randn(40, 50, generator=torch.Generator().manual_seed(0)))

        def forward(self, ids, positions):
            return self.table[positions]                                      # (B, k, V)

    model = ByPosition()  # 40 positions: 10 predicted, 1 of them a random token (a draw between the positions)
    val = np.random.default_rng(0).integers(5, 50, size=(40, 40)).astype(np.uint16)
    losses = [cram.evaluate(model, val, Config(**{**TINY, "micro_batch": mb, "eval_seqs": 40}), 4, 50,
                            lambda: torch.autocast("cpu", enabled=False), torch.device("cpu")) for mb in (16, 5, 64)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-6) and losses[0] == pytest.approx(losses[2], rel=1e-6)


def test_masked_positions_are_uniform_over_the_sequence():
    ids = torch.randint(5, 100, (40000, 16))
    _, positions, _ = mask_tokens(ids, 4, 100, 0.25, torch.Generator().manual_seed(1))
    counts = torch.bincount(positions.flatten(), minlength=16).float()
    assert (counts / counts.mean() - 1).abs().max() < 0.05


def test_masking_is_a_pure_function_of_the_generator_seed():
    ids = torch.randint(5, 100, (8, 32))
    a = mask_tokens(ids, 4, 100, 0.25, torch.Generator().manual_seed(7))
    b = mask_tokens(ids, 4, 100, 0.25, torch.Generator().manual_seed(7))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------------------------------------- schedules

def test_the_masking_schedule_falls_in_four_even_steps_and_is_off_in_both_presets():
    cfg = Config(mask_from=0.3, mask_to=0.15)
    rates = [cram.mask_rate_at(t, cfg) for t in (0.0, 0.24, 0.25, 0.5, 0.74, 0.75, 0.99, 1.0)]
    assert rates == pytest.approx([0.30, 0.30, 0.25, 0.20, 0.20, 0.15, 0.15, 0.15])
    for preset in cram.PRESETS:
        cfg = cram.parse_config(["--preset", preset])
        assert all(cram.mask_rate_at(t, cfg) == 0.25 for t in (0.0, 0.5, 1.0))


def test_the_schedules_four_masked_counts_cost_torch_compile_two_graphs():
    compiles = []
    def backend(graph, example_inputs):  # counts what torch.compile compiles; runs the graph as it is
        compiles.append(graph)
        return graph.forward
    torch._dynamo.reset()
    model = torch.compile(CrammedBERT(Config(**TINY), vocab_size=64, seq_len=40), backend=backend)
    cfg, gen = Config(mask_from=0.3, mask_to=0.15), torch.Generator().manual_seed(0)
    for t in (0.0, 0.25, 0.5, 0.75, 0.0):
        model(*mask_tokens(torch.randint(5, 64, (2, 40)), 4, 64, cram.mask_rate_at(t, cfg), gen)).backward()
    torch._dynamo.reset()
    assert len(compiles) == 2  # the first count, then one graph for any count (dynamo's automatic dynamic shapes)


def test_with_a_masking_schedule_training_masks_on_it_and_evaluation_at_mask_rate(tmp_path, monkeypatch):
    counts = []  # (the caller, its masked count): a spy around the real mask_tokens
    def spy(ids, mask_id, vocab_size, rate, generator):
        frame = sys._getframe(1)
        while frame.f_code.co_name.startswith("<"):  # a comprehension's own frame (Python < 3.12): its function's
            frame = frame.f_back
        counts.append((frame.f_code.co_name, round(rate * ids.shape[1])))
        return mask_tokens(ids, mask_id, vocab_size, rate, generator)
    monkeypatch.setattr(cram, "mask_tokens", spy)
    data = write_data(tmp_path / "data", T=40)
    cram.main(["--data_dir", str(data), "--out_dir", str(tmp_path / "out"), "--max_steps", "8", "--mask_from", "0.3",
               "--mask_to", "0.15", *TINY_FLAGS, "--batch_size", "4", "--compile", "false"])
    train = [k for caller, k in counts if caller == "micro_batches"]
    assert train == [12, 12, 10, 10, 8, 8, 6, 6]  # round(40 * rate), rate 0.30, 0.25, 0.20, 0.15: one per 2 steps
    assert {k for caller, k in counts if caller == "evaluate"} == {10}  # mask_rate 0.25: runs compare on it


@pytest.mark.skipif(sys.platform == "win32", reason="a file size limit (RLIMIT_FSIZE) stands in for a full disk")
@pytest.mark.slow
def test_a_full_disk_at_a_checkpoint_is_one_line_and_the_old_checkpoint_and_tokenizer_copy_stay_whole(tmp_path):
    """A resume whose checkpoint write fails (the disk full): one line naming the file, the previous checkpoint and
    the tokenizer beside it as they were (the copy was once rewritten in place, and cut), no .tmp left behind."""
    import resource
    data = write_data(tmp_path / "data")
    meta = json.loads((data / "meta.json").read_text())
    (data / "meta.json").write_text(json.dumps({**meta, "tokenizer_file": "tokenizer.json"}))
    (data / "tokenizer.json").write_text(json.dumps({"pad": "x" * 300_000}))
    out = tmp_path / "out"
    run_cram(*TINY_FLAGS, "--data_dir", str(data), "--out_dir", str(out), "--max_steps", "4")
    whole = lambda: {p.name: p.read_bytes() for p in out.iterdir() if p.suffix in (".pt", ".json")}  # noqa: E731
    limit = min(len(whole()["ckpt.pt"]), len(whole()["tokenizer.json"])) // 2
    for fails_at in ("tokenizer.json", "ckpt.pt"):  # the copy made anew (it differs from the data's), then skipped
        if fails_at == "tokenizer.json":
            (out / "tokenizer.json").write_bytes((data / "tokenizer.json").read_bytes() + b" ")
        else:
            shutil.copyfile(data / "tokenizer.json", out / "tokenizer.json")
        before = whole()
        p = run_cram(*TINY_FLAGS, "--data_dir", str(data), "--out_dir", str(out), "--max_steps", "8", "--resume",
                     check=False, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
        assert re.fullmatch(rf"cram.py: error: \[Errno 27\] File too large: '.*{fails_at}': check the path and the "
                            "disk", p.stderr.strip().splitlines()[-1]), p.stderr[-500:]
        assert whole() == before and not [p.name for p in out.iterdir() if ".tmp" in p.name]


def test_every_eval_every_gets_its_evaluation_though_3_x_0_1_is_above_0_3_in_floats(tmp_path):
    out = tmp_path / "out"
    cram.main(["--data_dir", str(write_data(tmp_path / "data")), "--out_dir", str(out), "--max_steps", "10",
               *TINY_FLAGS, "--eval_every", "0.1", "--compile", "false"])
    evals = [m["step"] for m in map(json.loads, (out / "metrics.jsonl").read_text("utf-8").splitlines())
             if "val_loss" in m]
    assert evals == list(range(1, 11))  # at t = 0.1, 0.2, ..., 0.9 and the end


def test_a_steps_time_includes_its_optimizer_step_the_host_syncs_after_it(tmp_path, monkeypatch):
    """On a GPU, AdamW only queues kernels: a clock read before a sync that follows it would leave its time out."""
    events = []

    class Loss:  # the step's loss; its .item() is the step's one host sync
        def __init__(self, loss):
            self.loss = loss

        def item(self):
            events.append("sync")
            return self.loss.item()
    accumulate, clip_and_step = cram.accumulate, cram.clip_and_step
    monkeypatch.setattr(cram, "accumulate", lambda *a: Loss(accumulate(*a)))
    monkeypatch.setattr(cram, "clip_and_step", lambda *a, **k: (events.append("optimizer"), clip_and_step(*a, **k))[1])
    data = write_data(tmp_path / "data")
    cram.main(["--data_dir", str(data), "--out_dir", str(tmp_path / "out"), "--max_steps", "3", *TINY_FLAGS,
               "--batch_size", "4", "--compile", "false"])
    assert events == ["optimizer", "sync"] * 3


@pytest.mark.parametrize("t, factor", [(0.0, 0.25), (0.5, 0.75), (0.75, 1.0), (0.875, 0.5), (1.0, 0.0)])
def test_lr_is_one_cycle_on_the_budget_fraction(t, factor):
    assert lr_at(t, 1e-3) == pytest.approx(factor * 1e-3)


def test_batch_size_ramps_linearly_in_whole_micro_batches_to_the_target_at_60_percent():
    assert batch_size_at(0.0, 128, 8192) == 128
    assert batch_size_at(0.3, 128, 8192) == round((128 + 0.5 * (8192 - 128)) / 128) * 128
    assert batch_size_at(0.6, 128, 8192) == batch_size_at(0.9, 128, 8192) == 8192
    sizes = [batch_size_at(t / 100, 128, 8192) for t in range(101)]
    assert sizes == sorted(sizes) and all(s % 128 == 0 for s in sizes)


def test_weight_decay_skips_norms_and_the_position_scale():
    model = CrammedBERT(Config(**TINY), 50, 16)
    decay, no_decay = cram.make_optimizer(model, Config(**TINY), torch.device("cpu")).param_groups
    assert no_decay["weight_decay"] == 0 and decay["weight_decay"] == 0.01
    assert any(p is model.embed.pos_scale for p in no_decay["params"])
    assert all(p.dim() == 2 for p in decay["params"])


# ---------------------------------------------------------------------------------------------- training

def test_config_flags_are_typed_and_typos_rejected():
    cfg = cram.parse_config(["--preset", "tiny", "--lr", "3e-3", "--resume"])
    assert cfg.lr == 3e-3 and cfg.resume is True and cfg.n_layer == 2 and cfg.n_embd == 128
    with pytest.raises(SystemExit):
        cram.parse_config(["--learning_rate", "1"])


def test_help_says_what_every_field_means_with_the_paper_default_and_the_tiny_presets_value(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        cram.parse_config(["--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for f in dataclasses.fields(Config):
        assert f"--{f.name}" in text and " ".join(f.metadata["help"].split()) in text, f"--help lacks --{f.name}"
    assert "(default 16, tiny: 2)" in text and "(default 8192, tiny: 64)" in text  # n_layer, batch_size
    assert "(default 0.98)" in text and "--preset auto is tiny here" in text  # beta2: the same in both


def test_a_tiny_run_learns_and_logs_config_then_one_line_per_step(tmp_path):
    data = write_data(tmp_path / "data")
    out = tmp_path / "out"
    run_cram("--data_dir", str(data), "--out_dir", str(out), "--max_steps", "40", "--lr", "1e-2", *TINY_FLAGS)
    log = (out / "log.txt").read_text().splitlines()
    assert log[0].startswith("config: ") and log[1].startswith("run: ")
    assert len(json.loads(log[1][5:])["code"]) == 12  # the hash of the .py files that ran: plot.py's rerun test
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [m["loss"] for m in steps if "loss" in m]
    assert len(losses) == 40 == sum(line.startswith("step ") for line in log)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5
    evals = [m["val_loss"] for m in steps if "val_loss" in m]
    assert evals[-1] < math.log(64) - 0.5


@pytest.mark.slow
def test_same_seed_gives_the_same_loss_curve_bit_for_bit(tmp_path):
    data = write_data(tmp_path / "data")
    curves = []
    for name in ("a", "b"):
        run_cram("--data_dir", str(data), "--out_dir", str(tmp_path / name), "--max_steps", "6", *TINY_FLAGS)
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        curves.append([json.loads(x).get("loss") for x in lines])
    assert curves[0] == curves[1]


@pytest.mark.slow
def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path):
    data = write_data(tmp_path / "data")
    flags = ["--data_dir", str(data), "--max_steps", "12", "--ckpt_every_min", "0", *TINY_FLAGS]
    run_cram(*flags, "--out_dir", str(tmp_path / "straight"))
    proc = subprocess.Popen([sys.executable, str(ROOT / "cram.py"), *flags, "--out_dir", str(tmp_path / "killed")],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    for line in proc.stdout:  # kill -9 in the middle of the run, after a few checkpoints
        if line.startswith("step      5"):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    resumed = run_cram(*flags, "--out_dir", str(tmp_path / "killed"), "--resume")
    assert "resuming at step" in resumed.stdout
    def curve(name):  # step -> loss; the resumed run's lines for a step replace those lost with the kill
        lines = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return {m["step"]: m["loss"] for m in lines if "loss" in m}, [m["val_loss"] for m in lines if "val_loss" in m]
    (losses, vals), (losses_k, vals_k) = curve("straight"), curve("killed")
    assert losses == losses_k and vals[-1] == vals_k[-1]


def test_sigint_saves_a_checkpoint_and_says_how_to_resume(tmp_path):
    data = write_data(tmp_path / "data")
    proc = subprocess.Popen([sys.executable, str(ROOT / "cram.py"), "--data_dir", str(data), "--out_dir",
                             str(tmp_path / "out"), "--max_steps", "100000", *TINY_FLAGS],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    for line in proc.stdout:
        if line.startswith("step      3"):
            proc.send_signal(signal.SIGINT)
            break
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err
    assert "--resume" in out and (tmp_path / "out" / "ckpt.pt").exists()


@pytest.mark.slow
def test_torchrun_with_two_cpu_processes_trains(tmp_path):
    data = write_data(tmp_path / "data")
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                        str(ROOT / "cram.py"), "--data_dir", str(data), "--out_dir",
                        str(tmp_path / "out"), "--max_steps", "4", *TINY_FLAGS], capture_output=True, text=True,
                       cwd=ROOT, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    assert '"world_size": 2' in p.stdout and "done: 4 steps" in p.stdout
    # the batch target is global: one micro-batch per rank at t = 0 makes 2 x 4 sequences
    assert "batch     8" in p.stdout


# ---------------------------------------------------------------------------------------------- bad input

def _error(tmp_path, *args):
    p = run_cram(*args, "--out_dir", str(tmp_path / "out"), check=False)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    return p.stderr


@pytest.mark.slow
def test_bad_inputs_get_one_line_errors(tmp_path):
    data = write_data(tmp_path / "data")
    assert "run `python prepare.py" in _error(tmp_path, "--data_dir", str(tmp_path / "nowhere"))
    assert "budget_hours must be > 0" in _error(tmp_path, "--data_dir", str(data), "--budget_hours", "0")
    assert "micro_batch" in _error(tmp_path, "--data_dir", str(data), "--micro_batch", "64", "--batch_size", "8")
    # on any machine: the tests hide the GPU (conftest.py), from cram.py too
    assert "no CUDA device is visible" in _error(tmp_path, "--data_dir", str(data), "--device", "cuda")
    assert "no checkpoint" in _error(tmp_path, "--data_dir", str(data), "--resume")
    meta = json.loads((data / "meta.json").read_text())  # ids past the vocabulary: an IndexError's traceback before
    (data / "meta.json").write_text(json.dumps({**meta, "vocab_size": 32}))
    assert "holds token id 63, past meta.json's vocab_size 32" in _error(tmp_path, "--data_dir", str(data))
    assert not (tmp_path / "out").exists()
    for edit, shown in [({"seq_len": 20_000}, "seq_len is outside 1..8192"),  # 6.5 GB of attention bias, then a crash
                        ({"vocab_size": 1 << 40}, "vocab_size outside 1..65536")]:  # a traceback
        (data / "meta.json").write_text(json.dumps({**meta, **edit}))
        assert shown in _error(tmp_path, "--data_dir", str(data))
    (data / "meta.json").write_text("[" * 100_000 + "]" * 100_000)  # a RecursionError's traceback
    assert "meta.json is damaged (RecursionError" in _error(tmp_path, "--data_dir", str(data))
    (data / "meta.json").write_text(json.dumps(meta))
    with open(data / "train.bin", "r+b") as f:
        f.truncate(100)
    assert "truncated" in _error(tmp_path, "--data_dir", str(data))


@pytest.mark.parametrize("flags, message", [
    (["--lr", "nan"], "finite"), (["--lr", "-1"], "--lr and --grad_clip must be > 0"),
    (["--grad_clip", "0"], "--grad_clip must be > 0"), (["--mask_rate", "0"], "--mask_rate, --mask_from"),
    (["--mask_rate", "1.5"], "--mask_rate"), (["--mask_from", "1"], "--mask_from and --mask_to must be"),
    (["--mask_to", "0.25"], "--mask_to needs --mask_from"),
    (["--mask_from", "0.3", "--mask_to", "0"], "must be between 0 and 1"), (["--mask_from", "-0.3"], "--mask_from"),
    (["--n_embd", "100", "--n_head", "3"], "split into 3 equal heads"),
    (["--n_embd", "127", "--n_head", "1"], "even (sin/cos pairs)"),
    (["--ffn_hidden", "511"], "--ffn_hidden 511 must be even"),
    (["--beta2", "1"], "--beta2"), (["--weight_decay", "-0.1"], "--weight_decay >= 0"),
    (["--dropout", "1"], "--dropout"), (["--local_bias", "-1"], "--local_bias in [0, 1e4)"),
    (["--local_bias", "1e300"], "--local_bias in [0, 1e4)"), (["--norm_eps", "0"], "--norm_eps in (0, 1)"),
    (["--n_head", "1"], "with >= 2 heads"), (["--narrow", "2"], "--narrow must be in [0, --n_layer 2)"),
    (["--narrow", "-1"], "--narrow must be in"),
    (["--eval_every", "0"], "--eval_every must be > 0"), (["--eval_seqs", "0"], "--eval_seqs >= 1"),
    (["--ramp_until", "2"], "--ramp_until"), (["--max_steps", "-1"], "--max_steps >= 0"),
    (["--budget_hours", "0"], "--budget_hours must be > 0"), (["--compile", "yes"], "--compile must be auto"),
])
def test_config_values_that_would_crash_or_mistrain_are_refused(flags, message):
    for preset in cram.PRESETS:  # the presets themselves pass
        cram.check_config(cram.parse_config(["--preset", preset]))
    with pytest.raises(cram.CramError, match=re.escape(message)):
        cram.check_config(cram.parse_config(["--preset", "tiny", *flags]))


def test_a_damaged_or_foreign_checkpoint_is_a_one_line_error_and_stays_as_it_was(tmp_path):
    data, out = write_data(tmp_path / "data"), tmp_path / "out"
    out.mkdir()
    (out / "ckpt.pt").write_bytes(b"PK\x03\x04 not a whole zip")  # e.g. a copy cut short
    p = run_cram("--data_dir", str(data), "--out_dir", str(out), "--resume", check=False)
    assert p.returncode != 0 and "Traceback" not in p.stderr and "damaged or not a cram.py checkpoint" in p.stderr
    assert (out / "ckpt.pt").read_bytes() == b"PK\x03\x04 not a whole zip"
    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.pt")
    with pytest.raises(cram.CramError, match="not a cram.py checkpoint"):
        cram.load_model(str(tmp_path / "foreign.pt"))


def test_divergence_stops_with_a_clear_message_and_keeps_finite_weights_on_disk(tmp_path):
    data = write_data(tmp_path / "data")
    out = tmp_path / "out"
    p = run_cram("--data_dir", str(data), "--out_dir", str(out), "--max_steps", "20", "--ckpt_every_min", "0",
                 "--lr", "1e30", "--grad_clip", "1e30", *TINY_FLAGS, check=False)
    assert p.returncode == 1 and "training diverged" in p.stderr and "Traceback" not in p.stderr
    state = torch.load(out / "ckpt.pt", weights_only=False)["model"]
    assert all(torch.isfinite(v).all() for v in state.values())


@pytest.mark.slow
def test_resume_refuses_a_checkpoint_from_another_model_or_data(tmp_path):
    data = write_data(tmp_path / "data")
    run_cram("--data_dir", str(data), "--out_dir", str(tmp_path / "out"), "--max_steps", "1", *TINY_FLAGS)
    wider = [f if f != "32" else "64" for f in TINY_FLAGS]  # --n_embd 64 instead of 32
    assert "n_embd=32" in _error(tmp_path, "--data_dir", str(data), "--resume", "--max_steps", "2", *wider)
    other = write_data(tmp_path / "other", n_train=80)
    assert "num_sequences" in _error(tmp_path, "--data_dir", str(other), "--resume", "--max_steps", "2", *TINY_FLAGS)


def test_an_empty_validation_split_is_reported(tmp_path):
    data = write_data(tmp_path / "data", n_val=0)
    assert "val.bin holds no sequences" in _error(tmp_path, "--data_dir", str(data), *TINY_FLAGS)


def test_meta_json_that_disagrees_with_the_bins_is_reported(tmp_path):
    data = write_data(tmp_path / "data")
    meta = json.loads((data / "meta.json").read_text())
    meta["seq_len"] = 64  # the bins hold rows of 32
    (data / "meta.json").write_text(json.dumps(meta))
    assert "re-run prepare.py" in _error(tmp_path, "--data_dir", str(data), *TINY_FLAGS)


def test_a_crash_while_writing_a_checkpoint_leaves_the_previous_one_intact(tmp_path, monkeypatch):
    path = str(tmp_path / "ckpt.pt")
    cram.save_checkpoint(path, {"step": 1})

    def crash(obj, f):  # half a file, then the process "dies"
        f.write(b"partial")
        raise KeyboardInterrupt
    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        cram.save_checkpoint(path, {"step": 2})
    monkeypatch.undo()
    assert torch.load(path, weights_only=False) == {"step": 1}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished 2-step run: its data folder and its out folder (ckpt.pt, log.txt, metrics.jsonl, meta.json)."""
    tmp = tmp_path_factory.mktemp("trained")
    data = write_data(tmp / "data")
    run_cram("--data_dir", str(data), "--out_dir", str(tmp / "out"), "--max_steps", "2", *TINY_FLAGS)
    return data, tmp / "out"


def files_of(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("case", ["not JSON", "random bytes", "no vocab_size", "no val rows", "seq_len a string",
                                  "a special id past the vocabulary", "seq_len below 1"])
def test_a_damaged_meta_json_is_a_one_line_error_before_anything_is_written(case, tmp_path):
    data = write_data(tmp_path / "data")
    meta = json.loads((data / "meta.json").read_text())
    text = {"not JSON": json.dumps(meta)[:60], "random bytes": np.random.default_rng(0).bytes(300),
            "no vocab_size": json.dumps({k: v for k, v in meta.items() if k != "vocab_size"}),
            "no val rows": json.dumps({**meta, "num_sequences": {"train": 64}}),
            "seq_len a string": json.dumps({**meta, "seq_len": "32"}),
            "a special id past the vocabulary": json.dumps({**meta, "special_ids": {**meta["special_ids"],
                                                                                     "mask": 10 ** 9}}),
            "seq_len below 1": json.dumps({**meta, "seq_len": -128})}[case]
    (data / "meta.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SystemExit, match="meta.json is damaged .*: prepare the data again") as e:
        cram.train(cram.parse_config(["--data_dir", str(data), "--out_dir", str(tmp_path / "out"), *TINY_FLAGS]))
    assert len(str(e.value.code).splitlines()) == 1
    assert not (tmp_path / "out").exists()
    if case == "random bytes":  # and from the command line: one line on stderr, no traceback, exit code 1
        assert "cram.py: error:" in _error(tmp_path, "--data_dir", str(data), *TINY_FLAGS)


CKPT_DAMAGE = {  # what a checkpoint can suffer -> a function of the good checkpoint's dict, or of its bytes
    "cut short": lambda raw: raw[: len(raw) // 2],
    "random bytes": lambda raw: np.random.default_rng(0).bytes(len(raw) // 10),
    "not a dict": lambda ckpt: [ckpt],
    "no vocab_size": lambda ckpt: {k: v for k, v in ckpt.items() if k != "vocab_size"},
    "no optimizer": lambda ckpt: {k: v for k, v in ckpt.items() if k != "optimizer"},
    "a config field from elsewhere": lambda ckpt: {**ckpt, "config": {**ckpt["config"], "n_experts": 8}},
    "a config value no flag may take": lambda ckpt: {**ckpt, "config": {**ckpt["config"], "dropout": math.nan}},
    "weights of another shape": lambda ckpt: {**ckpt, "model": {**ckpt["model"],
                                                               "embed.tok.weight": torch.zeros(3, 32)}},
    # crafted (a trial, 2026-12-07): a step with shell lines, appended to log.txt as "resuming at step ..."; Adam
    # moments shorter than their weight, which fused AdamW wrote past (the process died, no message)
    "a step that is text": lambda ckpt: {**ckpt, "step": "4\ntouch /tmp/pwned\n#"},
    "Adam moments of another shape": lambda ckpt: {**ckpt, "optimizer": {**ckpt["optimizer"], "state": {
        **ckpt["optimizer"]["state"], 0: {**ckpt["optimizer"]["state"][0], "exp_avg": torch.zeros(3),
                                          "exp_avg_sq": torch.zeros(3)}}}},
    "Adam moments of one number": lambda ckpt: {**ckpt, "optimizer": {**ckpt["optimizer"], "state": {
        **ckpt["optimizer"]["state"], 0: {**ckpt["optimizer"]["state"][0], "exp_avg": torch.tensor(0.0),
                                          "exp_avg_sq": torch.tensor(0.0)}}}},
    "Adam moments as a list": lambda ckpt: {**ckpt, "optimizer": {**ckpt["optimizer"], "state": {  # a 435-line
        **ckpt["optimizer"]["state"], 0: {**ckpt["optimizer"]["state"][0], "exp_avg": [0.0]}}}},  # traceback
    "a data position past any data": lambda ckpt: {**ckpt, "data_pos": 10**30},  # numpy's IndexError at the 1st step
    "a budget clock of NaN": lambda ckpt: {**ckpt, "train_time": math.nan},  # ran, "nan budget minutes"
    "an endless budget clock": lambda ckpt: {**ckpt, "train_time": math.inf},
    "an optimizer group more than this code's": lambda ckpt: {**ckpt, "optimizer": {  # was dropped, silently (a review)
        **ckpt["optimizer"], "param_groups": [*ckpt["optimizer"]["param_groups"], {
            **ckpt["optimizer"]["param_groups"][1], "params": [999]}]}},
}


@pytest.mark.parametrize("damage", CKPT_DAMAGE)
def test_a_damaged_checkpoint_is_one_line_and_a_failed_resume_touches_nothing(damage, trained, tmp_path):
    data, good = trained
    out = tmp_path / "out"
    shutil.copytree(good, out)
    raw = (good / "ckpt.pt").read_bytes()
    if damage in ("cut short", "random bytes"):
        (out / "ckpt.pt").write_bytes(CKPT_DAMAGE[damage](raw))
    else:
        torch.save(CKPT_DAMAGE[damage](torch.load(good / "ckpt.pt", weights_only=False)), out / "ckpt.pt")
    before = files_of(out)
    needle = "damaged or not a cram.py checkpoint" if damage not in ("weights of another shape", "an optimizer group "
                                                                     "more than this code's") else \
        "holds weights that this code does not build"  # whole, but not what this code builds: as if cram.py changed
    if damage in ("cut short", "random bytes", "not a dict", "no vocab_size", "a config field from elsewhere",
                  "weights of another shape", "a config value no flag may take"):  # finetune_glue.py's way in reads no optimizer state, no step
        with pytest.raises(cram.CramError, match=needle) as e:
            cram.load_model(str(out / "ckpt.pt"))
        assert len(str(e.value).splitlines()) == 1
    if damage in ("no vocab_size", "a config value no flag may take"):  # --resume: meta.json's sizes, its own flags
        return
    with pytest.raises(cram.CramError, match=needle) as e:
        cram.train(cram.parse_config(["--data_dir", str(data), "--out_dir", str(out), "--resume", "--max_steps", "4",
                                      *TINY_FLAGS]))
    assert len(str(e.value).splitlines()) == 1
    assert files_of(out) == before  # no log line appended, no meta.json copied over, the checkpoint as it was


def test_resume_takes_this_runs_optimizer_settings_and_the_files_moments(trained, tmp_path):
    """AdamW's betas, eps and weight decay came from the file, over the flags: a crafted beta of 5 diverged, text or
    one beta was a traceback in the step, and a --weight_decay changed on --resume did nothing, silently."""
    data, good = trained
    out = tmp_path / "out"
    shutil.copytree(good, out)
    ckpt = torch.load(good / "ckpt.pt", weights_only=False)
    for group in ckpt["optimizer"]["param_groups"]:
        group.update(betas=(5.0, "x"), eps=-1.0, weight_decay=7.0)
    torch.save(ckpt, out / "ckpt.pt")
    p = run_cram("--data_dir", str(data), "--out_dir", str(out), "--resume", "--max_steps", "4", *TINY_FLAGS,
                 "--weight_decay", "0.05", check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    after = torch.load(out / "ckpt.pt", weights_only=True)
    assert [(g["betas"], g["eps"], g["weight_decay"]) for g in after["optimizer"]["param_groups"]] == [
        ((0.9, 0.98), 1e-12, 0.05), ((0.9, 0.98), 1e-12, 0.0)]  # the flags' (the decay: matrices only)
    assert math.isfinite(after["val_loss"]) and after["step"] == 4
    model = cram.CrammedBERT(cram.Config(**ckpt["config"]), 64, 32)
    ready = hardware.optimizer_state_for(cram.make_optimizer(model, cram.Config(**ckpt["config"]), torch.device("cpu")),
                                         ckpt["optimizer"])
    assert ready["state"] is ckpt["optimizer"]["state"] and ready["param_groups"][0]["betas"] == (0.9, 0.98)  # moments


def test_no_function_in_cram_py_is_longer_than_a_screen():
    tree = ast.parse((ROOT / "cram.py").read_text(encoding="utf-8"))
    lengths = {node.name: node.end_lineno - node.lineno + 1 for node in ast.walk(tree)
               if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name != "Config"}
    assert max(lengths.values()) <= 100, sorted(lengths.items(), key=lambda kv: -kv[1])[:3]


@pytest.mark.parametrize("name", ["../../victim.txt", "/tmp/x.json", "sub/tokenizer.json", "C:tokenizer.json", ".."])
def test_a_meta_json_naming_a_file_outside_its_folder_is_refused_and_writes_nothing(name, tmp_path):
    data = write_data(tmp_path / "d1" / "data")
    meta = json.loads((data / "meta.json").read_text())
    (data / "meta.json").write_text(json.dumps({**meta, "tokenizer_file": name}))
    (tmp_path / "victim.txt").write_text("the data folder's neighbour")
    (tmp_path / "d2").mkdir()
    (tmp_path / "d2" / "victim.txt").write_text("a user's notes")  # two folders above --out_dir
    p = run_cram("--data_dir", str(data), "--out_dir", str(tmp_path / "d2" / "sub" / "out"), "--max_steps", "1",
                 *TINY_FLAGS, check=False)
    assert p.returncode == 1 and "is not a file name in the folder itself" in p.stderr, p.stderr[-2000:]
    assert len(p.stderr.strip().splitlines()) == 1 and "tokenizer_file" in p.stderr
    assert (tmp_path / "d2" / "victim.txt").read_text() == "a user's notes"
    assert not (tmp_path / "d2" / "sub").exists()


@pytest.mark.parametrize("meta", [{"tokenizer_file": "../../victim.txt"}, {"folder": "/somewhere/else"}])
def test_a_checkpoint_whose_meta_names_a_file_outside_its_folder_is_called_damaged(meta, tmp_path):
    data = write_data(tmp_path / "data")
    run_cram("--data_dir", str(data), "--out_dir", str(tmp_path / "out"), "--max_steps", "1", *TINY_FLAGS)
    path = tmp_path / "out" / "ckpt.pt"
    state = torch.load(path, weights_only=True)
    torch.save({**state, "meta": {**state["meta"], **meta}}, path)
    with pytest.raises(cram.CramError, match="damaged or not a cram.py checkpoint .*outside the checkpoint's folder"):
        cram.load_model(str(path))


@pytest.mark.parametrize("edit, shown", [
    ({"config": {"n_layer": 1000}}, "declares 1000 blocks (its weights: "),  # 100,000 blocks took minutes to build
    ({"config": {"n_layer": 100_000}}, "; at most 1024)"),  # past the cap, however many entries pad the file
    ({"seq_len": 30_000}, "rows of 30000 tokens (at most 8192)"),  # position tables, attention bias: ~25 GB
    ({"config": {"n_head": 4.0}}, "its n_head is 4.0 (float), not int"), ({"config": {"norm_eps": -1.0}}, "--norm_eps"),
    ({"vocab_size": 1 << 40}, "declares a model larger than this machine's memory"),  # one allocation refused
    ({"model": "nan"}, "its weight blocks.0.ffn.up.weight holds NaN or infinity"),  # NaN answers, said nowhere
    ({"model": torch.complex64}, "its weight blocks.0.ffn.up.weight is complex64, not a float of 16 to 64 bits")])
def test_a_checkpoint_that_declares_what_its_weights_cannot_be_or_holds_nan_is_one_line(edit, shown, ckpt, tmp_path):
    """A damaged or crafted file from someone else: a line, not minutes of building, an allocator's words, or a model
    that answers NaN. Its weights are loaded without a random init first (hardware.built_for)."""
    saved = torch.load(ckpt, weights_only=True)
    for key, value in edit.items():
        if key == "model":  # one weight NaN, or of another dtype (complex's NaN passed a check for floats)
            weights = {name: w.clone() for name, w in saved["model"].items()}
            w = weights["blocks.0.ffn.up.weight"]
            weights["blocks.0.ffn.up.weight"] = w.index_fill(1, torch.tensor([0]), math.nan) if value == "nan" else \
                w.to(value)
            saved["model"] = weights
        else:
            saved[key] = {**saved[key], **value} if isinstance(value, dict) else value
    torch.save(saved, tmp_path / "ckpt.pt")
    with pytest.raises(cram.CramError) as e:
        cram.load_model(str(tmp_path / "ckpt.pt"))
    assert shown in str(e.value) and "damaged" in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs, nor /dev/zero, on Windows")
@pytest.mark.parametrize("kind", ["/dev/zero", "a FIFO"])
def test_a_tokenizer_json_that_is_no_plain_file_is_one_line_not_a_read_that_never_ends(kind, ckpt, tmp_path):
    """A link to /dev/zero read until memory ran out, a FIFO waited forever (a trial, 2026-12-07)."""
    from tokenizer import load_tokenizer
    folder = tmp_path / "shared"
    shutil.copytree(ckpt.parent, folder)
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").symlink_to("/dev/zero") if kind == "/dev/zero" else os.mkfifo(folder / "tokenizer.json")
    with pytest.raises(SystemExit, match="not a plain file") as e:
        load_tokenizer(folder, 64)
    assert "\n" not in str(e.value.code)


def test_skip_init_skips_only_parameters_which_the_file_replaces_not_a_buffer_a_learner_draws():
    """A learner's edit may draw a buffer with nn.init (a fixed random projection): no file holds it (not
    persistent), so a skipped draw would leave it as whatever memory held (a review, 2026-12-07)."""
    from hardware import SkipInit

    class Edited(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 64)
            self.register_buffer("proj", torch.nn.init.normal_(torch.full((64, 64), 7.0)), persistent=False)
    with SkipInit():
        edited = Edited()
    assert edited.proj.ne(7.0).all() and 0.5 < edited.proj.std() < 1.5  # drawn
    drawn, real = [], torch.Tensor.uniform_  # nn.Linear's kaiming_uniform_ draws through it
    with pytest.MonkeyPatch.context() as m, SkipInit():
        m.setattr(torch.Tensor, "uniform_", lambda t, *a, **k: drawn.append(t.shape) or real(t, *a, **k))
        Edited()
    assert drawn == []  # the parameters' init: skipped


@pytest.mark.slow
def test_a_resume_from_a_checkpoint_with_a_nan_weight_is_one_line_about_the_weight(tmp_path):
    """It stopped at the first step with "loss is nan: resume with a lower --lr", which would fail the same way."""
    data = write_data(tmp_path / "data")
    run_cram("--data_dir", str(data), "--out_dir", str(tmp_path / "out"), "--max_steps", "1", *TINY_FLAGS)
    saved = torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)
    saved["model"]["final_norm.weight"][0] = math.inf
    torch.save(saved, tmp_path / "out" / "ckpt.pt")
    p = run_cram("--data_dir", str(data), "--out_dir", str(tmp_path / "out"), "--max_steps", "2", "--resume",
                 *TINY_FLAGS, check=False)
    assert p.returncode == 1 and p.stderr.strip().splitlines() == [p.stderr.strip()], p.stderr[-2000:]
    assert "its weight final_norm.weight holds NaN or infinity" in p.stderr, p.stderr


def test_loading_a_checkpoint_draws_no_random_init_for_the_weights_it_replaces(ckpt, monkeypatch):
    """The saved weights replace every parameter: a random init first would only cost time (a 120M model: 1.6 s
    to load, 0.6-0.8 s without, notes) and, for a file that declares huge sizes, gigabytes of memory."""
    drawn, real = [], torch.Tensor.normal_  # what nn.init.normal_ calls to draw
    monkeypatch.setattr(torch.Tensor, "normal_", lambda t, *a, **k: drawn.append(t.shape) or real(t, *a, **k))
    model, _, _ = cram.load_model(str(ckpt))
    assert drawn == [] and torch.equal(model.embed.tok.weight, torch.load(ckpt, weights_only=True)["model"][
        "embed.tok.weight"])


@pytest.mark.parametrize("edit, shown", [("shape", "in the file, [32, 32] in this code"),
                                         ("new weight", 'Unexpected key(s) in state_dict: "embed.pos_emb.weight"')])
@pytest.mark.slow
def test_a_checkpoint_of_edited_model_code_names_the_weight_that_differs_not_a_damaged_file(edit, shown, tmp_path):
    """A learner's tweak to cram.py's model (a wider layer, a new weight) makes an old checkpoint's weights unfit:
    the file is whole, so the line says which weight differs and points at the code, not at the file."""
    data = write_data(tmp_path / "data")
    run_cram("--data_dir", str(data), "--out_dir", str(tmp_path / "out"), "--max_steps", "1", *TINY_FLAGS)
    path = tmp_path / "out" / "ckpt.pt"
    state = torch.load(path, weights_only=True)
    weights, name = dict(state["model"]), "blocks.0.attn.out.weight"
    if edit == "shape":
        weights[name] = torch.cat([weights[name], weights[name]], dim=1)
    else:
        weights["embed.pos_emb.weight"] = torch.zeros(32, 32)
    torch.save({**state, "model": weights}, path)
    with pytest.raises(cram.CramError) as e:
        cram.load_model(str(path))
    message = str(e.value)
    assert "holds weights that this code does not build" in message and shown in message, message
    assert "damaged" not in message and "log.txt names its git commit" in message and "\n" not in message
    resumed = run_cram("--data_dir", str(data), "--out_dir", str(tmp_path / "out"), "--max_steps", "2", "--resume",
                       *TINY_FLAGS, check=False)  # the same line from --resume, and nothing else
    assert resumed.returncode == 1 and resumed.stderr.strip().splitlines() == [f"cram.py: error: {message}"], \
        resumed.stderr[-2000:]


def test_a_resume_by_edited_code_says_so_in_the_log(tmp_path, monkeypatch):
    """An edit that keeps every weight's shape (an activation, a constant) loads silently; the log line says it."""
    data, out = write_data(tmp_path / "data"), tmp_path / "out"
    flags = ["--data_dir", str(data), "--out_dir", str(out), *TINY_FLAGS]
    cram.main([*flags, "--max_steps", "3"])
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)
    saved = dict(ckpt)
    monkeypatch.setattr(sys.modules["__main__"], "__file__", str(ROOT / "bench.py"), raising=False)
    cram.main([*flags, "--max_steps", "4", "--resume"])  # the same code, called by another script there: no note
    assert "resuming at step 3" in (out / "log.txt").read_text(encoding="utf-8")
    assert "by other code" not in (out / "log.txt").read_text(encoding="utf-8")
    torch.save({**saved, "info": {**saved["info"], "code": "0123456789ab"}}, out / "ckpt.pt")  # as if cram.py changed
    cram.main([*flags, "--max_steps", "5", "--resume"])
    line = next(x for x in (out / "log.txt").read_text(encoding="utf-8").splitlines()[::-1] if "resuming" in x)
    assert "resuming at step 3" in line and "(by other code than saved it" in line, line


def test_a_resume_whose_optimizer_groups_this_code_changed_names_the_code_not_a_damaged_file(tmp_path, monkeypatch):
    data, out = write_data(tmp_path / "data"), tmp_path / "out"
    flags = ["--data_dir", str(data), "--out_dir", str(out), *TINY_FLAGS]
    cram.main([*flags, "--max_steps", "2"])
    monkeypatch.setattr(cram, "make_optimizer", lambda model, cfg, device: torch.optim.AdamW(model.parameters()))
    with pytest.raises(cram.CramError, match="holds weights that this code does not build .*parameter group"):
        cram.train(cram.parse_config([*flags, "--max_steps", "3", "--resume"]))  # one group where the file has two


def test_a_checkpoint_whose_training_only_settings_a_newer_code_refuses_still_loads(tmp_path):
    """load_model checks what builds the model (a review, 2026-12-07): --mask_to without --mask_from, refused as a
    flag since e083634, was taken before; such a checkpoint still loads for fill_mask.py and fine-tuning."""
    data = write_data(tmp_path / "data")
    run_cram("--data_dir", str(data), "--out_dir", str(tmp_path / "out"), "--max_steps", "1", *TINY_FLAGS)
    path = tmp_path / "out" / "ckpt.pt"
    state = torch.load(path, weights_only=True)
    torch.save({**state, "config": {**state["config"], "mask_to": 0.3, "eval_every": 0}}, path)
    assert cram.load_model(str(path))[1].mask_to == 0.3


def test_a_link_planted_in_a_shared_folder_is_never_written_through(tmp_path):
    """A run folder from someone else can hold links: ckpt.pt.tmp -> a file of yours (replaced by the checkpoint
    once), log.txt -> ~/.bashrc (lines appended there, a checkpoint's text among them). Neither is followed."""
    import errors
    victim = tmp_path / "victim.sh"
    victim.write_text("a user's shell start-up\n")
    out = tmp_path / "out"
    out.mkdir()
    try:
        (out / "glue.md.tmp").symlink_to(victim)
    except OSError:
        pytest.skip("this file system makes no links")
    with errors.written_whole(out / "glue.md", "w", encoding="utf-8") as f:
        f.write("the table\n")
    assert (out / "glue.md").read_text() == "the table\n" and not (out / "glue.md.tmp").exists()
    (out / "log.txt").symlink_to(victim)
    p = run_cram("--data_dir", str(write_data(tmp_path / "data")), "--out_dir", str(out), "--max_steps", "2",
                 *TINY_FLAGS, check=False)
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1].endswith("remove the link, or use another folder")
    assert len(p.stderr.strip().splitlines()) == 1 and "log.txt is a link to" in p.stderr, p.stderr[-2000:]
    assert victim.read_text() == "a user's shell start-up\n"
    assert sorted(f.name for f in out.iterdir()) == ["glue.md", "log.txt"]  # no meta.json copied in (a trial)


def test_an_id_past_the_vocabulary_anywhere_in_the_data_is_refused_before_training(tmp_path, monkeypatch):
    """load_split checked only the rows unigram_entropy counts (the first 50 M tokens): an id past them stopped
    training with an IndexError whenever a batch reached it (on a GPU: a device-side assert)."""
    data = write_data(tmp_path / "data")
    rows = np.memmap(data / "train.bin", dtype=np.uint16, mode="r+", shape=(64, 32))
    rows[-1, -1] = 64  # the last token of the last row: the vocabulary is 0..63
    rows.flush()
    del rows
    monkeypatch.setattr(prepare, "BASELINE_TOKENS", 32 * 4)  # 4 rows counted for the baseline, as 50 M of billions
    with pytest.raises(cram.CramError, match="train.bin holds token id 64, past meta.json's vocab_size 64"):
        cram.train(cram.parse_config(["--data_dir", str(data), "--out_dir", str(tmp_path / "out"), *TINY_FLAGS]))
    assert not (tmp_path / "out").exists()
