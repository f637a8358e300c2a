"""Cramming: pretrain a BERT on one GPU in one day (Geiping & Goldstein, 2022), in one file.

Launch lines (run prepare.py first, it writes data/):
    python cram.py --preset tiny                          # CPU: a 2 x 128 BERT that learns in 5 minutes
    python cram.py --preset paper --budget_hours 24       # the paper: 16 layers, 24 h on one GPU
    python cram.py --preset paper --resume                # continue out/ckpt.pt where it stopped
    torchrun --nproc_per_node 8 cram.py --preset paper    # several GPUs: the batch target stays global; --shard: ZeRO-3
    python cram.py --help                                 # every field of Config, with its default

The architecture (paper section 4.2, the final "crammed BERT"):
- pre-LN transformer blocks, LayerNorm eps 1e-12, one more LayerNorm after the last block
- no bias in any Linear inside the blocks; fused QKV projection; F.scaled_dot_product_attention (flash)
- gated-GELU feed-forward: Linear d -> 4d, split into (x, gate), GELU(gate) * x, Linear 2d -> d
- positions: a fixed sin/cos table times ONE learnable scalar (init 1/sqrt(d)); no token-type embedding
- embedding LayerNorm; decoder tied to the token embedding, no decoder bias, no head transform
- sparse prediction: the vocabulary projection runs only on the masked positions; dropout off (on for fine-tuning)
- the loss inside the compiled model; bf16 autocast from Ampere on, fp16 + GradScaler before it (amp_dtype)
- tiny CPU preset only: a fixed local attention bias -slope*|i - j| (ALiBi, Press et al. 2022); docs/notes.md
The recipe (section 4.3, with the reference code's final values: RECIPE.md): MLM at 25% (80/10/10), AdamW,
lr(t) = peak * min(0.25 + t, 4(1 - t)) with t the fraction of the time budget used, batch size ramped linearly to
8192 sequences at t = 0.6 by gradient accumulation, gradient clipping 0.5, stop when the budget is spent.
"""
import argparse
import contextlib
import datetime
import gc
import inspect
import json
import math
import os
import re
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass, fields

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# what the machine is, and can do; safe_console: what is printed never raises on a console lacking a character
from errors import CramError  # a user's mistake: main() prints it in one line
from hardware import amp_dtype, autocast, compile_by_default, device_peak_flops, dist_backend, run_info, safe_console
from prepare import read_meta


# ----------------------------------------------------------------------------------------------------------------
# Config: one flat dataclass; the command line is generated from its fields, presets are dicts of overrides.

@dataclass
class Config:
    preset: str = "auto"          # "paper", "tiny", or "auto" (paper on CUDA, tiny elsewhere)
    data_dir: str = "data"        # folder written by prepare.py: train.bin, val.bin, meta.json
    out_dir: str = "out"          # checkpoint, log.txt and metrics.jsonl go here
    # model (paper's final architecture)
    n_layer: int = 16             # transformer blocks
    n_embd: int = 768             # hidden width d
    n_head: int = 12              # attention heads (head dim = n_embd / n_head = 64)
    ffn_hidden: int = 3072        # first FFN Linear output; halved by the GLU gate, so 1536 -> d
    pos_scale_init: float = 1.0   # the position scalar starts at this x 1/sqrt(n_embd) (paper: 1; tiny: 0, notes)
    local_bias: float = 0.0       # > 0: attention bias -slope*|i-j|, slopes local_bias/2^h, last head 0 (paper: 0)
    narrow: int = 0               # NarrowBERT: the last N blocks compute only the positions whose output is needed
    norm_eps: float = 1e-12       # LayerNorm epsilon
    dropout: float = 0.0          # off during pretraining (the paper); finetune_glue.py turns it on
    # objective
    mask_rate: float = 0.25       # fraction of each sequence that is predicted (exactly round(rate * T))
    # optimization ("bert-o4")
    lr: float = 1e-3              # peak learning rate
    beta1: float = 0.9            # AdamW's first-moment decay
    beta2: float = 0.98           # AdamW's second-moment decay
    adam_eps: float = 1e-12       # AdamW's epsilon
    weight_decay: float = 0.01    # not applied to LayerNorm parameters, biases and the position scale
    grad_clip: float = 0.5        # global L2 norm
    batch_size: int = 8192        # target sequences per optimizer step, reached at t = ramp_until
    micro_batch: int = 128        # sequences per forward/backward on one device
    ramp_until: float = 0.6       # fraction of the budget where the batch size reaches batch_size
    budget_hours: float = 24.0    # wall-clock training budget (evaluation and checkpoints are not counted)
    max_steps: int = 0            # > 0: progress t = step / max_steps instead of time (reproducible runs, tests)
    # evaluation, checkpoints, logs
    eval_every: float = 0.1       # validate every this fraction of the budget, and at the end
    eval_seqs: int = 1024         # validation sequences per evaluation (fixed masking seed)
    ckpt_every_min: float = 30.0  # checkpoint every this many budget minutes, and at the end
    resume: bool = False          # continue from out_dir/ckpt.pt
    # system
    device: str = "auto"          # "auto", "cuda", "cpu", "mps"
    compile: str = "auto"         # torch.compile: "auto" (on for CUDA, not on Windows), "true", "false"
    shard: bool = False           # under torchrun: FSDP2 (ZeRO-3) splits weights, gradients, Adam moments over ranks
    offload: bool = False         # with --shard on GPUs: the shards live in CPU memory (ZeRO-Offload), slower steps
    seed: int = 0                 # weights at init and masks (a pure function of seed and step)


PRESETS = {
    "paper": {},  # the defaults above are the paper's recipe
    # Learns in 5 minutes on 2 CPU cores (docs/notes.md): 2 x 128 reads ~5M tokens in small steps at a 10x hotter lr,
    # 10x the weight decay (to fine-tune), word order from a fixed local attention bias (sin/cos scalar at 0); vocab 8k.
    "tiny": dict(n_layer=2, n_embd=128, n_head=4, ffn_hidden=512, pos_scale_init=0.0, local_bias=1.0, micro_batch=16,
                 batch_size=64, lr=1e-2, weight_decay=0.1, budget_hours=5 / 60, eval_every=0.25, eval_seqs=512,
                 ckpt_every_min=1.0),
}


def parse_config(argv=None):
    """Flags from Config's fields (types coerced, typos rejected); precedence: defaults < preset < flags."""
    p = argparse.ArgumentParser(description="Pretrain a crammed BERT under a wall-clock budget.")
    meaning = dict(re.findall(r"^    (\w+): .*?# (.*)$", inspect.getsource(Config), re.M))  # each field's comment
    for f in fields(Config):
        kind = dict(action=argparse.BooleanOptionalAction) if f.type is bool else dict(type=f.type)
        p.add_argument(f"--{f.name}", **kind, default=argparse.SUPPRESS,
                       help=f"{meaning.get(f.name, '')} (default {f.default})".replace("%", "%%"))
    given = vars(p.parse_args(argv))
    preset = given.get("preset", "auto")
    if preset == "auto":
        preset = "paper" if torch.cuda.is_available() else "tiny"
    if preset not in PRESETS:
        p.error(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    return Config(**{**PRESETS[preset], **given, "preset": preset})


# ----------------------------------------------------------------------------------------------------------------
# Data: prepare.py's packed uint16 sequences, read in stored order (the "." curriculum), and MLM masking.

def load_split(data_dir, split):
    """Memory-map `split`.bin as an (N, T) uint16 array after checking it against meta.json."""
    meta = read_meta(data_dir)  # prepare.py's reader: a missing or damaged meta.json is a one-line error
    T, n = meta["seq_len"], meta["num_sequences"][split]
    path = os.path.join(data_dir, f"{split}.bin")
    if not os.path.exists(path):
        raise CramError(f"missing {path}: re-run prepare.py for {data_dir}")
    if os.path.getsize(path) != n * T * 2:
        raise CramError(f"{path} has {os.path.getsize(path)} bytes but meta.json promises {n}x{T} uint16 "
                        "tokens: the file is truncated or from another run; re-run prepare.py")
    if n == 0:
        raise CramError(f"{path} holds no sequences: prepare more text (or a larger --val_fraction)")
    return np.memmap(path, dtype=np.uint16, mode="r", shape=(n, T)), meta


def get_batch(data, start, count, device):
    """Rows start .. start+count of the stored order, wrapping around at the end, as int64 on `device`."""
    idx = np.arange(start, start + count) % len(data)
    x = torch.from_numpy(data[idx].astype(np.int64))
    return x.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else x.to(device)


def mask_tokens(ids, mask_id, vocab_size, rate, generator):
    """BERT masking with a fixed count: exactly k = round(rate * T) positions of every sequence are predicted.

    Of the k slots (uniformly random positions), the first 80% become [MASK], the next 10% a random token and
    the rest keep their token (paper: 25% rate, so 32 of 128 -> 26 / 3 / 3). A fixed k keeps every shape static.
    Returns (inputs (B, T), positions (B, k), targets (B, k)).
    """
    B, T = ids.shape
    k = round(rate * T)
    n_mask, n_rand = round(0.8 * k), round(0.1 * k)
    scores = torch.rand(B, T, generator=generator, device=ids.device)
    positions = scores.topk(k, dim=1).indices                                     # (B, k), uniform subset
    targets = ids.gather(1, positions)                                            # (B, k)
    random_ids = torch.randint(0, vocab_size, (B, n_rand), generator=generator, device=ids.device)
    slot_values = torch.cat([torch.full((B, n_mask), mask_id, device=ids.device, dtype=ids.dtype),
                             random_ids.to(ids.dtype), targets[:, n_mask + n_rand:]], dim=1)
    inputs = ids.scatter(1, positions, slot_values)
    return inputs, positions, targets


def unigram_entropy(train, val, max_tokens=50_000_000):
    """Cross-entropy (nats) of val tokens under the train unigram distribution: the context-free baseline."""
    rows = max(1, min(len(train), max_tokens // train.shape[1]))
    vocab = int(max(train[:rows].max(), val.max())) + 1
    counts = np.bincount(np.asarray(train[:rows]).ravel(), minlength=vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[np.asarray(val).ravel()].mean())


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

    def forward(self, x, attn_mask=None, kv=None):                                 # x (B, T, C)
        B, T, C = x.shape
        H, D = self.n_head, C // self.n_head
        if kv is None:  # self-attention, one fused matmul
            q, k, v = self.qkv(x).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)                   # (B, H, T, D)
        else:  # a narrow block: queries at x's T positions, keys and values at every position of kv (B, S, C)
            q = F.linear(x, self.qkv.weight[:C]).view(B, T, H, D).transpose(1, 2)                 # (B, H, T, D)
            k, v = F.linear(kv, self.qkv.weight[C:]).view(B, -1, 2, H, D).permute(2, 0, 3, 1, 4)  # (B, H, S, D)
        if attn_mask is not None and attn_mask.is_floating_point():  # a float bias must match q (bf16 in autocast)
            attn_mask = attn_mask.to(q.dtype)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(B, T, C))


class GLUFeedForward(nn.Module):
    """Gated GELU: Linear d -> ffn_hidden, split in (x, gate), GELU(gate) * x, Linear ffn_hidden/2 -> d."""

    def __init__(self, cfg):
        super().__init__()
        self.up = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)
        self.down = nn.Linear(cfg.ffn_hidden // 2, cfg.n_embd, bias=False)

    def forward(self, x):
        x, gate = self.up(x).chunk(2, dim=-1)
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

    def forward(self, x, attn_mask=None, context=None):  # context: a narrow block's keys and values (NarrowBERT)
        x = x + self.drop(self.attn(self.norm1(x), attn_mask, None if context is None else self.norm1(context)))
        return x + self.drop(self.ffn(self.norm2(x)))


class CrammedBERT(nn.Module):
    def __init__(self, cfg, vocab_size, seq_len):
        super().__init__()
        self.embed = Embeddings(cfg, vocab_size, seq_len)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.final_norm, self.narrow = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps), cfg.narrow
        distance = (torch.arange(seq_len)[:, None] - torch.arange(seq_len)[None, :]).abs()         # (T, T)
        slopes = cfg.local_bias / 2.0 ** torch.arange(cfg.n_head)                                  # (H,)
        slopes[-1] = 0.0  # the last head sees the whole row: [CLS] must, to classify a sentence (notes)
        bias = -slopes[:, None, None] * distance if cfg.local_bias > 0 else None                  # (H, T, T)
        self.register_buffer("attn_bias", bias, persistent=False)
        for m in self.modules():  # every Linear and Embedding N(0, 0.02); LayerNorms keep weight 1, bias 0
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def encode(self, ids, pad_mask=None, positions=None):
        """Hidden states (B, T, C), or (B, k, C) at positions (B, k). pad_mask (B, T) is True on real tokens
        (fine-tuning pads; pretraining not). The last cfg.narrow blocks (NarrowBERT, Li et al. 2023) take keys and
        values from the last wide block's output, so computing only the needed positions is exact."""
        attn_mask = None if pad_mask is None else pad_mask[:, None, None, :]         # (B, 1, 1, T) keys
        if self.attn_bias is not None:  # the local bias, with padded keys at -inf
            bias = self.attn_bias[:, :ids.shape[1], :ids.shape[1]]                     # (H, T, T)
            attn_mask = bias if attn_mask is None else bias.masked_fill(~attn_mask, float("-inf"))
        x, wide = self.embed(ids), len(self.blocks) - self.narrow
        for block in self.blocks[:wide]:
            x = block(x, attn_mask)
        context = x  # what every narrow block attends to
        if positions is not None:
            x = x.gather(1, positions[..., None].expand(-1, -1, x.shape[-1]))                 # (B, k, C)
            if self.narrow and attn_mask is not None and attn_mask.shape[-2] > 1:  # the bias rows of these queries
                m = attn_mask.expand(len(ids), *attn_mask.shape[-3:])                        # (B, H, T, T)
                attn_mask = m.gather(2, positions[:, None, :, None].expand(-1, m.shape[1], -1, m.shape[3]))
        for block in self.blocks[wide:]:
            x = block(x, attn_mask, context)
        return self.final_norm(x)

    def forward(self, ids, positions, targets=None):
        """Sparse MLM logits (B, k, V): the tied decoder runs only at the masked positions (B, k). With targets (B, k)
        their mean cross-entropy, computed in the compiled model: the logits are never copied to fp32 outside it."""
        h = self.encode(ids, positions=positions)                                      # (B, k, C)
        logits = h @ self.embed.tok.weight.T                                           # (B, k, V)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))


def flops_per_token(model, cfg, seq_len):
    """RECIPE.md: 6 * non-embedding params + attention 12*L*d*T + sparse head 6*d*V*mask_rate (fwd + bwd). A narrow
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
    """Sequences per step: linear in t from one unit (micro-batch x devices) to target at ramp_until, in units."""
    frac = min(max(t, 0.0) / ramp_until, 1.0) if ramp_until > 0 else 1.0
    return max(1, round((unit + frac * (target - unit)) / unit)) * unit


def save_checkpoint(path, state):
    """Write to a temporary file, fsync, then rename: a crash leaves the previous checkpoint intact."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_checkpoint(path):
    """torch.load to the CPU (no GPU memory spike; the RNG state stays there), one-line errors for a missing, cut or
    foreign file. weights_only: tensors and plain values, a shared file can never run code (TorchVersion is a str)."""
    if not os.path.isfile(path):
        raise CramError(f"no checkpoint at {path}: check the path (and --out_dir), or train one first")
    try:
        with torch.serialization.safe_globals([torch.torch_version.TorchVersion]):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise damaged(path, e) from None


def damaged(path, e):  # a checkpoint cut short, not cram.py's, or with a field missing or wrong, in one line
    return CramError(f"{path} is damaged or not a cram.py checkpoint ({type(e).__name__}: "
                     f"{' '.join(str(e).split())[:150]}): check the path, or train afresh in another --out_dir")


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


def load_model(ckpt_path, device="cpu"):
    """Rebuild the raw model of a checkpoint; returns (model, cfg, meta). The tools call official.load_pretrained,
    which also takes the paper's released folder."""
    ckpt = read_checkpoint(ckpt_path)
    try:
        cfg, meta = Config(**ckpt["config"]), ckpt["meta"]
        model = CrammedBERT(cfg, ckpt["vocab_size"], ckpt["seq_len"])
        model.load_state_dict(ckpt["model"])
    except Exception as e:  # a field missing, or of the wrong type or shape
        raise damaged(ckpt_path, e) from None
    return model.to(device), cfg, meta


# ----------------------------------------------------------------------------------------------------------------
# Training.

def pick_device(name):
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if name not in ("cuda", "cpu", "mps"):
        raise CramError(f"unknown --device {name!r}: use auto, cuda, cpu or mps")
    if name != "cpu" and not (torch.cuda if name == "cuda" else torch.backends.mps).is_available():
        raise CramError(f"--device {name} was asked for but no {name.upper()} device is visible: use --device cpu")
    return torch.device(name)


@torch.no_grad()
def evaluate(model, val, cfg, mask_id, vocab_size, amp, device):
    """Mean MLM loss on the first eval_seqs validation sequences, the same masks every time: (all predicted slots,
    the [MASK] slots alone). The 10% that keep their token are easy: a copying model gets ~ln 2 there (notes)."""
    model.eval()
    gen = torch.Generator(device=device).manual_seed(1234)  # not the weights' device: --offload keeps them on the CPU
    n, losses, shown = min(len(val), cfg.eval_seqs), [], []
    for start in range(0, n, cfg.micro_batch):
        ids = get_batch(val, start, min(cfg.micro_batch, n - start), gen.device)
        inputs, positions, targets = mask_tokens(ids, mask_id, vocab_size, cfg.mask_rate, gen)
        with amp():
            logits = model(inputs, positions)                                  # (B, k, V)
        losses.append(F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none"))  # (B, k)
        shown.append(inputs.gather(1, positions) == mask_id)                  # (B, k): slots the model sees as [MASK]
    model.train()
    losses, shown = torch.cat(losses), torch.cat(shown)
    return losses.mean().item(), losses[shown].mean().item()


def resume(path, cfg, meta, model, optimizer, scaler):
    """Load a checkpoint's state into model, optimizer and scaler, on any device: the same model on the same data
    (else one line names the setting), any --micro_batch (the batch target counts sequences). Returns the counters."""
    ckpt = read_checkpoint(path)  # on the CPU: the RNG state must stay there, the rest is copied to the device
    try:
        was, now = {**asdict(Config(**ckpt["config"])), **ckpt["meta"]}, {**asdict(cfg), **meta}  # new fields: defaults
        for key in ("n_layer", "n_embd", "n_head", "ffn_hidden", "local_bias", "narrow", "mask_rate", "tokenizer",
                    "vocab_size", "seq_len", "num_sequences"):  # the model, and the data in --data_dir
            if was.get(key) != now.get(key):
                raise CramError(f"{path} was trained with {key}={was.get(key)} but this run has {now.get(key)}: use "
                                "the same preset, flags and --data_dir, or another --out_dir")
        if cfg.shard:  # whoever wrote the file (every rank read all of it), each rank keeps its slice of every tensor
            from torch.distributed.checkpoint import state_dict as dcp
            weights, moments = reformat(ckpt["model"], ckpt["optimizer"], model, optimizer, (1,))
            dcp.set_state_dict(model, optimizer, model_state_dict=weights, optim_state_dict=moments,
                               options=dcp.StateDictOptions(full_state_dict=True))
            if not moments["state"]:  # saved before the first step: DCP made moments by a step of lr 0, Adam counts it
                optimizer.state.clear()
        else:
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])  # moves the Adam moments to the parameters' device
        if ckpt["scaler"]:  # empty from a bf16 or CPU run: an fp16 GPU then starts its loss scale afresh
            scaler.load_state_dict(ckpt["scaler"])
        torch.set_rng_state(ckpt["rng"]["torch"])
        return ckpt["step"], ckpt["train_time"], ckpt["data_pos"], ckpt["val_loss"], was["micro_batch"]
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:  # a field missing or wrong
        raise damaged(path, e) from None


def check_config(cfg):
    """Reject, in one line each, values that would crash later or quietly train something else."""
    finite = all(math.isfinite(v) for v in (cfg.lr, cfg.budget_hours, cfg.grad_clip, cfg.weight_decay, cfg.mask_rate))
    rules = [
        (finite and min(cfg.lr, cfg.grad_clip, cfg.budget_hours) > 0, "--lr and --grad_clip must be > 0, "
         "--budget_hours must be > 0, and they, --weight_decay and --mask_rate finite numbers"),
        (min(cfg.n_layer, cfg.n_head) >= 1 and cfg.n_embd % cfg.n_head == 0 and cfg.n_embd % 2 == 0,
         f"--n_layer and --n_head must be >= 1, --n_embd {cfg.n_embd} even (sin/cos pairs) and split into "
         f"{cfg.n_head} equal heads"),
        (0 <= cfg.narrow < cfg.n_layer, f"--narrow must be in [0, --n_layer {cfg.n_layer}): a wide block first"),
        (cfg.ffn_hidden >= 2 and cfg.ffn_hidden % 2 == 0, f"--ffn_hidden {cfg.ffn_hidden} must be even: GLU halves it"),
        (0 < cfg.mask_rate < 1, f"--mask_rate must be between 0 and 1 (got {cfg.mask_rate})"),
        (0 <= cfg.dropout < 1 and 0 <= cfg.local_bias < math.inf and (cfg.local_bias == 0 or cfg.n_head >= 2),
         "--dropout must be in [0, 1), --local_bias >= 0, finite and with >= 2 heads (the last one has none)"),
        (0 <= cfg.beta1 < 1 and 0 <= cfg.beta2 < 1 and cfg.adam_eps >= 0 and cfg.weight_decay >= 0,
         "--beta1 and --beta2 must be in [0, 1), --adam_eps and --weight_decay >= 0"),
        (1 <= cfg.micro_batch <= cfg.batch_size, f"--micro_batch {cfg.micro_batch} must be in [1, --batch_size]"),
        (0 <= cfg.ramp_until <= 1 and cfg.max_steps >= 0, "--ramp_until must be in [0, 1], --max_steps >= 0"),
        (cfg.eval_every > 0 and cfg.eval_seqs >= 1 and cfg.ckpt_every_min >= 0,
         "--eval_every must be > 0, --eval_seqs >= 1, --ckpt_every_min >= 0"),
        (cfg.compile in ("auto", "true", "false"), f"--compile must be auto, true or false (got {cfg.compile!r})"),
        (not cfg.offload or cfg.shard and cfg.device in ("auto", "cuda") and torch.cuda.is_available(),
         "--offload moves the GPU shards of --shard to CPU memory: it needs --shard and a CUDA device"),
        (not cfg.shard or int(os.environ.get("WORLD_SIZE", 1)) > 1, "--shard splits the training state over the "
         "processes of torchrun: launch `torchrun --nproc_per_node N cram.py --shard ...` (N >= 2), or drop --shard"),
    ]
    if message := next((message for ok, message in rules if not ok), None):
        raise CramError(message)


def train(cfg):
    check_config(cfg)
    device = pick_device(cfg.device)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:  # launched by torchrun: one process per device, gradients averaged by DDP (or sharded: --shard)
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(device)
        torch.distributed.init_process_group(backend=dist_backend(device),
                                             device_id=device if device.type == "cuda" else None,
                                             timeout=datetime.timedelta(minutes=30))  # a checkpoint to slow disks
    master = rank == 0
    if cfg.micro_batch * world > cfg.batch_size:  # one micro-batch per device is the smallest step
        raise CramError(f"--micro_batch {cfg.micro_batch} on {world} devices is {cfg.micro_batch * world} sequences a "
                        f"step, more than --batch_size {cfg.batch_size}: lower --micro_batch (the ramp needs several)")
    train_data, meta = load_split(cfg.data_dir, "train")
    val_data, _ = load_split(cfg.data_dir, "val")
    vocab_size, T, mask_id = meta["vocab_size"], meta["seq_len"], meta["special_ids"]["mask"]
    if round(cfg.mask_rate * T) < 1:
        raise CramError(f"--mask_rate {cfg.mask_rate} masks no token of a {T}-token sequence: raise it")

    torch.manual_seed(cfg.seed)
    model = CrammedBERT(cfg, vocab_size, T).to(device)
    if cfg.shard:  # FSDP2 (ZeRO-3), in place, before the optimizer: each rank keeps 1/world of every weight, its
        from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard  # gradient and Adam moments
        model.embed.pos_scale = nn.Parameter(model.embed.pos_scale.detach().reshape(1))  # it shards no 0-dim tensor
        mesh = torch.distributed.init_device_mesh(device.type, (world,))  # --offload: shards in CPU memory, Adam too
        for module in [*model.blocks, model]:  # each block's weights gathered just before it runs, then the rest's
            fully_shard(module, mesh=mesh, offload_policy=CPUOffloadPolicy() if cfg.offload else OffloadPolicy())
    optimizer = make_optimizer(model, cfg, device)
    dtype = amp_dtype(device)  # bf16 from Ampere on, fp16 with loss scaling before it, fp32 on the CPU and MPS
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    amp = lambda: autocast(device, dtype)  # noqa: E731  (in fp32 no autocast at all: what MPS needs)

    ckpt_path = os.path.join(cfg.out_dir, "ckpt.pt")
    step, train_time, data_pos, val_loss = 0, 0.0, 0, float("nan")
    if cfg.resume:
        step, train_time, data_pos, val_loss, old_micro = resume(ckpt_path, cfg, meta, model, optimizer, scaler)
    elif os.path.exists(ckpt_path):
        raise CramError(f"{ckpt_path} already exists: pass --resume to continue it, or choose another --out_dir")

    train_model = model
    if world > 1 and not cfg.shard:
        train_model = torch.nn.parallel.DistributedDataParallel(  # no buffer to broadcast: pos_table is fixed
            model, device_ids=[device] if device.type == "cuda" else None, broadcast_buffers=False,
            gradient_as_bucket_view=True)  # no second copy of the gradients
    if cfg.compile == "true" or (cfg.compile == "auto" and compile_by_default(device)):  # CUDA, not on Windows
        train_model = torch.compile(train_model)  # static shapes: fixed micro-batch and fixed masked count

    peak, flops = device_peak_flops(device), flops_per_token(model, cfg, T)  # MFU in the step lines
    progress = (lambda: step / cfg.max_steps) if cfg.max_steps > 0 else (lambda: train_time / cfg.budget_hours / 3600)
    if master:  # rank 0 alone writes the logs (log() below) and the checkpoint
        os.makedirs(cfg.out_dir, exist_ok=True)
        for name in ("meta.json", meta.get("tokenizer_file") or ""):  # finetune_glue.py finds them beside ckpt.pt
            if name and os.path.exists(os.path.join(cfg.data_dir, name)):
                shutil.copyfile(os.path.join(cfg.data_dir, name), os.path.join(cfg.out_dir, name))
        log_file, metrics_file = (open(os.path.join(cfg.out_dir, name), "a", buffering=1, encoding="utf-8")
                                  for name in ("log.txt", "metrics.jsonl"))  # line-buffered: on disk at once

    def log(msg, **metrics):
        if master:
            print(msg, flush=True)
            log_file.write(msg + "\n")
            if metrics:
                metrics_file.write(json.dumps(metrics) + "\n")

    baseline = unigram_entropy(train_data, val_data[: cfg.eval_seqs]) if master else float("nan")
    log(f"config: {json.dumps(asdict(cfg))}")
    log(f"run: {json.dumps({**run_info(device), 'world_size': world, 'amp': str(dtype)})}")
    log(f"data: {cfg.data_dir} | {meta['num_sequences']} sequences of {T} | vocab {vocab_size} | "
        f"unigram baseline {baseline:.4f} nats")
    log(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters | {flops / 1e6:.0f} MFLOP/token | "
        f"{'resuming at step %d, %.1f%% of budget' % (step, 100 * progress()) if cfg.resume else 'fresh start'}"
        + (f", micro-batch {old_micro} -> {cfg.micro_batch}" if cfg.resume and old_micro != cfg.micro_batch else ""))

    def save():  # the raw (uncompiled) weights, so cram.py and finetune_glue.py load them anywhere
        weights, moments = full_state(model, optimizer) if cfg.shard else (model.state_dict(), optimizer.state_dict())
        if master:
            save_checkpoint(ckpt_path, {
                "model": weights, "optimizer": moments, "scaler": scaler.state_dict(),
                "step": step, "train_time": train_time, "data_pos": data_pos, "val_loss": val_loss,
                "config": asdict(cfg), "meta": meta, "vocab_size": vocab_size, "seq_len": T,
                "rng": {"torch": torch.get_rng_state()}, "info": run_info(device), "unigram_baseline": baseline})

    def log_eval(t):  # off the budget clock: rank 0 evaluates, under --shard with all ranks (a block gathers from all)
        loss, mask_loss = (evaluate(model, val_data, cfg, mask_id, vocab_size, amp, device) if master or cfg.shard
                           else (math.nan, math.nan))
        log(f"eval  {step:6d} | val loss {loss:.4f} | {baseline - loss:+.3f} nats under unigram | [MASK] slots "
            f"{mask_loss:.4f} ({baseline - mask_loss:+.3f}) | budget {100 * t:5.1f}%", step=step, val_loss=loss,
            val_loss_mask=mask_loss, budget=t, train_time=train_time, tokens=data_pos * T, flops=data_pos * T * flops)
        return loss

    stop, stopping = {}, False  # Ctrl+C, kill, Windows' Ctrl+Break: finish the step, save, exit (the end of train)
    for sig in {signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGBREAK", signal.SIGINT)}:  # stopping: on any rank
        signal.signal(sig, lambda signum, frame: stop.setdefault("signal", signal.Signals(signum).name))
    gen = torch.Generator(device=device)
    next_eval = (math.floor(progress() / cfg.eval_every) + 1) * cfg.eval_every
    last_ckpt = train_time
    # One loop, one shape: (evaluate / checkpoint, budget clock paused) -> check budget -> accumulate -> step -> log
    while True:
        t = progress()  # the budget clock runs only inside the step below: evaluation and checkpoints cost none
        if next_eval <= t < 1:  # all ranks decide alike: they share one clock (the end of the step)
            val_loss = log_eval(t)
            next_eval += cfg.eval_every
        if train_time - last_ckpt >= cfg.ckpt_every_min * 60 and t < 1:
            save()
            last_ckpt = train_time
        if world > 1:  # the other ranks wait here, off the clock, while rank 0 evaluates or writes
            torch.distributed.barrier()
        if t >= 1.0 or stopping:
            break

        t0 = time.perf_counter()
        unit = cfg.micro_batch * world
        batch = batch_size_at(t, unit, cfg.batch_size, cfg.ramp_until)
        lr = lr_at(t, cfg.lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        gen.manual_seed(cfg.seed * 1_000_003 + step * world + rank)  # masks are a pure function of the step
        accum, loss_sum = batch // unit, torch.zeros((), device=device)
        try:
            for micro in range(accum):  # this rank's slices of the step's rows
                ids = get_batch(train_data, data_pos + micro * unit + rank * cfg.micro_batch, cfg.micro_batch, device)
                inputs, positions, targets = mask_tokens(ids, mask_id, vocab_size, cfg.mask_rate, gen)
                sync = world == 1 or micro == accum - 1  # gradients cross ranks after the step's last micro-batch
                if cfg.shard:  # FSDP2's way: until then each rank sums whole gradients (4 bytes a parameter)
                    model.set_requires_gradient_sync(sync)
                with contextlib.nullcontext() if sync or cfg.shard else train_model.no_sync():  # DDP's way
                    with amp():
                        loss = train_model(inputs, positions, targets) / accum
                    scaler.scale(loss).backward()
                loss_sum += loss.detach()
        except torch.OutOfMemoryError as e:  # keep the work done, and say which knob to turn
            if not cfg.shard:  # rank 0's state; under --shard the other ranks wait in a gather: no checkpoint
                save()
            where = f"saved at step {step}" if master and not cfg.shard else f"rank {rank}"  # else: the last one
            raise CramError(f"out of memory with --micro_batch {cfg.micro_batch} ({str(e).split('. Including')[0]}; "
                            f"{where}): continue {ckpt_path} with --resume --micro_batch "
                            f"{max(1, cfg.micro_batch // 2)} (the batch target stays)") from None
        if world > 1:  # every rank logs and judges the mean loss: a NaN on one rank stops them all, together
            torch.distributed.all_reduce(loss_sum)
            loss_sum /= world
        loss_val = loss_sum.item()  # the one host sync per optimizer step
        if not math.isfinite(loss_val):  # rank 0 says it, once; the other ranks leave quietly
            saved = ckpt_path if os.path.exists(ckpt_path) else "none yet"
            raise SystemExit(1) if not master else CramError(
                f"loss is {loss_val} at step {step}: training diverged; the last good checkpoint ({saved}) was "
                "kept: resume it with a lower --lr or --grad_clip")
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        data_pos += batch
        dt = time.perf_counter() - t0
        train_time += dt
        step += 1
        stopping = "signal" in stop
        if world > 1:  # one clock (batch size, lr, evaluation, checkpoints, stop) and any signal, for all ranks
            sync = torch.tensor([train_time, float(stopping)], device=device, dtype=torch.float64)
            torch.distributed.all_reduce(sync, op=torch.distributed.ReduceOp.MAX)
            train_time, stopping = sync.tolist()
        tok_s = batch * T / dt
        mfu = f"{100 * tok_s * flops / (peak * world):.1f}%" if peak else "n/a"
        log(f"step {step:6d} | loss {loss_val:.4f} | lr {lr:.2e} | batch {batch:5d} | tok/s {tok_s:9,.0f} | "
            f"mfu {mfu:>5} | budget {100 * progress():5.1f}%", step=step, loss=loss_val, lr=lr, batch=batch,
            tok_s=tok_s, budget=progress(), train_time=train_time, tokens=data_pos * T, flops=data_pos * T * flops)

    val_loss = val_loss if stopping else log_eval(progress())  # a signal asks to leave soon: no final evaluation
    save()
    if world > 1:  # all ranks wait for rank 0's checkpoint, then leave together
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    if stopping:
        log(f"stopped by {stop.get('signal', 'a signal on another rank')} at step {step} ({100 * progress():.1f}% "
            f"of budget); checkpoint saved to {ckpt_path}; continue with the same command plus --resume")
        sys.exit(130)
    log(f"done: {step} steps, {data_pos * T:,} tokens, {train_time / 60:.1f} budget minutes; final val loss "
        f"{val_loss:.4f} vs unigram {baseline:.4f}; checkpoint {ckpt_path}")
    return val_loss


def main(argv=None):
    safe_console()  # a path the console's encoding lacks is printed escaped, never raised (Windows: cp1252)
    cfg = parse_config(argv)
    try:
        return train(cfg)
    except (CramError, OSError) as e:  # OSError: a full disk, no permission, an --out_dir that is a file
        sys.exit(f"cram.py: error: {e}" + ("" if isinstance(e, CramError) else ": check the path and the disk"))
    finally:  # FSDP2's modules hold their process group in reference cycles: free them now, not as Python shuts down
        gc.collect()  # (then gloo's threads may find no interpreter: an abort, 1 run in 12, notes)


if __name__ == "__main__":
    main()
