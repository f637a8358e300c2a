"""Draw a cram.py run from its metrics file: loss, learning rate and batch size against the budget used.

    python plot.py out                                  # -> out/training.png
    python plot.py out out_postnorm --png compare.png   # several runs on the same axes, and in numbers: each one's
                                                        # nats under unigram, its difference, the seeds' spread
    python plot.py runs/sweep/* --x tokens              # runs of other sizes on one axis of compute (log scale)
    python plot.py --model --preset tiny --png docs/model.png   # a picture of the model itself, with its shapes

--x picks the axis: budget (% used, the default), seconds (of budget), tokens (seen) or flops (training FLOPs:
tokens x the model's FLOPs per token, which cram.py logs): the last two compare models of different sizes.

Reads <run>/metrics.jsonl (one JSON object per optimizer step, plus one per evaluation) and the unigram baseline
from <run>/log.txt, dashed on the loss panel (the loss of guessing each token by its frequency). matplotlib (in
requirements.txt) is imported only here: cram.py itself never needs it.
--model draws cram.CrammedBERT instead: the whole encoder and one block, every shape read off a real forward pass.
"""
import argparse
import json
import math
import os
import re
import sys

from errors import written_whole
from hardware import safe_console

AXES = {"budget": ("budget", 100, "budget used (%)"), "seconds": ("train_time", 1, "training seconds (budget)"),
        "tokens": ("tokens", 1, "tokens seen"), "flops": ("flops", 1, "training FLOPs (FLOPs per token x tokens)")}


def read_metrics(run_dir, x="budget"):
    """(steps, evals): lists of dicts from run_dir/metrics.jsonl; step records have "loss", evals "val_loss"; of a
    step written twice (a resume after a crash), the later record."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise SystemExit(f"plot.py: error: no {path}: pass the --out_dir of a cram.py run")
    steps, evals = [], []
    with open(path, encoding="utf-8-sig", errors="replace") as f:  # an editor's BOM; bytes not UTF-8 fail below
        for n, line in enumerate(f, 1):
            try:  # an evaluation or a step record, with the numbers drawn below
                rec = json.loads(line)
                fields = ("step", "val_loss", "budget") if "val_loss" in rec else ("step", "loss", "lr", "batch",
                                                                                   "budget")
                if not all(isinstance(rec[k], (int, float)) for k in fields):
                    raise ValueError(f"one of {fields} is not a number")
            except (ValueError, KeyError, TypeError) as e:  # JSON errors are ValueErrors
                raise SystemExit(f"plot.py: error: {path} line {n} is not a cram.py record ({type(e).__name__}: {e}): "
                                 "the file is damaged: delete that line") from None
            if not isinstance(rec.get(AXES[x][0]), (int, float)):  # tokens, flops, train_time: since 2026-11-24
                raise SystemExit(f"plot.py: error: {path} line {n} has no number {AXES[x][0]!r} (an older run?): "
                                 "draw it with --x budget, or train it again")
            at = (rec["step"], "val_loss" in rec)  # a step's evaluation comes after its step record
            for kept in (steps, evals):  # a run resumed after a crash repeats the steps since its checkpoint: the
                while kept and (kept[-1]["step"], "val_loss" in kept[-1]) >= at:  # crashed run's records of them go
                    kept.pop()
            (evals if "val_loss" in rec else steps).append(rec)
    if not steps:
        raise SystemExit(f"plot.py: error: {path} holds no training steps yet: let the run take a step first")
    return steps, evals


def from_data_line(run_dir, pattern):
    """A number in the "data:" line of a run's log.txt (the last one if resumed), or None: no log, no match."""
    try:
        with open(os.path.join(run_dir, "log.txt"), encoding="utf-8", errors="replace") as f:
            found = re.findall(r"^data: .*" + pattern, f.read(), flags=re.MULTILINE)
    except OSError:  # no log.txt: a run copied without it still plots
        return None
    return float(found[-1]) if found else None


def unigram_baseline(run_dir):
    """The unigram baseline of a run (nats): the loss of guessing every token by its frequency alone, which cram.py's
    log measures everything against."""
    return from_data_line(run_dir, r"\| unigram baseline ([0-9.]+) nats$")


def run_config(run_dir, line="config"):
    """The config a run started with (log.txt's first "config:" line; "run": its versions, device and code), or {}."""
    try:
        with open(os.path.join(run_dir, "log.txt"), encoding="utf-8", errors="replace") as f:
            found = re.search(rf"^{line}: (\{{.*\}})$", f.read(), flags=re.MULTILINE)
        return json.loads(found.group(1)) if found else {}
    except (OSError, ValueError):
        return {}


# A range grows with the draws that span it: n seeds' spread (max - min) times FIVE_SEEDS[n] is what five would
# spread, on average (for normal draws the expected range is d2(n) standard deviations: d2(5) / d2(n)). Two seeds
# see about half of five's spread, so the noise they measure is doubled, not taken as it is (a trial, 2026-11-28).
# The bar stays five single seeds' spread for a difference of means too, as docs/records.md ranks its rows: simple
# and strict (means of many seeds vary less than single seeds); more seeds measure the noise better, not smaller.
FIVE_SEEDS = {n: 2.326 / d2 for n, d2 in enumerate((1.128, 1.693, 2.059, 2.326, 2.534, 2.704, 2.847, 2.970, 3.078,
                                                     3.173, 3.258, 3.336, 3.407, 3.472, 3.532, 3.588, 3.640, 3.689,
                                                     3.735), start=2)}


def side_by_side(runs):
    """Runs side by side in numbers: each one's steps, tokens, final validation loss and nats under its unigram
    baseline, and its difference from the first (from the mean of the first's seeds where it has several, so the
    folders' order does not decide). Runs that differ only in --seed are one run's seeds: the range of their nats
    under unigram, as five seeds would spread (FIVE_SEEDS), widest of the runs here, is the noise, and a difference
    inside it is within the noise (too small to tell from another seed); a run with seeds of its own is judged by
    their mean. A rerun of the same seed is not another seed, nor is
    a run of other code (the log's "code": its .py files' hash); runs whose validation differs (--mask_rate,
    --eval_seqs) get no verdict and are said not to compare."""
    rows, groups, valid, keys, seeds_run, codes = [], {}, [], [], [], []
    paths = [os.path.normpath(run) for run, _, _ in runs]
    names = [os.path.basename(p) for p in paths]
    if len(set(names)) < len(names):  # runs/base/seed0 beside runs/tweak/seed0: base/seed0, tweak/seed0
        common = os.path.commonpath([os.path.abspath(os.path.dirname(p)) for p in paths])
        names = [os.path.relpath(os.path.abspath(p), common) for p in paths]
    for run, steps, evals in runs:
        base, last = unigram_baseline(run), evals[-1]["val_loss"] if evals else None
        under = base - last if base is not None and last is not None else None
        rows.append((names[len(rows)], steps[-1].get("step", len(steps)), steps[-1].get("tokens"), last, under))
        config = run_config(run)
        same = {k: v for k, v in config.items() if k not in ("seed", "out_dir", "resume")}
        same["code"] = run_config(run, "run").get("code")  # the .py files that ran (logs from 2026-11-27 on)
        seeds_run.append(config.get("seed"))
        codes.append(same["code"])
        valid.append(None)  # what its validation scored: mask_rate, and eval_seqs or all the validation set's rows
        if config and under is not None:
            rows_scored = int(min(config.get("eval_seqs", 0), from_data_line(run, r"'val': (\d+)") or math.inf))
            valid[-1] = (config.get("mask_rate"), rows_scored)
        keys.append(json.dumps(same, sort_keys=True) if same and under is not None and "seed" in config else None)
        if keys[-1]:  # one run a seed: a rerun of it is not another seed
            groups.setdefault(keys[-1], {}).setdefault(config["seed"], (len(rows) - 1, under))
    sets = [list(g.values()) for g in groups.values() if len(g) > 1]  # each run's seeds: (row, nats under unigram)
    group = {i: j for j, seeds in enumerate(sets) for i, _ in seeds}  # row -> its set of seeds
    mean = [sum(u for _, u in seeds) / len(seeds) for seeds in sets]
    spread = [max(u for _, u in seeds) - min(u for _, u in seeds) for seeds in sets]
    as_five = [r * FIVE_SEEDS[min(len(seeds), 20)] for r, seeds in zip(spread, sets)]
    noise = max(as_five, default=None)
    widest = [rows[i][0] for i, _ in sets[as_five.index(noise)]] if sets else []  # the seeds that measured the noise
    first = group.get(0)  # the first run's seeds, if it has some: then their mean is what every run is held against
    reference = mean[first] if first is not None else rows[0][4]

    def judged(gap):
        few = f"; measured on {len(widest)} seeds: more measure it better" * (len(widest) < 5)
        return "(within the noise)" if abs(gap) <= noise else f"(beyond the noise, {noise:.3f}{few})"

    def verdict(i, gap):  # what run i's difference from the first says
        if keys[i] and keys[i] == keys[0] and seeds_run[i] != seeds_run[0]:
            return " (another seed of the first: the noise itself)"
        if i in group and group[i] != first:  # seeds against seeds: one seed against one says little
            return " (one of its seeds: the means, below, decide)"
        if keys[i] and keys[i] == keys[0]:  # a log without "code" (before 2026-11-27) cannot tell a change in the code
            return " (a rerun of the first: the same flags, seed and code)" if codes[i] else \
                " (the first's flags and seed: a rerun, or other code?)"
        return "" if noise is None else " " + judged(gap)
    width = max(24, *map(len, names))
    print(f"{'run':<{width}} {'steps':>7} {'tokens':>12} {'val loss':>9} {'under unigram':>14}  vs the first" +
          "'s seeds' mean" * (first is not None))
    for i, (name, step, tokens, last, under) in enumerate(rows):
        gap = None if i == 0 or under is None or reference is None else under - reference
        other_validation = valid[i] and valid[0] and valid[i] != valid[0]  # a number here would invite a comparison
        diff = "" if gap is None else "another validation: not comparable, below" if other_validation else \
            f"{gap:+.3f}" + verdict(i, gap)
        print(f"{name:<{width}} {step:>7,} {tokens or 0:>12,} {last if last is not None else float('nan'):>9.4f} "
              f"{under if under is not None else float('nan'):>+14.3f}  {diff}")
    for j, seeds in enumerate(sets):  # the mean and spread are what a row of docs/records.md gives
        print(f"seeds: {', '.join(rows[i][0] for i, _ in seeds)} differ only in --seed: mean {mean[j]:+.3f}, spread "
              f"{spread[j]:.3f} nats under unigram" + f" ({as_five[j]:.3f} as five seeds would spread)" *
              (len(seeds) != 5))
    if noise is not None:
        print(f"the noise: {noise:.3f} nats, the spread five seeds of {', '.join(widest)} would show, the widest of "
              "one run's seeds here; a gap within it is within the noise, as another seed alone could make it")
    whose = "the first" if first is None else "the first's"  # the first run, or the mean of its seeds
    for j, seeds in enumerate(sets):  # seeds against the first: by their mean, whatever the order of the folders
        if j != first and reference is not None and valid[seeds[0][0]] == valid[0]:
            gap = mean[j] - reference
            print(f"means: {', '.join(rows[i][0] for i, _ in seeds)} against {whose}: {gap:+.3f} nats under unigram "
                  + judged(gap))
    if len(rows) > 1 and reference is None:
        print(f"{rows[0][0]} has no validation loss under a unigram baseline (no log.txt, or no eval line): nothing to "
              "hold the other runs against")
    if len(validations := {v for v in valid if v}) > 1:
        print("these runs' validation losses do not compare: they mask at other rates or score other rows (mask_rate, "
              f"eval_seqs: {', '.join(map(str, sorted(validations, key=str)))}); to change training's masking, "
              "--mask_from and --mask_to keep evaluation's --mask_rate")
    if other := [rows[i][0] for i in range(1, len(rows)) if keys[i] and codes[i] and codes[0] and codes[i] != codes[0]]:
        print(f"{', '.join(other)}: other code than the first: where the change is in what evaluation runs too "
              "(mask_tokens, the model), the validation loss measures something else")
    if len(rows) > 1 and noise is None:
        print("no two runs here differ only in --seed, so the noise is unknown: the tiny preset's spread over 5 seeds "
              "of 1,000 steps is in the README (tweak and rerun)")
    return noise


# ----------------------------------------------------------------------------------------------------------------
# --model: a picture of cram.CrammedBERT, for slides. The shapes come from forward hooks on a real model of the preset.

VOCAB = {"tiny": 8192, "paper": 32768}  # the main job's vocabulary (prepare.py --vocab_size 8192); the paper's


def model_shapes(preset, batch=2):
    """(cfg, vocab, k, shapes, params): each stage's output shape on `batch` rows of 128 tokens, read off hooks."""
    import torch
    import cram
    cfg = cram.Config(**{**cram.PRESETS[preset], "preset": preset})
    T, V, k = 128, VOCAB[preset], round(cfg.mask_rate * 128)
    model = cram.CrammedBERT(cfg, V, T).eval()
    b = model.blocks[0]
    stages = {"tok": model.embed.tok, "embed": model.embed, "norm1": b.norm1, "qkv": b.attn.qkv, "attn": b.attn,
              "norm2": b.norm2, "down": b.ffn.down, "block": b, "final": model.final_norm, "logits": model}
    shapes = {}

    def keep(name):  # a forward hook that returns None leaves the output as it is
        return lambda module, inputs, out: shapes.__setitem__(name, tuple(out.shape))
    hooks = [m.register_forward_hook(keep(n)) for n, m in stages.items()]
    ids = torch.randint(5, V, (batch, T), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(k).expand(batch, k)  # (B, k): any k positions give the shapes
    with torch.no_grad():
        model(ids, positions)
    for h in hooks:
        h.remove()
    shapes["up"] = shapes["norm2"][:-1] + (b.ffn.up.out_features,)  # up's two halves: two matmuls, one Linear here
    shapes = {n: "(B, " + ", ".join(map(str, s[1:])) + ")" for n, s in shapes.items()}  # rows of a micro-batch: B
    params = {"all": sum(p.numel() for p in model.parameters()), "embedding": model.embed.tok.weight.numel(),
              "block": sum(p.numel() for p in b.parameters())}
    return cfg, V, k, shapes, params


def draw_model(plt, preset):
    """The whole encoder (left) and one pre-LN block (right), top to bottom, with the shape after each stage."""
    from matplotlib.patches import FancyBboxPatch
    cfg, V, k, s, n = model_shapes(preset)
    fig = plt.figure(figsize=(13, 8.6))
    colors = {"emb": "#cfe2f3", "norm": "#e6e6e6", "attn": "#fce5cd", "ffn": "#d9ead3", "out": "#e4d7f0", "io": "white"}

    def box(ax, x, y, text, kind, w=4.4, h=0.72, shape=None):
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.04,rounding_size=0.12",
                                    fc=colors[kind], ec="#444", lw=1.2 if kind != "io" else 0))
        ax.text(x, y, text, ha="center", va="center", fontsize=10.5)
        if shape:  # the output's shape, beside the arrow that leaves the box
            ax.text(x + 0.15, y - h / 2 - 0.2, shape, ha="left", va="center", fontsize=9.5, family="monospace",
                    color="#1f4e79")

    def arrow(ax, a, b, **kw):
        ax.annotate("", xy=b, xytext=a, arrowprops=dict(arrowstyle="-|>", color="#333", lw=1.3, **kw))

    def plus(ax, x, y):
        ax.add_patch(plt.Circle((x, y), 0.22, fc="white", ec="#333", lw=1.3))
        ax.text(x, y, "+", ha="center", va="center", fontsize=14)

    enc, blk = fig.add_axes([0.0, 0.0, 0.5, 0.92]), fig.add_axes([0.5, 0.0, 0.5, 0.92])
    for ax in (enc, blk):
        ax.set_xlim(0, 10), ax.set_ylim(0, 13.4), ax.axis("off")
    # the encoder, left
    x = 4.2
    box(enc, x, 12.8, f"token ids (B, T = 128): {k} of each row masked", "io")
    box(enc, x, 11.6, f"token embedding E  ({V:,} x {cfg.n_embd})", "emb", shape=s["tok"])
    box(enc, 8.1, 10.5, f"positions: sin/cos table (128, {cfg.n_embd})\nx one learned scalar", "emb", w=3.7, h=0.9)
    plus(enc, x, 10.5)
    box(enc, x, 9.5, "LayerNorm", "norm", shape=s["embed"])
    box(enc, x, 8.1, f"Block x {cfg.n_layer}\n(one block: right)", "attn", h=1.1, shape=s["block"])
    box(enc, x, 6.6, f"keep the k = {k} masked positions\n(sparse prediction)", "out", h=0.9,
        shape=s["final"])  # what the final LayerNorm receives (encode gathers the positions before it)
    box(enc, x, 5.3, "final LayerNorm", "norm", shape=s["final"])
    box(enc, x, 4.1, r"tied decoder: $h\,E^T$  (no bias)", "out", shape=s["logits"])
    box(enc, x, 2.8, f"cross-entropy against the {k} targets (B, {k})\n= the MLM loss, in nats", "io", h=0.9)
    for a, b in ((12.55, 11.96), (11.24, 10.72), (10.28, 9.86), (9.14, 8.65), (7.55, 7.05), (6.15, 5.66),
                 (4.94, 4.46), (3.74, 3.25)):
        arrow(enc, (x, a), (x, b))
    arrow(enc, (6.25, 10.5), (4.42, 10.5))
    enc.plot([2.0, 1.2, 1.2], [11.6, 11.6, 4.1], color="#555", lw=1.2, ls="--")  # the decoder is the embedding
    arrow(enc, (1.2, 4.1), (1.96, 4.1), linestyle="--")
    enc.text(1.05, 7.9, "the same weights E", rotation=90, ha="right", va="center", fontsize=9.5, color="#555")
    enc.text(x, 13.35, "the encoder", ha="center", fontsize=12, weight="bold")
    enc.text(0.3, 1.6, f"{n['all'] / 1e6:.2f} M parameters: the embedding {n['embedding'] / 1e6:.2f} M, "
             f"each block {n['block'] / 1e6:.2f} M.\nC = {cfg.n_embd} wide, {cfg.n_head} heads of D = "
             f"{cfg.n_embd // cfg.n_head}; B = rows in a micro-batch ({cfg.micro_batch or 'all the GPU holds'}).\n"
             "No biases in the block's Linears; no dropout in pretraining.", fontsize=9.5, va="top")
    # one block, right
    x, C, F = 4.0, cfg.n_embd, cfg.ffn_hidden
    bias = r" - \mathrm{slope}\,|i - j|" if cfg.local_bias > 0 else ""  # the tiny preset's local bias (docs/notes.md)
    box(blk, x, 12.8, f"x  {s['embed']}", "io")
    box(blk, x, 11.8, "LayerNorm", "norm", shape=s["norm1"])
    box(blk, x, 10.75, f"qkv: Linear {C} -> 3 x {C}", "attn", shape=s["qkv"])
    box(blk, x, 9.7, f"{cfg.n_head} heads: q, k, v each (B, {cfg.n_head}, 128, {C // cfg.n_head})", "attn")
    box(blk, x, 8.55, rf"$\mathrm{{softmax}}(q k^T / \sqrt{{D}}{bias})\,v$" + "\n(local bias: tiny only)" * bool(bias),
        "attn", w=5.0, h=0.8,
        shape=f"(B, {cfg.n_head}, 128, {C // cfg.n_head}) -> (B, 128, {C})")
    box(blk, x, 7.45, f"out: Linear {C} -> {C}", "attn", shape=s["attn"])
    plus(blk, x, 6.6)
    box(blk, x, 5.7, "LayerNorm", "norm")
    box(blk, x, 4.7, f"up: Linear {C} -> {F}", "ffn", shape=s["up"])
    box(blk, x, 3.65, "split in halves x, gate: GELU(gate) * x", "ffn", w=5.0, shape=f"(B, 128, {F // 2})")
    box(blk, x, 2.6, f"down: Linear {F // 2} -> {C}", "ffn", shape=s["down"])
    plus(blk, x, 1.75)
    box(blk, x, 0.95, f"to the next block  {s['block']}", "io")
    for a, b in ((12.55, 12.16), (11.44, 11.11), (10.39, 10.06), (9.34, 8.95), (8.15, 7.81), (7.09, 6.82),
                 (6.38, 6.06), (5.34, 5.06), (4.34, 4.01), (3.29, 2.96), (2.24, 1.97), (1.53, 1.2)):
        arrow(blk, (x, a), (x, b))
    for top, bottom in ((12.35, 6.6), (6.2, 1.75)):  # the residual paths: x + Attn(LN(x)), then x + FFN(LN(x))
        blk.plot([x, 8.6, 8.6], [top, top, bottom], color="#333", lw=1.3)
        arrow(blk, (8.6, bottom), (x + 0.24, bottom))
    blk.text(8.8, 9.5, "residual", rotation=90, va="center", fontsize=9.5, color="#555")
    blk.text(8.8, 3.9, "residual", rotation=90, va="center", fontsize=9.5, color="#555")
    blk.text(x, 13.35, "one block (pre-LN)", ha="center", fontsize=12, weight="bold")
    blk.text(0.2, 9.1, "attention", rotation=90, va="center", fontsize=11, color="#b45f06")
    blk.text(0.2, 3.6, "gated-GELU\nfeed-forward", rotation=90, va="center", ha="center", fontsize=11, color="#38761d")
    fig.suptitle(f"crammed BERT, preset {preset!r}: {cfg.n_layer} pre-LN blocks x {cfg.n_embd} wide, "
                 f"vocabulary {V:,} (cram.py; shapes from a forward pass)", fontsize=13, y=0.975)
    return fig


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only, no screen needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("plot.py: error: matplotlib is not installed: pip install matplotlib")
    return plt


def save(fig, png):
    kind = os.path.splitext(png)[1][1:].lower() or "png"  # no suffix: a PNG, as before
    if kind not in fig.canvas.get_supported_filetypes():
        raise SystemExit(f"plot.py: error: --png {png}: matplotlib cannot write .{kind} files: name a .png (or .svg, "
                         ".pdf)")
    try:
        with written_whole(png) as f:  # written whole, then renamed: never a half-written picture
            fig.savefig(f, dpi=110, format=kind)
    except OSError as e:  # a folder of that name, no such folder, no permission, a full disk
        raise SystemExit(f"plot.py: error: cannot write {png} ({e.strerror or e}): name a file in a folder you can "
                         "write, with --png") from None
    print(f"plot.py: wrote {png}")
    return png


def main(argv=None):
    safe_console()  # a folder name the console's encoding lacks is printed escaped (Windows: cp1252)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("runs", nargs="*", help="cram.py output folders (each holds metrics.jsonl)")
    p.add_argument("--png", default=None, help="image to write (default: <first run>/training.png; --model: model.png)")
    p.add_argument("--x", default="budget", choices=list(AXES), help="the horizontal axis (default: budget)")
    p.add_argument("--model", action="store_true", help="draw the model of --preset instead of runs")
    p.add_argument("--preset", default="tiny", choices=list(VOCAB), help="with --model: which model (default: tiny)")
    args = p.parse_args(argv)
    if args.model:
        if args.runs:
            p.error("--model draws the model, not runs: leave out the folders")
        return save(draw_model(pyplot(), args.preset), args.png or "model.png")
    if not args.runs:
        p.error("pass the --out_dir of a cram.py run (or --model)")
    runs = [(run, *read_metrics(run, args.x)) for run in args.runs]
    side_by_side(runs)  # the numbers first: they need no matplotlib
    key, scale, label = AXES[args.x]
    compare = args.x in ("tokens", "flops")
    plt = pyplot()

    fig, (ax_loss, ax_lr, ax_batch) = plt.subplots(3, 1, figsize=(7, 8), sharex=True,
                                                   gridspec_kw={"height_ratios": [2, 1, 1]})
    baselines = set()
    for i, (run, steps, evals) in enumerate(runs):
        color = f"C{i}"
        budget = [scale * s[key] for s in steps]
        name, at = os.path.basename(os.path.normpath(run)), [scale * e[key] for e in evals]
        if not compare:  # runs of several sizes show validation alone, or the picture is a tangle
            ax_loss.plot(budget, [s["loss"] for s in steps], color=color, alpha=0.35, lw=0.8)
        ax_loss.plot(at, [e["val_loss"] for e in evals], "o-", color=color,
                     label=f"{name}: validation" + " (train faint)" * (not compare))
        if evals and "val_loss_mask" in evals[0] and not compare:  # written by cram.py since 2026-11-23
            ax_loss.plot(at, [e["val_loss_mask"] for e in evals], "s--", color=color, label=f"{name}: [MASK] slots")
        if (unigram := unigram_baseline(run)) is not None and unigram not in baselines:  # the bar to get under
            ax_loss.axhline(unigram, color=color, ls="--", lw=1, label=f"{name}: unigram baseline {unigram:.2f}")
            baselines.add(unigram)  # runs on the same data share one line
        ax_lr.plot(budget, [s["lr"] for s in steps], color=color)
        ax_batch.plot(budget, [s["batch"] for s in steps], color=color)
    ax_loss.set_ylabel("MLM loss (nats)")
    ax_loss.legend(fontsize="small" if len(runs) < 3 else "x-small", ncol=1 if len(runs) < 3 else 2)
    ax_lr.set_ylabel("learning rate")
    ax_batch.set_ylabel("batch (sequences)")
    ax_batch.set_xlabel(label)
    if compare:  # sizes far apart: a log axis shows each run's whole curve
        ax_batch.set_xscale("log")
    for ax in (ax_loss, ax_lr, ax_batch):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return save(fig, args.png or os.path.join(args.runs[0], "training.png"))


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
