"""Cramming: pretrain a BERT on one GPU in one day (Geiping & Goldstein, 2023), in one file.

Launch lines (run prepare.py first, it writes data/):
    python cram.py --preset tiny                          # CPU: a 2 x 128 BERT that learns in 5 minutes
    python cram.py --preset paper --budget_hours 24       # the paper: 16 layers, 24 h on one GPU
    python cram.py --preset paper --resume                # continue out/ckpt.pt where it stopped
    torchrun --nproc_per_node 8 cram.py --preset paper    # 8 GPUs, one global batch target; --shard: ZeRO-3
    python cram.py --help                                 # every field of Config, with its default

The architecture (paper section 4.2, the final "crammed BERT"):
- pre-LN transformer blocks, LayerNorm eps 1e-12, one more LayerNorm after the last block
- no bias in any Linear inside the blocks; fused QKV projection; F.scaled_dot_product_attention (flash)
- gated-GELU feed-forward: Linear d -> 4d, split into (x, gate), GELU(gate) * x, Linear 2d -> d
- positions: a fixed sin/cos table times ONE learnable scalar (init 1/sqrt(d); tiny: 0); no token-type embedding
- embedding LayerNorm; decoder tied to the token embedding, no decoder bias, no head transform
- sparse prediction: the vocabulary projection runs only on the masked positions; dropout off (on for fine-tuning)
- the loss inside the compiled model; bf16 autocast and residual stream from Ampere on, older GPUs fp16 + GradScaler
- tiny CPU preset only: a fixed local attention bias -slope*|i - j| (ALiBi, Press et al. 2022); docs/notes.md
The recipe (section 4.3, with the reference code's final values: docs/recipe.md): MLM at 25% (80/10/10), AdamW,
lr(t) = peak * min(0.25 + t, 4(1 - t)) with t the fraction of the time budget used, batch size ramped linearly to
8192 sequences at t = 0.6 by gradient accumulation, gradient clipping 0.5, stop when the budget is spent.
"""
import argparse
import filecmp
import functools
import gc
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, fields

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from errors import CramError, appended, is_file_name, not_readable, plain_numbers, same_kinds, written_whole
from hardware import amp_dtype, autocast, device_peak_flops, pick_device, run_info, wants_compile
from hardware import built_for, finite, out_of_memory, safe_console, safe_globals, stop_on_signals  # files; stops
from hardware import fit_micro_batch, optimizer_state_for, shard_model, start_processes  # the GPU's micro-batch
from prepare import load_split, unigram_entropy  # data/: packed uint16 sequences, and its baseline


# ----------------------------------------------------------------------------------------------------------------
# Config: one flat dataclass; the command line is generated from its fields, presets are dicts of overrides.

def arg(default, meaning):  # a Config field: its default (the paper's) and what it means, for --help
    return field(default=default, metadata={"help": meaning})


# Defaults: the paper's recipe. A --preset replaces some (to change tiny's, edit PRESETS below), a flag any one.
@dataclass
class Config:
    preset: str = arg("auto", "paper, tiny, or auto: paper on CUDA, tiny elsewhere")
    data_dir: str = arg("data", "folder written by prepare.py: train.bin, val.bin, meta.json")
    out_dir: str = arg("out", "checkpoint, log.txt and metrics.jsonl go here")
    # model (paper's final architecture)
    n_layer: int = arg(16, "transformer blocks")
    n_embd: int = arg(768, "hidden width d")
    n_head: int = arg(12, "attention heads (head dim = n_embd / n_head = 64)")
    ffn_hidden: int = arg(3072, "first FFN Linear output; halved by the GLU gate, so 1536 -> d")
    pos_scale_init: float = arg(1.0, "the position scalar starts at this x 1/sqrt(n_embd) (tiny: 0, notes)")
    local_bias: float = arg(0.0, "> 0: attention bias -slope*|i-j|, slopes local_bias/2^h, last head 0")
    narrow: int = arg(0, "NarrowBERT: the last N blocks compute only the positions whose output is needed")
    norm_eps: float = arg(1e-12, "LayerNorm epsilon")
    dropout: float = arg(0.0, "off during pretraining (the paper); finetune_glue.py turns it on")
    # objective
    mask_rate: float = arg(0.25, "fraction of each sequence that is predicted (exactly round(rate * T)); evaluation's")
    mask_from: float = arg(0.0, "> 0: training's rate falls from this to mask_to in 4 even steps (Ankner et al. 2023)")
    mask_to: float = arg(0.15, "the last step of --mask_from's schedule; evaluation keeps --mask_rate")
    # optimization ("bert-o4")
    lr: float = arg(1e-3, "peak learning rate")
    beta1: float = arg(0.9, "AdamW's first-moment decay")
    beta2: float = arg(0.98, "AdamW's second-moment decay")
    adam_eps: float = arg(1e-12, "AdamW's epsilon")
    weight_decay: float = arg(0.01, "not applied to LayerNorm parameters, biases and the position scale")
    grad_clip: float = arg(0.5, "global L2 norm")
    batch_size: int = arg(8192, "target sequences per optimizer step, reached at t = ramp_until")
    micro_batch: int = arg(0, "sequences per forward/backward on a device; 0: as many as the GPU allows, off CUDA 128")
    ramp_until: float = arg(0.6, "fraction of the budget where the batch size reaches batch_size")
    budget_hours: float = arg(24.0, "wall-clock training budget (evaluation and checkpoints are not counted)")
    max_steps: int = arg(0, "> 0: progress t = step / max_steps instead of time (reproducible runs, tests)")
    # evaluation, checkpoints, logs
    eval_every: float = arg(0.1, "validate every this fraction of the budget, and at the end")
    eval_seqs: int = arg(1024, "validation sequences per evaluation (fixed masking seed)")
    ckpt_every_min: float = arg(30.0, "checkpoint every this many budget minutes, and at the end")
    resume: bool = arg(False, "continue from out_dir/ckpt.pt (the same model and data; optimizer flags: this run's)")
    # system
    device: str = arg("auto", "auto, cuda, cpu or mps")
    compile: str = arg("auto", "torch.compile: auto (on for CUDA where torch can, not on Windows), true, false")
    shard: bool = arg(False, "under torchrun: FSDP2 (ZeRO-3) splits weights, gradients, Adam moments over ranks")
    offload: bool = arg(False, "with --shard on GPUs: the shards live in CPU memory (ZeRO-Offload), slower steps")
    seed: int = arg(0, "weights at init and training's masks (of seed, step, --micro_batch and process count)")


PRESETS = {
    "paper": {},  # the defaults above are the paper's recipe
    # Learns in 5 minutes on 2 CPU cores (notes): ~6M tokens, small steps, 10x the lr and weight decay, local bias.
    "tiny": dict(n_layer=2, n_embd=128, n_head=4, ffn_hidden=512, pos_scale_init=0.0, local_bias=1.0,
                 micro_batch=16, batch_size=64, lr=1e-2, weight_decay=0.1, budget_hours=5 / 60, eval_every=0.25,
                 eval_seqs=512, ckpt_every_min=1.0),
}


def parse_config(argv=None):
    """Flags from Config's fields (types coerced, typos rejected); precedence: defaults < preset < flags."""
    auto = "paper" if torch.cuda.is_available() else "tiny"  # where training runs on CUDA (--device cpu: tiny)
    p = argparse.ArgumentParser(allow_abbrev=False, description="Pretrain a crammed BERT under a wall-clock budget. "
                                f"Defaults: the paper preset's, tiny's beside them; --preset auto is {auto} here.")
    for f in fields(Config):
        kind = dict(action=argparse.BooleanOptionalAction) if f.type is bool else dict(type=f.type)
        tiny = f", tiny: {round(PRESETS['tiny'][f.name], 4)}" if f.name in PRESETS["tiny"] else ""
        p.add_argument(f"--{f.name}", **kind, default=argparse.SUPPRESS,
                       help=f"{f.metadata['help']} (default {f.default}{tiny})".replace("%", "%%"))
    given = vars(p.parse_args(argv))
    auto = auto if given.get("device", "auto") in ("auto", "cuda") else "tiny"
    preset = auto if given.get("preset", "auto") == "auto" else given["preset"]
    if preset not in PRESETS:
        p.error(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    return Config(**{**PRESETS[preset], **given, "preset": preset})


# ----------------------------------------------------------------------------------------------------------------
# Data: prepare.py's packed sequences (prepare.load_split), in stored order (the "." curriculum); masking.

def get_batch(data, start, count, device):
    """Rows start .. start+count of the stored order, wrapping around at the end, as int64 on `device`."""
    idx = np.arange(start, start + count) % len(data)
    x = torch.from_numpy(data[idx].astype(np.int64))
    return x.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else x.to(device)


def mask_tokens(ids, mask_id, vocab_size, rate, generator):
    """BERT masking with a fixed count: exactly k = round(rate * T) positions of every sequence are predicted.

    Of the k slots (uniformly random positions), the first 80% become [MASK], the next 10% a random token and
    the rest keep their token (recipe: 25% rate, so 32 of 128 -> 26 / 3 / 3). A fixed k keeps every shape static.
    Returns (inputs (B, T), positions (B, k), targets (B, k))."""
    B, T = ids.shape
    k = round(rate * T)
    n_mask, n_rand = round(0.8 * k), round(0.1 * k)
    scores = torch.rand(B, T, generator=generator, device=ids.device)
    positions = scores.topk(k, dim=1).indices  # (B, k) uniform, in random-score order: its first 80% are random too
    targets = ids.gather(1, positions)                                            # (B, k)
    random_ids = torch.randint(0, vocab_size, (B, n_rand), generator=generator, device=ids.device)
    slot_values = torch.cat([torch.full((B, n_mask), mask_id, device=ids.device, dtype=ids.dtype),
                             random_ids.to(ids.dtype), targets[:, n_mask + n_rand:]], dim=1)
    inputs = ids.scatter(1, positions, slot_values)
    return inputs, positions, targets


def mask_rate_at(t, cfg, steps=4):
    """Training's rate at budget fraction t: mask_rate, or with --mask_from a staircase of `steps` even levels from
    mask_from to mask_to (Ankner et al. 2023 fall linearly, 30% to 15%): 4 masked counts, 2 compiles (the 2nd: any)."""
    level = min(int(t * steps), steps - 1) / (steps - 1)                          # 0, 1/3, 2/3, 1
    return cfg.mask_from + level * (cfg.mask_to - cfg.mask_from) if cfg.mask_from > 0 else cfg.mask_rate


# ----------------------------------------------------------------------------------------------------------------
# Model: the crammed BERT.

def sinusoidal_table(T, C):
    """The fixed position table of "Attention is all you need": sin at even, cos at odd channels, base 10000."""
    pos = torch.arange(T, dtype=torch.float32)[:, None]                           # (T, 1)
    freq = torch.pow(10000.0, -torch.arange(0, C, 2, dtype=torch.float32) / C)     # (C/2,)
    table = torch.zeros(T, C)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table


class Embeddings(nn.Module):
    """Token embedding + scaled sinusoidal positions, then LayerNorm and dropout (no token-type embedding)."""

    def __init__(self, cfg, vocab_size, seq_len):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, cfg.n_embd)
        self.register_buffer("pos_table", sinusoidal_table(seq_len, cfg.n_embd), persistent=False)
        self.pos_scale = nn.Parameter(torch.tensor(cfg.pos_scale_init / math.sqrt(cfg.n_embd)))  # one learned scalar
        self.norm = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, ids):                                                        # ids (B, T)
        x = self.tok(ids) + self.pos_scale * self.pos_table[: ids.shape[1]]        # (B, T, C)
        return self.drop(self.norm(x))


class Attention(nn.Module):
    """Bias-free multi-head self-attention, one fused QKV matmul, flash attention through SDPA."""

    def __init__(self, cfg):
        super().__init__()
        self.n_head, self.dropout = cfg.n_head, cfg.dropout
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.out = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x, attn_mask=None):                                          # x (B, T, C)
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)  # (B, H, T, D)
        return self.attend(q, k, v, attn_mask)

    def attend(self, q, k, v, attn_mask):                                  # q (B, H, T, D), k v (B, H, S, D)
        if attn_mask is not None and attn_mask.is_floating_point():  # a float bias must match q (bf16 in autocast)
            attn_mask = attn_mask.to(q.dtype)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).flatten(2))                              # (B, T, C)


class GLUFeedForward(nn.Module):
    """Gated GELU: Linear d -> ffn_hidden, split in (x, gate), GELU(gate) * x, Linear ffn_hidden/2 -> d."""

    def __init__(self, cfg):
        super().__init__()
        self.up = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)
        self.down = nn.Linear(cfg.ffn_hidden // 2, cfg.n_embd, bias=False)

    def forward(self, x):                                                          # x (B, T, C)
        x, gate = [F.linear(x, w) for w in self.up.weight.chunk(2)]  # = up(x).chunk(2), 2 matmuls: +7% on a GPU (notes)
        return self.down(F.gelu(gate) * x)


class Block(nn.Module):
    """Pre-LN: x + Attn(LN(x)), then x + FFN(LN(x))."""

    def __init__(self, cfg):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)
        self.attn = Attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)
        self.ffn = GLUFeedForward(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, attn_mask=None):
        x = x + self.drop(self.attn(self.norm1(x), attn_mask))
        return x + self.drop(self.ffn(self.norm2(x)))


class CrammedBERT(nn.Module):
    def __init__(self, cfg, vocab_size, seq_len):
        super().__init__()
        self.embed = Embeddings(cfg, vocab_size, seq_len)
        self.wide, self.narrow = cfg.n_layer - cfg.narrow, cfg.narrow  # narrow: 0 in the paper (NarrowBlock)
        self.blocks = nn.ModuleList([*(Block(cfg) for _ in range(self.wide)),
                                     *(NarrowBlock(cfg) for _ in range(self.narrow))])
        self.final_norm = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)
        distance = (torch.arange(seq_len)[:, None] - torch.arange(seq_len)[None, :]).abs()         # (T, T)
        slopes = cfg.local_bias / 2.0 ** torch.arange(cfg.n_head)                                  # (H,)
        slopes[-1] = 0.0  # the last head sees the whole row: [CLS] must, to classify a sentence (notes)
        bias = -slopes[:, None, None] * distance if cfg.local_bias > 0 else None                  # (H, T, T)
        self.register_buffer("attn_bias", bias, persistent=False)
        for m in self.modules():  # every Linear and Embedding N(0, 0.02); LayerNorms keep weight 1, bias 0
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def encode(self, ids, pad_mask=None, positions=None):
        """Hidden states (B, T, C), or (B, k, C) at positions (B, k); pad_mask (B, T): True on real tokens."""
        attn_mask = None if pad_mask is None else pad_mask[:, None, None, :]         # (B, 1, 1, T) keys
        if self.attn_bias is not None:  # the local bias, with padded keys at -inf; 4-D: the CPU's flash kernel takes it
            bias = self.attn_bias[None, :, :ids.shape[1], :ids.shape[1]]               # (1, H, T, T)
            attn_mask = bias if attn_mask is None else bias.masked_fill(~attn_mask, float("-inf"))
        x = self.embed(ids)                                                           # (B, T, C)
        if torch.is_autocast_enabled(x.device.type):  # the residual stream in bf16 (fp16 pre-Ampere): +7% on a GPU
            x = x.to(torch.get_autocast_dtype(x.device.type))
        for block in self.blocks[:self.wide]:
            x = block(x, attn_mask)
        if self.narrow:  # NarrowBERT (--narrow, off in the paper): see narrow_blocks below
            return self.final_norm(narrow_blocks(self.blocks[self.wide:], x, attn_mask, positions))
        if positions is not None:
            x = x.gather(1, positions[..., None].expand(-1, -1, x.shape[-1]))                 # (B, k, C)
        return self.final_norm(x)

    def forward(self, ids, positions, targets=None):
        """Sparse MLM logits (B, k, V): the tied decoder runs only at the masked positions (B, k). With targets
        (B, k) their mean cross-entropy, computed in the compiled model: the logits never go to fp32 outside it."""
        h = self.encode(ids, positions=positions)                                      # (B, k, C)
        logits = h @ self.embed.tok.weight.T                                           # (B, k, V)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))


# NarrowBERT (Li et al. 2023), opt-in (--narrow N): the last N blocks compute only the rows whose output is
# needed, their keys and values every row of the last wide block's output. No narrow block reads another row's
# narrow state: skipping the other rows is exact, and fine-tuning (every row) sees the model pretraining trained.

class NarrowBlock(Block):
    """A Block (the same parameters) with queries from x (B, k, C), keys and values from context (B, T, C)."""

    def forward(self, x, attn_mask=None, context=None):
        (B, k, C), H, w = x.shape, self.attn.n_head, self.attn.qkv.weight  # the fused weight, split: q | k, v
        kv = self.norm1(x if context is None else context)
        q = F.linear(self.norm1(x), w[:C]).view(B, k, H, C // H).transpose(1, 2)                # (B, H, k, D)
        key, value = F.linear(kv, w[C:]).view(B, -1, 2, H, C // H).permute(2, 0, 3, 1, 4)      # (B, H, S, D)
        x = x + self.drop(self.attn.attend(q, key, value, attn_mask))
        return x + self.drop(self.ffn(self.norm2(x)))


def narrow_blocks(blocks, context, attn_mask, positions):
    """The narrow blocks on the rows at positions (B, k) (None: every row), attending to context (B, T, C)."""
    x = context
    if positions is not None:
        x = torch.take_along_dim(context, positions[..., None], dim=1)                # (B, k, C)
        if attn_mask is not None and attn_mask.shape[-2] > 1:  # the local bias: the rows of these queries
            m = attn_mask.expand(len(x), *attn_mask.shape[-3:])                        # (B, H, T, T)
            attn_mask = m.gather(2, positions[:, None, :, None].expand(-1, m.shape[1], -1, m.shape[3]))
    for block in blocks:
        x = block(x, attn_mask, context)
    return x


def flops_per_token(model, cfg, seq_len):
    """docs/recipe.md: 6 * non-embedding params + attention 12*L*d*T + sparse head 6*d*V*mask_rate (fwd + bwd). A narrow
    block runs its key/value weights (2 d^2) at every position, the rest and its attention at mask_rate of them."""
    vocab, d = model.embed.tok.weight.shape
    n_nonembed = sum(p.numel() for p in model.parameters()) - vocab * d
    per_block = 6 * (sum(p.numel() for p in model.blocks[0].parameters()) - 2 * d * d) + 12 * d * seq_len
    return (6 * n_nonembed + 12 * cfg.n_layer * d * seq_len + 6 * d * vocab * cfg.mask_rate
            - cfg.narrow * (1 - cfg.mask_rate) * per_block)


# ----------------------------------------------------------------------------------------------------------------
# Optimizer, the two schedules, checkpoints.

def make_optimizer(model, cfg, device):
    """AdamW; weight decay only on matrices (Linear and embedding weights), not on norms or the position scale."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused: one kernel for all parameters instead of a Python loop over them (+7% tokens/s on the tiny CPU preset)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.adam_eps,
                             fused=device.type in ("cuda", "cpu"))


def lr_at(t, peak):
    """Paper's one-cycle on budget fraction t: 0.25*peak at t=0, peak at t=0.75, 0 at t=1."""
    return peak * max(0.0, min(0.25 + t, 4.0 * (1.0 - t)))


def batch_size_at(t, unit, target, ramp_until=0.6):
    """Sequences per step: linear in t from one unit (micro-batch x GPUs) to target at ramp_until, in units, rounded."""
    frac = min(max(t, 0.0) / ramp_until, 1.0) if ramp_until > 0 else 1.0
    return max(1, round((unit + frac * (target - unit)) / unit)) * unit


def save_checkpoint(path, state):
    """Write to a temporary file, fsync, then rename: a crash or a full disk leaves the previous checkpoint intact."""
    with written_whole(path) as f:
        torch.save(state, f)


def read_checkpoint(path, mmap=False):
    """torch.load to the CPU (no GPU memory spike), one line for a missing, cut or foreign file. weights_only: a
    shared file never runs code (TorchVersion is a str). mmap: read when used, pages shared by processes."""
    if not os.path.isfile(path):
        raise CramError(f"no checkpoint at {path}: check the path (and --out_dir), or train one first")
    try:
        with safe_globals(torch.torch_version.TorchVersion):  # torch 2.4 too
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:
        raise not_readable(path, e) from None


def load_model(ckpt_path, device="cpu"):
    """Rebuild the raw model of a checkpoint; returns (model, cfg, meta). The tools call official.load_pretrained,
    which also takes the paper's released folder."""
    ckpt = read_checkpoint(ckpt_path)
    try:
        cfg, meta, vocab, T = same_kinds(Config(**ckpt["config"])), ckpt["meta"], ckpt["vocab_size"], ckpt["seq_len"]
        check_config(cfg, model_only=True)  # what builds the model, as flags are checked: a NaN dropout, 0 heads
        if "folder" in meta or not is_file_name(meta.get("tokenizer_file") or "tokenizer.json"):
            raise ValueError("its meta names a file outside the checkpoint's folder")  # the tools read there
        model = built_for(ckpt["model"], cfg.n_layer, T, lambda: CrammedBERT(cfg, vocab, T))  # no random init first
        model.load_state_dict(ckpt["model"])  # NaN weights, sizes a file cannot have: refused (built_for)
    except Exception as e:  # a field missing, or of the wrong type or shape
        raise not_readable(ckpt_path, e) from None
    return model.to(device), cfg, meta


# ----------------------------------------------------------------------------------------------------------------
# Training: train() is the loop, its steps named above it. In one process `ranks` is rank 0 of 1, does nothing
# (several processes: hardware.py's last section, and "Scaling out" below, which a first reading skips).

def check_config(cfg, model_only=False):
    """Reject, in one line each, values that would crash later or quietly train something else (model_only: a file)."""
    finite = all(math.isfinite(v) for v in (cfg.lr, cfg.budget_hours, cfg.grad_clip, cfg.weight_decay, cfg.mask_rate))
    rules = [  # rules[1:5]: what builds the model, all that model_only checks
        (finite and min(cfg.lr, cfg.grad_clip, cfg.budget_hours) > 0, "--lr and --grad_clip must be > 0, "
         "--budget_hours must be > 0, and they, --weight_decay and --mask_rate finite numbers"),
        (min(cfg.n_layer, cfg.n_head) >= 1 and cfg.n_embd % cfg.n_head == 0 and cfg.n_embd % 2 == 0,
         f"--n_layer and --n_head must be >= 1, --n_embd {cfg.n_embd} even (sin/cos pairs) and split into "
         f"{cfg.n_head} equal heads"),
        (0 <= cfg.narrow < cfg.n_layer, f"--narrow must be in [0, --n_layer {cfg.n_layer}): a wide block first"),
        (cfg.ffn_hidden >= 2 and cfg.ffn_hidden % 2 == 0, f"--ffn_hidden {cfg.ffn_hidden} must be even: GLU halves it"),
        (0 <= cfg.dropout < 1 and 0 < cfg.norm_eps < 1 and 0 <= cfg.local_bias < 1e4 and cfg.n_head >= 1 + (
            cfg.local_bias > 0), "--dropout in [0, 1), --norm_eps in (0, 1), --local_bias in [0, 1e4) with >= 2 heads"),
        (0 < cfg.mask_rate < 1 and (0 < cfg.mask_from < 1 > cfg.mask_to > 0 if cfg.mask_from else cfg.mask_to == .15),
         "--mask_rate, --mask_from and --mask_to must be between 0 and 1; --mask_to needs --mask_from, its start"),
        (0 <= cfg.beta1 < 1 and 0 <= cfg.beta2 < 1 and cfg.adam_eps >= 0 and cfg.weight_decay >= 0,
         "--beta1 and --beta2 must be in [0, 1), --adam_eps and --weight_decay >= 0"),
        (0 <= cfg.micro_batch <= cfg.batch_size, f"--micro_batch {cfg.micro_batch} must be in [0, --batch_size]"),
        (0 <= cfg.ramp_until <= 1 and cfg.max_steps >= 0, "--ramp_until must be in [0, 1], --max_steps >= 0"),
        (cfg.eval_every > 0 and cfg.eval_seqs >= 1 and cfg.ckpt_every_min >= 0,
         "--eval_every must be > 0, --eval_seqs >= 1, --ckpt_every_min >= 0"),
        (cfg.compile in ("auto", "true", "false"), f"--compile must be auto, true or false (got {cfg.compile!r})"),
    ]
    if message := next((message for ok, message in (rules[1:5] if model_only else rules) if not ok), None):
        raise CramError(message)


@torch.no_grad()
def evaluate(model, val, cfg, mask_id, vocab_size, amp, device):
    """Mean MLM loss on the first eval_seqs validation rows, masked alike every time and at any micro-batch (drawn 16
    rows at a time): (all predicted slots, the [MASK] slots alone; a copier gets ~ln 2 on the 10% kept, notes)."""
    model.eval()
    gen = torch.Generator(device=device).manual_seed(1234)  # not the weights' device: --offload keeps them on the CPU
    ids, losses = get_batch(val, 0, min(len(val), cfg.eval_seqs), gen.device), []
    draws = [mask_tokens(ids[i:i + 16], mask_id, vocab_size, cfg.mask_rate, gen) for i in range(0, len(ids), 16)]
    inputs, positions, targets = map(torch.cat, zip(*draws))                       # (n, T), (n, k), (n, k)
    for i in range(0, len(ids), cfg.micro_batch):  # the model a micro-batch at a time
        b = slice(i, i + cfg.micro_batch)
        with amp():
            logits = model(inputs[b], positions[b])                                   # (B, k, V)
        losses.append(F.cross_entropy(logits.float().transpose(1, 2), targets[b], reduction="none"))  # (B, k)
    model.train()
    losses, shown = torch.cat(losses), inputs.gather(1, positions) == mask_id  # shown: the slots that show [MASK]
    return losses.mean().item(), losses[shown].mean().item()


@dataclass
class Clock:
    """Where a run stands: saved in every checkpoint, restored by --resume."""
    step: int = 0
    train_time: float = 0.0     # seconds spent inside training steps: the budget clock
    data_pos: int = 0           # sequences read, in stored order: the next step starts here
    val_loss: float = math.nan  # the last evaluation's

    def progress(self, cfg):  # t, the fraction of the budget used (--max_steps: of the steps)
        return self.step / cfg.max_steps if cfg.max_steps > 0 else self.train_time / cfg.budget_hours / 3600


def resume(path, cfg, meta, model, optimizer, scaler):
    """Load a checkpoint into model, optimizer and scaler, on any device: the same model on the same data (else one
    line names the setting), any --micro_batch and optimizer flags. Returns its Clock, old micro-batch, code hash."""
    ckpt = read_checkpoint(path, mmap=cfg.shard and sys.platform != "win32")  # Windows: a mapped file stays
    try:
        was, now = {**asdict(Config(**ckpt["config"])), **ckpt["meta"]}, {**asdict(cfg), **meta}  # new fields: defaults
        for key in ("n_layer", "n_embd", "n_head", "ffn_hidden", "local_bias", "narrow", "mask_rate", "mask_from",
                    "mask_to", "tokenizer", "vocab_size", "seq_len", "num_sequences"):  # the model, the data
            if was.get(key) != now.get(key):
                raise CramError(f"{path} was trained with {key}={was.get(key)} but this run has {now.get(key)}: "
                                "use the same preset, flags and --data_dir, or another --out_dir")
        ckpt["optimizer"] = optimizer_state_for(optimizer, ckpt["optimizer"])  # its moments, the flags' betas, decay
        if cfg.shard:
            load_shards(ckpt, model, optimizer)
        else:
            model.load_state_dict(finite(ckpt["model"]))  # NaN weights: one line, not a stop at the first step
            optimizer.load_state_dict(ckpt["optimizer"])  # moves the Adam moments to the parameters' device
        if ckpt["scaler"]:  # empty from a bf16 or CPU run: an fp16 GPU then starts its loss scale afresh
            scaler.load_state_dict(ckpt["scaler"])
        torch.set_rng_state(ckpt["rng"]["torch"])
        clock = plain_numbers(ckpt, step=int, train_time=float, data_pos=int, val_loss=float, nan_ok=("val_loss",))
        return Clock(*clock), was["micro_batch"], ckpt.get("info", {}).get("code")
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:  # a field missing or wrong
        raise not_readable(path, e) from None


class Log:
    """Rank 0's record of the run: each line printed and added to log.txt, its numbers to metrics.jsonl."""

    def __init__(self, cfg, meta, master, baseline, flops, peak):
        self.master, self.T, self.baseline, self.flops, self.peak = master, meta["seq_len"], baseline, flops, peak
        if master:  # finetune_glue.py finds meta.json and the tokenizer beside ckpt.pt (read_meta: bare names)
            os.makedirs(cfg.out_dir, exist_ok=True)
            self.files = [appended(os.path.join(cfg.out_dir, name)) for name in ("log.txt", "metrics.jsonl")]
            for name in ("meta.json", meta.get("tokenizer_file") or ""):  # after the logs: a link there copies nothing
                source, copy = (os.path.join(folder, name) for folder in (cfg.data_dir, cfg.out_dir))
                if name and os.path.exists(source) and not (os.path.exists(copy) and filecmp.cmp(source, copy, False)):
                    with open(source, "rb") as f, written_whole(copy) as g:  # a full disk keeps the old copy
                        shutil.copyfileobj(f, g)

    def __call__(self, msg, **metrics):
        if self.master:
            print(msg, flush=True)
            self.files[0].write(msg + "\n")
            if metrics:
                self.files[1].write(json.dumps(metrics) + "\n")

    def eval(self, clock, t, loss, mask_loss):
        tokens, base = clock.data_pos * self.T, self.baseline
        self(f"eval  {clock.step:6d} | val loss {loss:.4f} | {base - loss:+.3f} nats under unigram | [MASK] slots "
             f"{mask_loss:.4f} ({base - mask_loss:+.3f}) | budget {100 * t:5.1f}%", step=clock.step, val_loss=loss,
             val_loss_mask=mask_loss, budget=t, train_time=clock.train_time, tokens=tokens, flops=tokens * self.flops)
        return loss

    def step(self, clock, t, loss, lr, batch, dt, world):
        tok_s, tokens = batch * self.T / dt, clock.data_pos * self.T
        mfu = f"{100 * tok_s * self.flops / (self.peak * world):.1f}%" if self.peak else "n/a"
        self(f"step {clock.step:6d} | loss {loss:.4f} | lr {lr:.2e} | batch {batch:5d} | tok/s {tok_s:9,.0f} | "
             f"mfu {mfu:>5} | budget {100 * t:5.1f}%", step=clock.step, loss=loss, lr=lr, batch=batch, tok_s=tok_s,
             budget=t, train_time=clock.train_time, tokens=tokens, flops=tokens * self.flops)


def micro_batches(data, start, batch, t, cfg, ranks, meta, gen, device):
    """This rank's slices of the step's rows start .. start + batch, one micro-batch each, masked at rate(t)."""
    unit, rate = cfg.micro_batch * ranks.world, mask_rate_at(t, cfg)  # mask_rate, or --mask_from's schedule
    for micro in range(batch // unit):
        ids = get_batch(data, start + micro * unit + ranks.rank * cfg.micro_batch, cfg.micro_batch, device)
        yield mask_tokens(ids, meta["special_ids"]["mask"], meta["vocab_size"], rate, gen)


def accumulate(train_model, batches, accum, amp, scaler, ranks):
    """Forward and backward of each micro-batch, its loss / accum: the gradients add up to the batch's."""
    total = 0
    for micro, (inputs, positions, targets) in enumerate(batches):
        with ranks.no_sync_until(micro == accum - 1, train_model):
            with amp():
                loss = train_model(inputs, positions, targets) / accum
            scaler.scale(loss).backward()
        total += loss.detach()
    return total


def clip_and_step(model, optimizer, scaler, grad_clip, ddp=False):
    """Clip the gradients' global L2 norm, step AdamW (fp16: unscaled first, skipped on an overflow)."""
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=not ddp)  # DDP: zeros in its buckets, which hold the gradients (no 2nd copy)


def checkpoint(path, model, optimizer, scaler, clock, ranks, cfg, **facts):
    """The raw (uncompiled) weights, which cram.py and finetune_glue.py load anywhere; rank 0 writes."""
    weights, moments = full_state(model, optimizer) if cfg.shard else (model.state_dict(), optimizer.state_dict())
    if ranks.master:
        save_checkpoint(path, {"model": weights, "optimizer": moments, "scaler": scaler.state_dict(),
                               **asdict(clock), "rng": {"torch": torch.get_rng_state()}, **facts})


def train(cfg):
    """Set up, then one loop: (evaluate, checkpoint: off the budget clock) -> check the budget -> accumulate
    micro-batches -> clip and step -> log. Returns the final validation loss."""
    check_config(cfg)
    ranks, device = start_processes(pick_device(cfg.device), cfg)  # one process: rank 0 of 1
    train_data, meta = load_split(cfg.data_dir, "train")
    val_data, _ = load_split(cfg.data_dir, "val")
    T, mask_id, vocab_size = meta["seq_len"], meta["special_ids"]["mask"], meta["vocab_size"]
    if round(min(cfg.mask_rate, mask_rate_at(1, cfg)) * T) < 1:
        raise CramError(f"--mask_rate or --mask_to masks no token of a {T}-token sequence: raise it")

    torch.manual_seed(cfg.seed)
    model = CrammedBERT(cfg, vocab_size, T).to(device)
    compiling = wants_compile(cfg.compile, device)  # auto: on CUDA where torch can (cannot_compile), not on Windows
    cfg.micro_batch = cfg.micro_batch or ranks.least(fit_micro_batch(device, model, cfg, T, ranks.world, compiling))
    if cfg.shard:  # ZeRO-3, before the optimizer sees the weights
        shard_model(model, device, ranks.world, cfg.offload)
    optimizer = make_optimizer(model, cfg, device)
    dtype = amp_dtype(device)  # bf16 from Ampere on, older GPUs fp16 with loss scaling; fp32 on the CPU and MPS
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    amp = functools.partial(autocast, device, dtype)  # in fp32 no autocast at all: what MPS needs
    ckpt_path, clock, old_micro, old_code = os.path.join(cfg.out_dir, "ckpt.pt"), Clock(), cfg.micro_batch, None
    if cfg.resume:
        clock, old_micro, old_code = resume(ckpt_path, cfg, meta, model, optimizer, scaler)
    elif os.path.exists(ckpt_path):
        raise CramError(f"{ckpt_path} already exists: pass --resume to continue it, or choose another --out_dir")
    train_model = ranks.wrap(model, device)  # several processes without --shard: DDP; else the model itself
    if compiling:
        train_model = torch.compile(train_model)  # static shapes: fixed micro-batch and fixed masked count

    baseline = unigram_entropy(train_data, val_data[: cfg.eval_seqs]) if ranks.master else math.nan
    flops, info = flops_per_token(model, cfg, T), run_info(device, __file__)  # __file__: this cram.py, or your copy
    log = Log(cfg, meta, ranks.master, baseline, flops, device_peak_flops(device))
    log(f"config: {json.dumps(asdict(cfg))}")
    log(f"run: {json.dumps({**info, 'world_size': ranks.world, 'amp': str(dtype)})}")
    log(f"data: {cfg.data_dir} | {meta['num_sequences']} sequences of {T} | vocab {vocab_size} | "
        f"unigram baseline {baseline:.4f} nats")
    t = clock.progress(cfg)
    start = f"resuming at step {clock.step}, {100 * t:.1f}% of budget" if cfg.resume else "fresh start"
    if old_code not in (None, info["code"]):  # weights of the same shapes load: an edited activation would pass unseen
        start += " (by other code than saved it: cram.py or a module it imports changed since)"
    log(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters | {flops / 1e6:.0f} MFLOP/token"
        f" | {start}" + (f", micro-batch {old_micro} -> {cfg.micro_batch}" if old_micro != cfg.micro_batch else ""))
    facts = dict(meta=meta, config=asdict(cfg), vocab_size=vocab_size, seq_len=T, info=info, unigram_baseline=baseline)
    save = functools.partial(checkpoint, ckpt_path, model, optimizer, scaler, clock, ranks, cfg, **facts)

    stop, stopping, gen = stop_on_signals(), False, torch.Generator(device=device)
    evals = lambda t: math.floor(t / cfg.eval_every + 1e-9)  # noqa: E731  evaluations due by t (3 * 0.1 > 0.3)
    done, last_ckpt = evals(clock.progress(cfg)), clock.train_time  # done: those due before this run's first step
    while True:
        t = clock.progress(cfg)  # the clock runs only in the step below: evaluations, checkpoints cost none
        if evals(t) > done and t < 1 or (t >= 1 and not stopping):  # every eval_every, and at the end
            evaluated = ranks.master or cfg.shard  # --shard: all ranks, as each block gathers from all
            losses = evaluate(model, val_data, cfg, mask_id, vocab_size, amp, device) if evaluated else (math.nan,) * 2
            clock.val_loss, done = log.eval(clock, t, *losses), evals(t)
        if clock.train_time - last_ckpt >= cfg.ckpt_every_min * 60 and t < 1:
            save()
            last_ckpt = clock.train_time
        ranks.wait()  # several processes: the others wait, off the clock, while rank 0 evaluates or writes
        if t >= 1.0 or stopping:
            break

        t0 = time.perf_counter()
        batch, lr = batch_size_at(t, cfg.micro_batch * ranks.world, cfg.batch_size, cfg.ramp_until), lr_at(t, cfg.lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        gen.manual_seed(cfg.seed * 1_000_003 + clock.step * ranks.world + ranks.rank)  # masks: of the step
        try:
            batches = micro_batches(train_data, clock.data_pos, batch, t, cfg, ranks, meta, gen, device)
            accum = batch // (cfg.micro_batch * ranks.world)
            loss = ranks.mean(accumulate(train_model, batches, accum, amp, scaler, ranks))
        except torch.cuda.OutOfMemoryError as e:  # torch.OutOfMemoryError from torch 2.5 on, the same class
            raise out_of_memory(e, cfg, save, ranks, ckpt_path, clock.step) from None
        clip_and_step(model, optimizer, scaler, cfg.grad_clip, ddp=ranks.world > 1 and not cfg.shard)
        loss = loss.item()  # the host waits for the GPU here: the step's time below includes AdamW's
        if not math.isfinite(loss):  # rank 0 says it, once; the other ranks leave quietly
            saved = ckpt_path if os.path.exists(ckpt_path) else "none yet"
            raise SystemExit(1) if not ranks.master else CramError(
                f"loss is {loss} at step {clock.step}: training diverged; the last good checkpoint ({saved}) was "
                "kept: resume it with a lower --lr or --grad_clip")  # (the weights in memory, stepped, are not)
        dt = time.perf_counter() - t0
        clock.data_pos, clock.train_time, clock.step = clock.data_pos + batch, clock.train_time + dt, clock.step + 1
        clock.train_time, stopping = ranks.agree(clock.train_time, "signal" in stop)  # one clock for all ranks
        log.step(clock, clock.progress(cfg), loss, lr, batch, dt, ranks.world)

    save()
    ranks.finish()  # several processes: all wait for rank 0's checkpoint, then leave together
    if stopping:  # a signal asks to leave soon: no final evaluation
        log(f"stopped by {stop.get('signal', 'a signal on another rank')} at step {clock.step} ({100 * t:.1f}% of "
            f"budget); checkpoint saved to {ckpt_path}; continue with the same command plus --resume")
        sys.exit(130)
    log(f"done: {clock.step} steps, {clock.data_pos * T:,} tokens, {clock.train_time / 60:.1f} budget minutes; final "
        f"val loss {clock.val_loss:.4f} vs unigram {baseline:.4f}; checkpoint {ckpt_path}")
    return clock.val_loss


def main(argv=None):
    safe_console()  # a path the console's encoding lacks is printed escaped, never raised (Windows: cp1252)
    cfg = parse_config(argv)
    try:
        return train(cfg)
    except (CramError, OSError) as e:  # OSError: a full disk, no permission, an --out_dir that is a file
        sys.exit(f"cram.py: error: {e}" + ("" if isinstance(e, CramError) else ": check the path and the disk"))
    finally:  # FSDP2's modules hold their process group in reference cycles: free them now, not as Python shuts down
        gc.collect()  # (then gloo's threads may find no interpreter: an abort, 1 run in 12, notes)


# ----------------------------------------------------------------------------------------------------------------
# Scaling out, read last: a process a device under torchrun; DDP, or FSDP2 with --shard (ZeRO-3; hardware.py's end).

def full_state(model, optimizer):
    """--shard: the state of all ranks, gathered by DCP (each rank calls this) to rank 0's CPU, as one device's."""
    from torch.distributed.checkpoint import state_dict as dcp  # imported only for --shard: ~1 s at start-up
    options = dcp.StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights, moments = dcp.get_model_state_dict(model, options=options), optimizer.state_dict()
    if optimizer.state:  # none before the first step (DCP would make them by a step of lr 0: one more for Adam)
        moments = dcp.get_optimizer_state_dict(model, optimizer, options=options)
    return reformat(weights, moments, model, optimizer, ()) if weights else ({}, {})


def reformat(weights, moments, model, optimizer, shape):
    """Checkpoint format <-> DCP's (--shard): Adam moments by index <-> by name, the position scalar () <-> (1,)."""
    names = [n for g in optimizer.param_groups for p in g["params"] for n, q in model.named_parameters() if q is p]
    key = dict(enumerate(names)) if shape else {n: i for i, n in enumerate(names)}
    key |= {v: v for v in key.values()}  # keys already so stay: before step 1 full_state passes the index form
    pos = {"embed.pos_scale", names.index("embed.pos_scale")}  # the position scalar's key, by name or by index
    weights["embed.pos_scale"] = weights["embed.pos_scale"].reshape(shape)
    return weights, {"state": {key[k]: {m: v.reshape(shape) if k in pos and m != "step" else v for m, v in s.items()}
                               for k, s in moments["state"].items()},
                     "param_groups": [{**g, "params": [key[k] for k in g["params"]]} for g in moments["param_groups"]]}


def load_shards(ckpt, model, optimizer):
    """--resume --shard: each rank keeps its slice of every tensor of the file, whoever wrote it. The file is
    memory-mapped (read_checkpoint(mmap=True)): a machine's ranks share its pages, one copy, not N."""
    from torch.distributed.checkpoint import state_dict as dcp
    if missing := sorted(set(model.state_dict()) - set(ckpt["model"])):  # DCP would keep their fresh init, silently
        raise RuntimeError(f"Error(s) in loading state_dict:\n\tMissing key(s) in state_dict: {', '.join(missing)}")
    weights, moments = reformat(ckpt["model"], ckpt["optimizer"], model, optimizer, (1,))
    dcp.set_state_dict(model, optimizer, model_state_dict=weights, optim_state_dict=moments,
                       options=dcp.StateDictOptions(full_state_dict=True))
    if not moments["state"]:  # saved before the first step: DCP made moments by a step of lr 0, Adam counts it
        optimizer.state.clear()


if __name__ == "__main__":
    main()
