"""Draw a cram.py run from its metrics file: loss, learning rate and batch size against the budget used.

    python plot.py out                                  # -> out/training.png
    python plot.py out out_postnorm --png compare.png   # several runs on the same axes, labelled by folder
    python plot.py runs/sweep/* --x tokens              # runs of other sizes on one axis of compute (log scale)

--x picks the axis: budget (% used, the default), seconds (of budget), tokens (seen) or flops (training FLOPs:
tokens x the model's FLOPs per token, which cram.py logs): the last two compare models of different sizes.

Reads <run>/metrics.jsonl (one JSON object per optimizer step, plus one per evaluation) and the unigram baseline
from <run>/log.txt, dashed on the loss panel (the loss of guessing each token by its frequency). matplotlib is an
optional extra (`pip install matplotlib`), imported only here: cram.py itself never needs it.
"""
import argparse
import json
import os
import re
import sys

from hardware import safe_console

AXES = {"budget": ("budget", 100, "budget used (%)"), "seconds": ("train_time", 1, "training seconds (budget)"),
        "tokens": ("tokens", 1, "tokens seen"), "flops": ("flops", 1, "training FLOPs (FLOPs per token x tokens)")}


def read_metrics(run_dir, x="budget"):
    """(steps, evals): lists of dicts from run_dir/metrics.jsonl; step records have "loss", evals "val_loss"."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise SystemExit(f"plot.py: error: no {path}: pass the --out_dir of a cram.py run")
    steps, evals = [], []
    with open(path, encoding="utf-8", errors="replace") as f:  # bytes that are not UTF-8 fail as JSON below
        for n, line in enumerate(f, 1):
            try:  # an evaluation or a step record, with the numbers drawn below
                rec = json.loads(line)
                fields = ("val_loss", "budget") if "val_loss" in rec else ("loss", "lr", "batch", "budget")
                if not all(isinstance(rec[k], (int, float)) for k in fields):
                    raise ValueError(f"one of {fields} is not a number")
            except (ValueError, KeyError, TypeError) as e:  # JSON errors are ValueErrors
                raise SystemExit(f"plot.py: error: {path} line {n} is not a cram.py record ({type(e).__name__}: {e}): "
                                 "the file is damaged: delete that line") from None
            if not isinstance(rec.get(AXES[x][0]), (int, float)):  # tokens, flops, train_time: since 2026-11-24
                raise SystemExit(f"plot.py: error: {path} line {n} has no number {AXES[x][0]!r} (an older run?): "
                                 "draw it with --x budget, or train it again")
            (evals if "val_loss" in rec else steps).append(rec)
    if not steps:
        raise SystemExit(f"plot.py: error: {path} holds no training steps yet: let the run take a step first")
    return steps, evals


def unigram_baseline(run_dir):
    """The unigram baseline of a run (nats): the loss of guessing every token by its frequency alone, which cram.py's
    log measures everything against (its "data:" line in log.txt, the last one if resumed); None if not found."""
    try:
        with open(os.path.join(run_dir, "log.txt"), encoding="utf-8", errors="replace") as f:
            found = re.findall(r"^data: .*\| unigram baseline ([0-9.]+) nats$", f.read(), flags=re.MULTILINE)
    except OSError:  # no log.txt: a run copied without it still plots
        return None
    return float(found[-1]) if found else None


def main(argv=None):
    safe_console()  # a folder name the console's encoding lacks is printed escaped (Windows: cp1252)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="cram.py output folders (each holds metrics.jsonl)")
    p.add_argument("--png", default=None, help="image to write (default: <first run>/training.png)")
    p.add_argument("--x", default="budget", choices=list(AXES), help="the horizontal axis (default: budget)")
    args = p.parse_args(argv)
    runs = [(run, *read_metrics(run, args.x)) for run in args.runs]
    key, scale, label = AXES[args.x]
    compare = args.x in ("tokens", "flops")
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only, no screen needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("plot.py: error: matplotlib is not installed: pip install matplotlib")

    fig, (ax_loss, ax_lr, ax_batch) = plt.subplots(3, 1, figsize=(7, 8), sharex=True,
                                                   gridspec_kw={"height_ratios": [2, 1, 1]})
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
        if (unigram := unigram_baseline(run)) is not None:  # the bar to get under: where pretraining starts from
            ax_loss.axhline(unigram, color=color, ls="--", lw=1, label=f"{name}: unigram baseline {unigram:.2f}")
        ax_lr.plot(budget, [s["lr"] for s in steps], color=color)
        ax_batch.plot(budget, [s["batch"] for s in steps], color=color)
    ax_loss.set_ylabel("MLM loss (nats)")
    ax_loss.legend()
    ax_lr.set_ylabel("learning rate")
    ax_batch.set_ylabel("batch (sequences)")
    ax_batch.set_xlabel(label)
    if compare:  # sizes far apart: a log axis shows each run's whole curve
        ax_batch.set_xscale("log")
    for ax in (ax_loss, ax_lr, ax_batch):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    png = args.png or os.path.join(args.runs[0], "training.png")
    tmp = png + ".tmp.png"
    fig.savefig(tmp, dpi=110)  # written whole, then renamed: never a half-written picture
    os.replace(tmp, png)
    print(f"plot.py: wrote {png}")
    return png


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
