"""The GPU check: everything a GPU changes, in one command of 8-9 minutes on one GPU, and one page.

    python gpu_check.py                          # the suite, pretraining + resume, fine-tuning, the tools, bench
    python gpu_check.py --minutes 0.5 --skip tests  # shorter: half a minute of pretraining, no suite
    python gpu_check.py --official ../cramming   # bench also times the paper's own model (a clone of its code)
    python gpu_check.py --experiments            # then the fine-tuning step profiled and compiled (minutes)
    python gpu_check.py --experiments --glue_dir glue  # and RTE from GLUE's TSV files, plain and compiled

Each step is the command a user types, run as a process with its own time limit; what it printed goes to
out/gpu_check/<step>.txt, and out/gpu_check/report.md gets a table: the machine, each command, its wall time, its exit
code and the number it is there for (tokens/s and MFU, the fine-tuning pace and its projection of the paper's GLUE
protocol, on a GPU from BBC News run as the protocol runs: 5 seeds compiled as one model). docs/gpu.md keeps the
measured rows. Off a GPU it runs too (the paths, not the speed).
"""
import argparse
import contextlib
import importlib.util
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

import hardware
from finetune_glue import PROTOCOL_STEPS

ROOT = Path(__file__).resolve().parent


def steps(args, out):
    """(name, limit in seconds, command, what to read from its output) for each step, in order."""
    py, run, data = sys.executable, out / "run", out / "data"
    micro = ["--micro_batch", str(args.micro_batch)] if args.micro_batch else []  # else the preset's (paper: auto;
    # bench beside HF's BERT and the official model: half of it, 256 on an 80 GB GPU, as docs/gpu.md's rows)
    paper = ["--preset", args.preset, "--data_dir", str(data), *micro, "--out_dir", str(run), "--eval_every", "0.5"]
    hours = args.minutes / 60
    cuda, glue_out = torch.device("cuda"), ["--out", str(out / "glue")]
    protocol = torch.cuda.is_available() and hardware.compile_pays(cuda, PROTOCOL_STEPS, heads=3)  # GLUE's compiles
    bbc = ["--seeds", "5", "--compile"] if protocol else ["--seeds", "1"]  # BBC News as the GLUE protocol runs
    # where it compiles (finetune_glue.py's default for a run that long): 5 seeds compiled as one model
    pace = r"pace: (.*?ms a step.*?\)).*?(protocol.*? ~ [\d.]+ h)"  # what finetune_glue.py prints
    seeds_pattern = (r"1 seed: ([\d.]+ ms).*5 seeds as one model: ([\d.]+ ms).*?\(([\d.]+x) the first\).*? "
                     r"~ ([\d.]+ h)")  # what bench.py --finetune 1,5 prints
    xdist = ["-n", str(args.workers)] if importlib.util.find_spec("xdist") else []  # pytest-xdist, if installed
    plan = [
        ("tests", 300, [py, "-m", "pytest", "-v", "-rs", *xdist, "-p", "no:cacheprovider", "--durations", "10",
                        "tests"],  # -v: each test's name as it ends (a suite stopped at its limit shows which were
         # left); -rs: why each skipped test skipped; then the 10 slowest; the summary: "=== 1 failed, 624 passed, ..."
         r"(?m)^=* ?(\d+ (?:failed|passed|errors?)\b[^\n]*?) in ([\d.]+)s"),
        ("prepare", 120, [py, "prepare.py", "--out", str(data)], r"(rows \{.*?\})"),
        ("pretrain", 60 + 1.5 * 60 * args.minutes, [py, "cram.py", *paper, "--budget_hours", f"{hours * 2 / 3:.4f}"],
         None),
        ("resume", 60 + 60 * args.minutes, [py, "cram.py", *paper, "--budget_hours", f"{hours:.4f}", "--resume"],
         None),
        ("examples", 60, [py, "examples/bbc_news.py", "--out", str(out / "bbc_news")], None),
        ("finetune", 180, [py, "finetune_glue.py", str(run / "ckpt.pt"), "--train_file",
                           str(out / "bbc_news/train.csv"), "--validation_file", str(out / "bbc_news/dev.csv"),
                           "--save_model", str(out / "classifier"), *bbc, *glue_out], pace),
        ("classify", 60, [py, "classify.py", str(out / "classifier"), "Shares rose after record profits"], None),
        ("fill_mask", 60, [py, "fill_mask.py", str(run / "ckpt.pt"), "the government said the [MASK] would rise ."],
         None),
    ]
    # bench last of the check: a lease that ends early keeps what a user runs (an H100's, 2026-11-27, ran out after
    # the suite, bench's 137 s and prepare)
    plan.append(("bench", 200, [py, "bench.py", "--preset", args.preset, *micro, "--hf", "--steps", "20", "--rounds",
                                "1", "--profile", *(["--official", args.official] if args.official else [])],
                 r"ours: +([\d,]+ tokens/s).*?(MFU [\d.]+%)"))
    if args.experiments:  # RTE from GLUE's own files, one seed (20 s on an H200: out of the check, which ran past
        # 465 s with it); the fine-tuning step profiled, 1 seed and 5 as one; compiled, on RTE's 4 widths: minutes
        rte = [py, "finetune_glue.py", str(run / "ckpt.pt"), "--glue_dir", args.glue_dir, "--tasks", "rte", *glue_out]
        if args.glue_dir:
            plan.append(("glue_rte", 180, [*rte, "--seeds", "1"], pace))
        plan.append(("finetune_seeds", 150, [py, "bench.py", "--preset", args.preset, "--finetune", "1,5",
                                             "--seq_len", "64", "--steps", "50", "--warmup", "5", "--profile"],
                     seeds_pattern))
        if args.glue_dir:
            plan.append(("glue_rte_compiled", 360, [*rte, "--seeds", "5", "--seeds_together", "0", "--compile"],
                         pace))
        plan.append(("finetune_compiled", 240, [py, "bench.py", "--preset", args.preset, "--finetune", "1,5",
                                                "--seq_len", "64", "--steps", "50", "--warmup", "5", "--compile"],
                     seeds_pattern))
    skip = {name.strip() for name in args.skip.split(",")} - {""}
    if unknown := skip - {p[0] for p in plan}:  # a typo would run a step (the suite: minutes) it meant to skip
        sys.exit(f"gpu_check.py: error: --skip {','.join(sorted(unknown))}: no such step here; the steps: "
                 f"{','.join(p[0] for p in plan)}")
    if not (left := [p for p in plan if p[0] not in skip]):
        sys.exit("gpu_check.py: error: --skip leaves no step to run")
    return left


def run_step(command, limit):
    """(what it printed, its exit code or "timeout"). Past its limit the step is stopped with every process it
    started (a process group of its own, on Linux and macOS): pytest's xdist workers, left running, would hold the
    GPU's memory and the output pipe into the next step."""
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            encoding="utf-8", errors="replace", start_new_session=os.name == "posix")

    def stop():  # the group: the step and all it started
        if os.name != "posix":
            return proc.kill()
        with contextlib.suppress(ProcessLookupError):  # the group may have ended already
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        return proc.communicate(timeout=limit)[0], proc.returncode
    except subprocess.TimeoutExpired:
        stop()
        return proc.communicate()[0] + f"\n(stopped at its limit of {limit:.0f} s)", "timeout"
    except BaseException:  # Ctrl-C, or SIGTERM (hardware.sigterm_as_ctrl_c): the step, in a group of its own, too
        stop()
        raise


def steady(run, since=(0, 0)):
    """The pretraining log's pace at full batch: the median tokens/s and MFU of the last 10 steps that this step ran at
    its last batch size, not the ramp's smaller ones (since: the bytes metrics.jsonl and log.txt held before it; a
    resume appends to both)."""
    metrics, log = ((run / name).read_bytes()[skip:].decode("utf-8") for name, skip in
                    zip(("metrics.jsonl", "log.txt"), since))
    steps = [m for m in map(json.loads, metrics.splitlines()) if "tok_s" in m]
    mfus = re.findall(r"\| mfu +(\S+)", log)[-len(steps):] if steps else []  # a step line each: "39.5%", or "n/a"
    last = [(m, mfu) for m, mfu in zip(steps, mfus) if m["batch"] == steps[-1]["batch"]][-10:]
    if not last:
        return ""
    mfu = sorted(float(x.rstrip("%")) for _, x in last if x != "n/a")  # n/a: off a GPU whose peak is known
    return f"{sorted(m['tok_s'] for m, _ in last)[len(last) // 2]:,.0f} tokens/s, MFU " + \
        (f"{mfu[len(mfu) // 2]:.1f}%" if mfu else "n/a") + f" (median of the last {len(last)} steps at batch " \
        f"{steps[-1]['batch']})"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--out", default="out/gpu_check", help="where the report and each step's output go")
    p.add_argument("--minutes", type=float, default=1.2, help="minutes of pretraining budget, a third of them after "
                   "the resume (1.2: ~2 minutes of wall time for both, start-up and compiling included)")
    p.add_argument("--micro_batch", type=int, default=0, help="cram.py's and bench.py's micro-batch (default: cram.py "
                   "the preset's, the paper's as many as the GPU allows; bench.py beside HF's BERT half that)")
    p.add_argument("--preset", default="paper", help="cram.py's preset (tiny: a dry run of the paths on a CPU)")
    p.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1), help="pytest-xdist workers for the "
                   "suite (default: the cores, 12 at most)")
    p.add_argument("--glue_dir", help="GLUE's TSV folder: with --experiments, RTE from it too")
    p.add_argument("--official", metavar="DIR", help="a clone of the paper's repository: bench times its model too")
    p.add_argument("--experiments", action="store_true", help="then RTE one seed (with --glue_dir), bench.py "
                   "--finetune 1,5 --profile, RTE's 5 seeds compiled as one model (with --glue_dir) and bench.py "
                   "--finetune 1,5 --compile (minutes: ~45 s a graph)")
    p.add_argument("--skip", default="", help="steps to leave out, comma-separated (e.g. tests,bench)")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    plan = steps(args, out)  # a bad --skip is refused here, before any folder is made
    if (out / "run" / "ckpt.pt").exists() or (out / "report.md").is_file() and (out / "report.md").stat().st_size:
        sys.exit(f"gpu_check.py: error: {out} holds an earlier check's run: pass another --out, or delete it")
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text("", encoding="utf-8")  # written after every step: writable, or said now
    except OSError as e:  # --out a file, a folder it may not write
        sys.exit(f"gpu_check.py: error: cannot write in --out {out} ({e.strerror or e}): name a folder you can write")
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA GPU"
    head = f"{gpu} | torch {torch.__version__} | Python {platform.python_version()} | {os.cpu_count()} cores | " \
           f"{time.strftime('%Y-%m-%d %H:%M')}"
    rows, codes, start = [], [], time.time()
    print(head, flush=True)
    for name, limit, command, pattern in plan:
        t0, logs = time.time(), [out / "run" / f for f in ("metrics.jsonl", "log.txt")]
        since = [path.stat().st_size if path.exists() else 0 for path in logs]  # what an earlier step wrote
        with hardware.sigterm_as_ctrl_c():  # `timeout` (.ci/gpu_lease) stops the check: run_step stops the step
            text, code = run_step(command, limit)
        seconds = time.time() - t0
        (out / f"{name}.txt").write_text(text, encoding="utf-8")
        found = re.search(pattern, text, re.S) if pattern else None
        number = " | ".join(found.groups()) if found else ""
        if name in ("pretrain", "resume") and all(path.exists() for path in logs):
            number = steady(out / "run", since)
        shown = [Path(c).name if c == sys.executable else c for c in command]  # quoted as this system's shell wants
        rows.append(f"| {name} | `{shlex.join(shown) if os.name == 'posix' else subprocess.list2cmdline(shown)}` | "
                    f"{seconds:.0f} | {code} | {number} |")
        codes.append(code)
        print(f"{name}: exit {code}, {seconds:.0f} s {number}", flush=True)
        if code != 0:
            print("\n".join(text.splitlines()[-15:]), flush=True)
        report = "\n".join([f"# GPU check: {head}", "", "| step | command | seconds | exit | number |",
                            "|---|---|---:|---|---|", *rows, "",
                            f"Total {time.time() - start:.0f} s. Each step's output: {out}/<step>.txt."]) + "\n"
        (out / "report.md").write_text(report, encoding="utf-8")  # after every step: a check stopped early keeps it
    print("\n" + report)
    return 0 if all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the running step was stopped with it
        print("gpu_check.py: stopped: report.md keeps the steps done before", file=sys.stderr)
        sys.exit(130)  # as cram.py and finetune_glue.py
