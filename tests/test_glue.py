"""finetune_glue.py as a specification: GLUE TSV parsing, inputs, metrics, the table, and one-line errors."""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import classifier  # noqa: E402
import classify  # noqa: E402
import hardware  # noqa: E402
import finetune_glue as fg  # noqa: E402
import tasks  # noqa: E402
from cram import Config, CrammedBERT  # noqa: E402

from conftest import WORDS, built_once  # noqa: E402

# Tiny GLUE files in each task's real layout: headerless CoLA, MRPC with a byte-order mark, 10-column STS-B with
# float scores, MNLI with many columns and two dev sets, and quote characters that are text, not CSV quoting.
LAYOUTS = {
    "CoLA": (None, lambda i, a, b: ["gj04", str(i % 2), "*" if i % 2 == 0 else "", a]),
    "SST-2": (["sentence", "label"], lambda i, a, b: [a + " ", str(i % 2)]),
    "MRPC": (["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
             lambda i, a, b: [str(i % 2), str(1000 + i), str(2000 + i), a, b]),
    "STS-B": (["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2",
               "score"], lambda i, a, b: [str(i), "main-captions", "MSRvid", "2012test", f"{i:04d}", "none", "none",
                                          a, b, f"{(i * 0.75) % 5:.3f}"]),
    "QQP": (["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
            lambda i, a, b: [str(i), str(2 * i), str(2 * i + 1), a + " ?", b + " ?", str(i % 2)]),
    "MNLI": (["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
              "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "label1", "gold_label"],
             lambda i, a, b: [str(i), "1", f"{i}e", "fiction", "( x )", "( y )", "(ROOT x)", "(ROOT y)", a, b,
                              "neutral", ["entailment", "neutral", "contradiction"][i % 3]]),
    "QNLI": (["index", "question", "sentence", "label"],
             lambda i, a, b: [str(i), a + " ?", b, ["entailment", "not_entailment"][i % 2]]),
    "RTE": (["index", "sentence1", "sentence2", "label"],
            lambda i, a, b: [str(i), a, b, ["entailment", "not_entailment"][i % 2]]),
}
DEV_FILES = {"MNLI": ["dev_matched.tsv", "dev_mismatched.tsv"]}


def sentence(rng, n):
    return " ".join(rng.choice(WORDS, size=n))


def write_task(glue, folder, n_train=12, n_dev=6, seed=0):
    rng = np.random.default_rng(seed)
    header, row = LAYOUTS[folder]
    (glue / folder).mkdir(parents=True, exist_ok=True)
    for name, n in [("train.tsv", n_train)] + [(f, n_dev) for f in DEV_FILES.get(folder, ["dev.tsv"])]:
        lines = ([header] if header else []) + [row(i, sentence(rng, 3 + i % 7), sentence(rng, 2 + i % 5))
                                                for i in range(n)]
        bom = "\ufeff" if folder == "MRPC" else ""
        (glue / folder / name).write_text(bom + "".join("\t".join(f) + "\n" for f in lines), encoding="utf-8")


def with_preset(ckpt, preset, folder):
    """A copy of the checkpoint folder whose config names another preset (the model stays 1 x 32)."""
    shutil.copytree(ckpt.parent, folder)
    state = torch.load(folder / "ckpt.pt", weights_only=False)
    state["config"]["preset"] = preset
    torch.save(state, folder / "ckpt.pt")
    return folder / "ckpt.pt"


@pytest.fixture(scope="session")
def glue(tmp_path_factory):
    folder = tmp_path_factory.mktemp("glue")
    for task in LAYOUTS:
        write_task(folder, task)
    return folder


# ---------------------------------------------------------------------------------------------- end to end

@pytest.mark.parametrize("task", ["rte", "stsb"])
def test_seeds_together_trains_a_task_s_seeds_in_groups_as_one_model_each_reported_and_the_median_kept(
        task, ckpt, glue, tmp_path, capsys):
    """--seeds 3 --seeds_together 2: seeds 0 and 1 as one model, then seed 2; every seed's numbers reported, the
    median seed's classifier kept (a classification and a regression). 0 (auto) is 1 on a CPU."""
    fg.main([str(ckpt), "--glue_dir", str(glue), "--tasks", task, "--epochs", "1", "--seeds", "3",
             "--seeds_together", "2", "--device", "cpu", "--out", str(tmp_path), "--save_model", str(tmp_path / "m")])
    report, out = json.loads((tmp_path / "glue.json").read_text()), capsys.readouterr().out
    info = report["tasks"][task]
    assert "2 seeds in a step" in out and report["settings"]["seeds_together"] == 2
    assert len(report["results"][task]["per_seed"]) == len(info["final_loss"]) == len(info["train_s"]) == 3
    assert info["train_s"][0] == info["train_s"][1] and len(set(info["final_loss"])) == 3  # a group's time, shared
    kept = json.loads((tmp_path / "m" / "classifier.json").read_text(encoding="utf-8"))
    assert kept["seed"] == report["results"][task]["predictions_seed"]
    fg.main([str(ckpt), "--glue_dir", str(glue), "--tasks", task, "--epochs", "1", "--seeds", "2",
             "--seeds_together", "0", "--device", "cpu", "--out", str(tmp_path / "auto")])
    assert "1 seed in a step" in capsys.readouterr().out


def test_seeds_together_is_refused_in_one_line_where_a_gpu_computes_in_fp16(ckpt, glue, tmp_path, monkeypatch):
    monkeypatch.setattr(hardware, "amp_dtype", lambda device: torch.float16)  # a T4's or a V100's precision
    with pytest.raises(SystemExit, match="--seeds_together 2 needs bf16 .*: use 1"):
        fg.main([str(ckpt), "--glue_dir", str(glue), "--tasks", "rte", "--seeds", "2", "--seeds_together", "2",
                 "--device", "cpu", "--out", str(tmp_path)])
    assert not (tmp_path / "glue.json").exists()


def test_the_run_s_size_decides_compile_and_seeds_together_unless_a_flag_does(ckpt, glue, tmp_path, monkeypatch,
                                                                               capsys):
    """hardware.fine_tuning_plan gets every seed's batches over the run's tasks and epochs (what a compile must earn
    back), the flags as given (None: not given) and the head shapes (RTE's 2 classes, STS-B's regression: each
    compiles its own graphs); its answer is the run's, in the run line and glue.json."""
    asked = []

    def plan(device, batches, seeds, n_params, compile, together, heads):
        asked.append((batches, seeds, compile, together, heads))
        return False, 2  # what a long run on a GPU would get, seeds as one model (compiled there)
    monkeypatch.setattr(fg, "fine_tuning_plan", plan)
    flags = [str(ckpt), "--glue_dir", str(glue), "--epochs", "2", "--seeds", "2", "--device", "cpu"]
    fg.main([*flags, "--tasks", "rte,stsb", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "glue.json").read_text())
    per_task = -(-12 // report["settings"]["batch_size"])  # the batches of one epoch of a task's 12 rows (fixture)
    assert asked == [(2 * per_task * 2 * 2, 2, None, None, 2)]  # 2 tasks x 2 epochs x 2 seeds; 2 head shapes
    assert f"this run: {2 * per_task * 2} steps" in capsys.readouterr().out  # the 2 seeds in one step
    assert report["settings"]["seeds_together"] == 2 and report["settings"]["compile"] is False
    fg.main([*flags, "--tasks", "rte", "--no-compile", "--seeds_together", "1", "--out", str(tmp_path / "b")])
    assert asked[-1][2:] == (False, 1, 1)


@pytest.mark.parametrize("task", list(tasks.GLUE))
def test_each_task_runs_end_to_end_and_writes_table_json_and_predictions(task, ckpt, glue, tmp_path):
    table = fg.main([str(ckpt), "--glue_dir", str(glue), "--tasks", task, "--epochs", "1", "--seeds", "2",
                     "--device", "cpu", "--out", str(tmp_path)])
    names = ["mnli_m", "mnli_mm"] if task == "mnli" else [task]
    assert list(table) == names
    report = json.loads((tmp_path / "glue.json").read_text())
    assert report["average_over"] == names and report["settings"]["seeds"] == 2
    for name in names:
        assert len(report["results"][name]["per_seed"]) == 2
        rows = (tmp_path / "predictions" / f"{name}.tsv").read_text().splitlines()
        assert rows[0] == "index\tprediction\tlabel" and len(rows) == 1 + 6
        # the prediction file, in label names, reproduces the metric of the seed it came from
        spec = tasks.glue_task(task, "")
        value = (lambda x: spec.labels.index(x)) if spec.labels else float
        preds, labels = np.array([[value(x) for x in r.split("\t")[1:]] for r in rows[1:]]).T
        seed = report["results"][name]["predictions_seed"]
        expected = report["results"][name]["per_seed"][seed]
        assert tasks.compute_metrics(spec, preds, labels) == pytest.approx(expected)
    assert "| model |" in (tmp_path / "glue.md").read_text()


def test_a_kept_cola_classifier_with_numbered_columns_loads_and_labels_cola_s_headerless_file(ckpt, glue, tmp_path,
                                                                                               capsys):
    """CoLA's TSV has no header: its columns are numbers ([3] the text, 1 the label), in classifier.json too."""
    fg.main([str(ckpt), "--glue_dir", str(glue), "--tasks", "cola", "--epochs", "1", "--seeds", "1", "--device",
             "cpu", "--out", str(tmp_path), "--save_model", str(tmp_path / "m")])
    info = json.loads((tmp_path / "m" / "classifier.json").read_text(encoding="utf-8"))
    assert info["text_columns"] == [3] and info["label_column"] == 1
    assert classify.main(["--device", "cpu", str(tmp_path / "m"), "a sentence"])[0] in ("0", "1")
    dev, out = glue / "CoLA" / "dev.tsv", tmp_path / "dev.predicted.tsv"
    classify.main(["--device", "cpu", str(tmp_path / "m"), "--input", str(dev), "--output", str(out)])
    printed = capsys.readouterr().out
    assert "wrote 6 rows" in printed and "no metric" not in printed and "on the 6 labelled rows" in printed
    lines = out.read_text(encoding="utf-8").splitlines()  # headerless as the input: line n is row n, plus 2 columns
    assert [line.split("\t")[:4] for line in lines] == [r.split("\t") for r in dev.read_text("utf-8").splitlines()]
    assert all(line.split("\t")[4] in ("0", "1") for line in lines)
    classify.main(["--device", "cpu", str(tmp_path / "m"), "--input", str(dev), "--output", str(out), "--overwrite",
                   "--text_columns", "3", "--label_column", "1"])  # the columns by number, as flags give them
    assert "on the 6 labelled rows" in capsys.readouterr().out and len(out.read_text("utf-8").splitlines()) == 6


def test_before_ampere_fine_tuning_runs_fp16_with_a_grad_scaler(ckpt, glue, tmp_path, monkeypatch):
    made, seen = [], set()
    class SpyScaler(torch.amp.GradScaler):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            made.append(self.is_enabled())
    encode = CrammedBERT.encode
    def spy(self, *args, **kw):
        seen.add(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return encode(self, *args, **kw)
    for module in (fg, classifier):  # training, and prediction: what hardware.amp_dtype gives a T4
        monkeypatch.setattr(module, "amp_dtype", lambda device: torch.float16)
    monkeypatch.setattr(torch.amp, "GradScaler", SpyScaler)
    monkeypatch.setattr(CrammedBERT, "encode", spy)
    table = fg.main([str(ckpt), "--glue_dir", str(glue), "--tasks", "rte", "--epochs", "1", "--seeds", "1",
                     "--device", "cpu", "--out", str(tmp_path)])
    assert made == [True] and seen == {torch.float16} and 0 <= table["rte"] <= 100  # training and prediction


def test_random_init_keeps_the_architecture_but_not_the_weights(ckpt, glue, tmp_path):
    args = [str(ckpt), "--glue_dir", str(glue), "--tasks", "rte", "--epochs", "1", "--seeds", "1", "--device", "cpu"]
    fg.main(args + ["--out", str(tmp_path / "a")])
    fg.main(args + ["--out", str(tmp_path / "b"), "--random_init"])
    a, b = (json.loads((tmp_path / x / "glue.json").read_text()) for x in "ab")
    assert (a["random_init"], b["random_init"]) == (False, True)
    assert a["tasks"]["rte"]["final_loss"] != b["tasks"]["rte"]["final_loss"]  # same seed, other encoder weights
    assert "(random init)" in (tmp_path / "b" / "glue.md").read_text()


def test_tasks_run_once_each_in_the_table_s_order(ckpt, glue, tmp_path):
    table = fg.main([str(ckpt), "--glue_dir", str(glue), "--tasks", "rte,sst2,rte", "--epochs", "1", "--seeds", "1",
                     "--device", "cpu", "--out", str(tmp_path)])
    assert list(table) == ["sst2", "rte"]


@pytest.mark.parametrize("preset", ["paper", "tiny"])
def test_the_recipe_comes_from_the_checkpoint_s_preset(preset, ckpt, glue, tmp_path):
    path = with_preset(ckpt, preset, tmp_path / "ckpt")
    fg.main([str(path), "--glue_dir", str(glue), "--tasks", "rte", "--device", "cpu", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "glue.json").read_text())
    assert report["recipe"] == preset
    assert {k: report["settings"][k] for k in fg.PAPER} == fg.RECIPES[preset]


def test_a_flag_wins_over_the_checkpoint_s_recipe(ckpt, glue, tmp_path):
    path = with_preset(ckpt, "tiny", tmp_path / "ckpt")
    fg.main([str(path), "--glue_dir", str(glue), "--tasks", "rte", "--device", "cpu", "--out", str(tmp_path),
             "--lr", "5e-4", "--pool", "cls", "--seeds", "1"])
    report = json.loads((tmp_path / "glue.json").read_text())
    assert report["recipe"] == "tiny"
    assert {k: report["settings"][k] for k in fg.PAPER} == {**fg.TINY, "lr": 5e-4, "pool": "cls", "seeds": 1}


def test_the_paper_recipe_is_the_paper_s_glue_sane_set():
    assert fg.RECIPES["paper"] == dict(lr=4e-5, beta1=0.9, beta2=0.98, adam_eps=1e-6, weight_decay=0.0, batch_size=16,
                                       epochs=5, warmup=0.1, dropout=0.1, head_hidden=1024, pool="cls", max_len=128,
                                       max_train=0, seeds=5, eval_batch_size=128)


def test_vs_random_reports_pretrained_random_init_and_their_difference(ckpt, glue, tmp_path):
    fg.main([str(ckpt), "--glue_dir", str(glue), "--tasks", "rte,stsb", "--epochs", "1", "--seeds", "1",
             "--device", "cpu", "--out", str(tmp_path), "--vs_random"])
    report = json.loads((tmp_path / "glue.json").read_text())
    pre, rnd = report["table"], report["random_init_table"]
    assert report["random_init"] is False and list(pre) == list(rnd) == ["stsb", "rte"]
    assert set(report["random_init_results"]) == set(report["random_init_tasks"]) == {"rte", "stsb"}
    cells = [line.strip("|").split("|") for line in (tmp_path / "glue.md").read_text().splitlines()
             if line.startswith("| ") and not line.startswith("| model")]
    rows = {c[0].strip(): [float(x.split("[")[0]) for x in c[1:]] for c in cells}  # the number before its interval
    assert list(rows) == [str(ckpt), f"{ckpt} (random init)", "difference", "no model (majority class / training mean)"]
    for name, table in [(str(ckpt), pre), (f"{ckpt} (random init)", rnd)]:
        assert rows[name] == pytest.approx([*table.values(), tasks.average(table)], abs=0.05)
    difference = [pre[n] - rnd[n] for n in pre] + [tasks.average(pre) - tasks.average(rnd)]
    assert rows["difference"] == pytest.approx(difference, abs=0.05) and any(abs(d) >= 0.1 for d in difference)
    for name in ("rte", "stsb", "rte.random_init", "stsb.random_init"):
        assert len((tmp_path / "predictions" / f"{name}.tsv").read_text().splitlines()) == 1 + 6


def test_a_failed_or_interrupted_run_keeps_the_earlier_run_s_files_and_its_own_finished_tasks(ckpt, glue, tmp_path,
                                                                                             monkeypatch, capsys):
    out = tmp_path / "out"
    args = [str(ckpt), "--tasks", "rte,sst2", "--epochs", "1", "--seeds", "1", "--device", "cpu", "--out", str(out)]
    fg.main(args + ["--glue_dir", str(glue)])  # the earlier run
    before = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    this = json.loads(before["glue.json"])["this_run"]
    assert set(before) == {"glue.md", "glue.json", "predictions/rte.tsv", "predictions/sst2.tsv", f"{this}.md",
                           f"{this}.json", f"predictions/{this}/rte.tsv", f"predictions/{this}/sst2.tsv"}
    assert before[f"{this}.json"] == before["glue.json"] and json.loads(before["glue.json"])["final"]  # whole

    broken = tmp_path / "broken"  # the second task's dev set is damaged: the run stops before any fine-tuning
    shutil.copytree(glue, broken)
    (broken / "SST-2" / "dev.tsv").write_bytes(np.random.default_rng(0).bytes(2000))
    real_finetune = fg.finetune
    monkeypatch.setattr(fg, "finetune", lambda *a: pytest.fail("fine-tuned although a task file is damaged"))
    later = args + ["--lr", "1e-3"]  # another run: had it written anything, its predictions would differ
    with pytest.raises(SystemExit, match="finetune_glue.py: error: .*SST-2/dev.tsv"):
        fg.main(later + ["--glue_dir", str(broken)])
    assert {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before

    def stopped(*a):
        raise KeyboardInterrupt
    monkeypatch.setattr(fg, "finetune", stopped)  # Ctrl-C in the first task: nothing new, not even an empty folder
    with pytest.raises(SystemExit, match="130"):  # the shell's code for Ctrl-C, as cram.py
        fg.main(later + ["--glue_dir", str(glue)])
    assert "error: interrupted" in capsys.readouterr().err
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == sorted(
        [*before, "predictions", f"predictions/{this}"])

    def disk_full(out_dir, name, *a, final):  # a one-task run's only write fails halfway: no trace of the run
        (out_dir / "predictions" / name / "rte.tsv").write_text("half")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(fg, "finetune", real_finetune)
    monkeypatch.setattr(fg, "publish", disk_full)
    with pytest.raises(SystemExit, match="No space left on device"):
        fg.main([*args[:2], "rte", *args[3:], "--glue_dir", str(glue)])
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == sorted(
        [*before, "predictions", f"predictions/{this}"])
    monkeypatch.setattr(fg, "publish", tasks.publish)

    calls = []  # Ctrl-C while the second task fine-tunes, the first one done

    def interrupted(*a):
        calls.append(a)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_finetune(*a)
    monkeypatch.setattr(fg, "finetune", interrupted)
    capsys.readouterr()
    with pytest.raises(SystemExit, match="130"):
        fg.main(later + ["--glue_dir", str(glue)])
    assert len(calls) == 2
    err = capsys.readouterr().err
    assert re.search(r"this run's finished tasks: .*glue-sst2,rte-.*\.md and \.json", err)
    assert err.strip().endswith("interrupted: what earlier runs wrote in --out stays as it was")
    after = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert {k: v for k, v in after.items() if k in before} == before  # the earlier run's files, untouched
    partial = json.loads(next(v for k, v in after.items() if k not in before and k.endswith(".json")))
    assert set(after) - set(before) == {f"{partial['this_run']}.md", f"{partial['this_run']}.json",
                                        f"predictions/{partial['this_run']}/sst2.tsv"}  # the finished task, kept
    assert not partial["final"] and list(partial["table"]) == ["sst2"] and partial["settings"]["lr"] == 1e-3
    md = after[f"{partial['this_run']}.md"].decode()
    assert "Partial: 1 of 2 tasks done; the rest, if the run stopped: --tasks rte" in md


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM from another process: POSIX")
def test_kill_or_timeout_stops_a_run_as_ctrl_c_does_leaving_no_trace_of_an_unfinished_first_task(ckpt, glue, tmp_path):
    """kill, `timeout` and a cluster's time limit send SIGTERM: the run stops as on Ctrl-C, its cleanup run (before,
    Python's default ended it at once: an empty predictions/glue-<tasks>-<time>/ stayed, and no line said why)."""
    out, flag = tmp_path / "out", tmp_path / "training"
    driver = (f"import time, finetune_glue as fg; fg.finetune = lambda *a: (open({str(flag)!r}, 'w').close(), "
              f"time.sleep(60)); fg.main([{str(ckpt)!r}, '--tasks', 'rte', '--glue_dir', {str(glue)!r}, "
              f"'--seeds', '1', '--device', 'cpu', '--out', {str(out)!r}])")
    run = subprocess.Popen([sys.executable, "-c", driver], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    for _ in range(600):
        if flag.exists() or run.poll() is not None:
            break
        time.sleep(0.1)
    assert flag.exists(), run.communicate()[1]
    assert (out / "predictions").exists() and any((out / "predictions").iterdir())  # the run's name, claimed
    run.send_signal(signal.SIGTERM)
    err = run.communicate(timeout=30)[1]
    assert run.returncode == 130 and err.strip().endswith("finetune_glue.py: error: interrupted: what earlier runs "
                                                        "wrote in --out stays as it was"), err
    assert not out.exists()  # nothing of the run, its new --out folder neither


# ---------------------------------------------------------------------------------------------- parsing

def read(task, path, limit=0):
    """A GLUE task's TSV as finetune_glue.py reads it."""
    return tasks.read_split(tasks.glue_task(task, ""), str(path), limit)


def test_quotes_are_text_not_csv_quoting(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_text('index\tsentence1\tsentence2\tlabel\n0\the said " hi\t"yes" , \'no\'\tentailment\n')
    split = read("rte", path)
    assert split.a == ['he said " hi'] and split.b == ['"yes" , \'no\''] and split.labels.tolist() == [0]


def test_glue_dir_comes_from_the_flag_then_the_environment_then_the_hub(glue, monkeypatch):
    assert fg.parse_args(["out/ckpt.pt"]).glue_dir is None  # the hub
    monkeypatch.setenv("GLUE_DIR", str(glue))  # how CI runs the README's main job offline
    assert fg.parse_args(["out/ckpt.pt"]).glue_dir == str(glue)
    assert tasks.pick_tasks(fg.parse_args(["out/ckpt.pt", "--tasks", "rte"]))[0].train.startswith(str(glue))
    assert fg.parse_args(["out/ckpt.pt", "--glue_dir", "elsewhere"]).glue_dir == "elsewhere"


def test_label_ids_match_the_hub(glue):
    for task, expected in [("rte", [0, 1]), ("qnli", [0, 1]), ("mnli", [0, 1, 2]), ("cola", [0, 1])]:
        name = "dev_matched.tsv" if task == "mnli" else "dev.tsv"
        split = read(task, glue / tasks.GLUE[task][0] / name)
        assert split.labels[:len(expected)].tolist() == expected  # rows cycle through the labels in hub order


def test_mrpc_bom_and_stsb_float_scores(glue):
    mrpc = read("mrpc", glue / "MRPC" / "train.tsv")
    assert len(mrpc.a) == 12 and mrpc.labels.tolist()[:2] == [0, 1]
    stsb = read("stsb", glue / "STS-B" / "dev.tsv")
    assert stsb.labels.dtype == np.float64 and stsb.labels.tolist()[:3] == [0.0, 0.75, 1.5]


def test_malformed_row_is_skipped_and_reported_with_file_and_line(tmp_path, capsys):
    path = tmp_path / "train.tsv"
    path.write_text("index\tquestion\tsentence\tlabel\n0\tq\ts\tentailment\n1\tbroken row\tentailment\n"
                    "2\tq\ts\tmaybe\n3\tq\ts\tnot_entailment\n")
    split = read("qnli", path)
    assert split.labels.tolist() == [0, 1]
    err = capsys.readouterr().err
    assert str(path) in err and "skipped 2" in err and "line 3: 3 fields, expected 4" in err and "line 4" in err


def test_a_row_that_is_not_utf8_is_skipped_and_reported_with_its_line(tmp_path, capsys):
    path = tmp_path / "dev.tsv"
    path.write_bytes(b"index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tcaf\xe9\tb\tentailment\n"
                     b"2\ta\tb\tnot_entailment\n")
    split = read("rte", path)
    assert split.a == ["a", "a"] and split.labels.tolist() == [0, 1]
    err = capsys.readouterr().err
    assert str(path) in err and "skipped 1" in err and "line 3: not UTF-8 text" in err, err


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("task", ["cola", "rte", "stsb"])
def test_random_bytes_as_a_task_file_are_a_one_line_error(task, seed, tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes(np.random.default_rng(seed).bytes(50 * 10 ** seed))
    with pytest.raises(tasks.CramError, match=re.escape(str(path))) as e:  # anything else would be a traceback
        read(task, path)
    assert len(str(e.value).splitlines()) == 1


def test_max_train_keeps_the_first_rows(glue):
    split = read("sst2", glue / "SST-2" / "train.tsv", limit=5)
    assert len(split.a) == 5


# ---------------------------------------------------------------------------------------------- inputs

def test_pair_truncation_cuts_the_longer_side_first():
    assert classifier.truncate_pair([1] * 3, [2] * 4, 10) == ([1] * 3, [2] * 4)
    assert classifier.truncate_pair([1] * 100, [2] * 5, 20) == ([1] * 15, [2] * 5)
    assert classifier.truncate_pair([1] * 5, [2] * 100, 20) == ([1] * 5, [2] * 15)
    a, b = classifier.truncate_pair([1] * 50, [2] * 60, 20)
    assert (len(a), len(b)) == (10, 10)


def test_inputs_are_cls_a_sep_b_sep_truncated_to_max_len():
    class Tok:
        special, single_as_pair = {"cls": 2, "sep": 3}, False
        encode_batch = staticmethod(lambda texts: [[int(w) for w in t.split()] for t in texts])
    pair = fg.encode(Tok, tasks.Split(["7 8", " ".join(["9"] * 300)], ["5", "6 6"], None, None), 16)
    assert pair[0] == [2, 7, 8, 3, 5, 3] and len(pair[1]) == 16 and pair[1][-4:] == [3, 6, 6, 3]
    single = fg.encode(Tok, tasks.Split(["7 8", " ".join(["9"] * 300)], None, None, None), 16)
    assert single[0] == [2, 7, 8, 3] and len(single[1]) == 16 and single[1][-1] == 3


def test_the_paper_s_release_frames_a_single_text_as_a_pair_with_an_empty_second_as_its_evaluation_did():
    class Tok:  # the release: "<cls> A <sep> <sep>" and "<cls> A <sep> B <sep>"
        special, single_as_pair = {"cls": 2, "sep": 1}, True
        encode_batch = staticmethod(lambda texts: [[int(w) for w in t.split()] for t in texts])
    single = fg.encode(Tok, tasks.Split(["7 8", " ".join(["9"] * 300)], None, None, None), 16)
    assert single[0] == [2, 7, 8, 1, 1] and len(single[1]) == 16 and single[1][-2:] == [1, 1]
    assert fg.encode(Tok, tasks.Split(["7 8"], ["5"], None, None), 16) == [[2, 7, 8, 1, 5, 1]]


def test_batches_are_padded_to_their_longest_sequence_with_a_mask():
    ids, mask = fg.collate([[2, 7, 3], [2, 3]], pad_id=0, device=torch.device("cpu"))
    assert ids.tolist() == [[2, 7, 3], [2, 3, 0]]
    assert mask.tolist() == [[True, True, True], [True, True, False]]


def test_fine_tuning_batches_examples_of_similar_length_each_once_an_epoch_the_same_for_a_seed():
    """Padding to a batch's longest member costs little when its members are of similar length (length_grouped):
    drawn at random, these lengths (3 to 40) would compute about 1.7 tokens per real token."""
    seen, widths, lengths = [], [], np.random.default_rng(0).integers(3, 41, size=200).tolist()
    model = classifier.GlueModel(CrammedBERT(Config(n_layer=1, n_embd=16, n_head=2, ffn_hidden=32), 8, 64), 16, 2, 8,
                                 0.0, "cls", 3, False)
    forward = model.forward  # what each step's batch holds: its examples' lengths, and the padded width
    model.forward = lambda ids, pad_mask: (seen.append(pad_mask.sum(1).tolist()), widths.append(ids.shape[1]),
                                           forward(ids, pad_mask))[-1]
    fg.finetune([model], [[2] + [5] * (n - 2) + [3] for n in lengths], np.arange(200) % 2,
                argparse.Namespace(**{**fg.TINY, "epochs": 2, "batch_size": 8}, pad_id=0), [0], torch.device("cpu"), "")
    assert widths == [max(b) for b in seen]  # on the CPU a batch is padded to its longest, no further
    assert sum(len(b) * max(b) for b in seen) / sum(map(sum, seen)) < 1.1
    assert len(seen) == 2 * 25 and sorted(n for b in seen for n in b) == sorted(2 * lengths)  # each example, each epoch
    batches = lambda seed: [b.tolist() for b in fg.length_grouped(lengths, 8, torch.Generator().manual_seed(seed),
                                                                  torch.Generator().manual_seed(fg.SHUFFLE_SEED))]
    assert batches(0) == batches(0) != batches(1) and [[lengths[i] for i in b] for b in batches(0)] == seen[:25]


def test_seeds_trained_as_one_model_take_batches_of_similar_width_each_step():
    """A step of seeds as one pads to the widest of its batches: each seed groups its own examples (gen), the seeds
    share the batches' shuffle, so a step's batches have about the same width (independent shuffles: 1.6x the
    tokens). Each seed still sees its own batches, each once an epoch."""
    lengths = np.random.default_rng(0).integers(3, 129, size=2000).tolist()
    width = lambda b: max(lengths[i] for i in b.tolist())  # noqa: E731
    for shared in (True, False):
        orders = [fg.length_grouped(lengths, 16, torch.Generator().manual_seed(s),
                                    torch.Generator().manual_seed(7 if shared else 100 + s)) for s in range(5)]
        w = np.array([[width(b) for b in o] for o in orders])                         # (seeds, steps)
        ratio = w.max(0).sum() / w.mean(0).sum()
        assert ratio < 1.02 if shared else ratio > 1.3, ratio
    assert all(sorted(torch.cat(o).tolist()) == list(range(2000)) for o in orders)
    assert [b.tolist() for b in orders[0]] != [b.tolist() for b in orders[1]]

def seeds_alone_and_as_one(device, n_rows=100, batch_size=8):
    """Two seeds fine-tuned one after the other, and the same two trained as one model (hardware.together): their
    final losses and weights. Dropout 0: the only draws are each seed's batch order, the same both ways."""
    rng = np.random.default_rng(0)
    seqs = [[2] + rng.integers(5, 50, size=rng.integers(3, 30)).tolist() + [3] for _ in range(n_rows)]
    labels, seeds = np.array([int(7 in s) for s in seqs]), [0, 1]
    args = argparse.Namespace(**{**fg.TINY, "epochs": 2, "batch_size": batch_size}, pad_id=0)

    def model(seed):
        torch.manual_seed(seed)
        return classifier.GlueModel(CrammedBERT(Config(n_layer=2, n_embd=32, n_head=2, ffn_hidden=64), 50, 64), 32, 2,
                                    16, 0.0, "mean", 3, False)
    alone, as_one = [model(s) for s in seeds], [model(s) for s in seeds]
    weights = lambda models: [{k: v.detach().cpu() for k, v in m.state_dict().items()} for m in models]  # noqa: E731
    init = weights(alone)
    losses = [fg.finetune([m], seqs, labels, args, [s], device, "")[0] for m, s in zip(alone, seeds)]
    return init, (losses, weights(alone)), (fg.finetune(as_one, seqs, labels, args, seeds, device, ""), weights(as_one))


def test_a_task_s_seeds_trained_as_one_model_learn_what_each_learns_alone():
    """--seeds_together: each seed its own weights, batch order and loss, in one step of stacked kernels; 100 rows in
    batches of 8, so an epoch's last batch of 4 is filled up to 8 with rows that count 0."""
    _, (losses, alone), (losses_as_one, as_one) = seeds_alone_and_as_one(torch.device("cpu"))
    assert losses_as_one == pytest.approx(losses, rel=1e-4) and losses[0] != pytest.approx(losses[1], rel=1e-3)
    for a, b in zip(alone, as_one):
        assert all(torch.allclose(a[k], b[k], atol=1e-4) for k in a)
    assert not torch.allclose(alone[0]["head.3.weight"], alone[1]["head.3.weight"])  # two seeds, two models


@pytest.mark.slow
def test_compile_fine_tunes_as_the_plain_model_does_with_one_graph_for_all_seeds():
    """--compile: torch.compile of the forward trains each seed to the plain losses, and a seed's model reuses the
    graph of the seeds before it: graphs a head shape, not a seed (past torch's limit of 8 recompiles a function, it
    would fall back to the plain forward: the protocol has 40 runs, 5 seeds x 8 tasks, with 3 head shapes)."""
    from torch._dynamo.utils import counters
    rng = np.random.default_rng(0)
    seqs = [[2] + rng.integers(5, 50, size=rng.integers(3, 20)).tolist() + [3] for _ in range(40)]
    labels, losses, graphs = np.array([int(7 in s) for s in seqs]), {}, []
    for compiled in (False, True):
        args = argparse.Namespace(**{**fg.TINY, "epochs": 1, "batch_size": 8}, pad_id=0, compile=compiled)
        torch._dynamo.reset()
        counters.clear()
        for seed, n_out in ((0, 2), (1, 2), (2, 3), (3, 2), (4, 3)):  # two head shapes: 2 classes, 3 (MNLI)
            torch.manual_seed(seed)
            model = classifier.GlueModel(CrammedBERT(Config(n_layer=1, n_embd=16, n_head=2, ffn_hidden=32), 50, 32),
                                         16, n_out, 8, 0.0, "cls", 3, False)
            losses[compiled, seed] = fg.finetune([model], seqs, labels, args, [seed], torch.device("cpu"), "")[0]
            graphs.append(counters["stats"]["unique_graphs"])
    assert [losses[True, s] for s in range(5)] == pytest.approx([losses[False, s] for s in range(5)], rel=1e-4)
    if torch.__version__ < (2, 11):  # torch 2.4 compiled a graph for each seed's model (compiled where it pays: 2.11+)
        return
    assert 1 <= graphs[-5] <= 2 and graphs[-4] == graphs[-5]  # a graph, maybe one more for widths (dynamic)
    assert graphs[-3] <= graphs[-4] + 2 and graphs[-1] == graphs[-2] == graphs[-3]  # the 3-class head's, once


def test_seeds_as_one_model_draw_their_own_dropout():
    """Two copies of one model, the same seed's batches, dropout 0.1, as one model: they end apart (vmap's
    randomness "different"; with "same" both would draw one mask and stay equal)."""
    rng = np.random.default_rng(0)
    seqs = [[2] + rng.integers(5, 50, size=rng.integers(3, 20)).tolist() + [3] for _ in range(64)]
    labels, models = np.array([int(7 in s) for s in seqs]), []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(classifier.GlueModel(CrammedBERT(Config(n_layer=1, n_embd=16, n_head=2, ffn_hidden=32,
                                                              dropout=0.1), 50, 32), 16, 2, 8, 0.1, "cls", 3, False))
    args = argparse.Namespace(**{**fg.TINY, "epochs": 1, "batch_size": 16}, pad_id=0)
    losses = fg.finetune(models, seqs, labels, args, [0, 0], torch.device("cpu"), "")
    assert losses[0] != losses[1] and not torch.equal(models[0].head[3].weight, models[1].head[3].weight)


@pytest.mark.slow
@pytest.mark.skipif(torch.__version__ < (2, 11), reason="compiled fine-tuning pays from torch 2.11 (compile_pays); "
                    "torch 2.4 compiled a graph for each seed's model")
def test_seeds_compiled_as_one_model_stay_compiled_through_the_protocol_s_head_shapes_and_widths(monkeypatch):
    """--compile --seeds_together: under vmap each (head shape, padded width) is a graph of its own, 3 heads x 3
    widths here (GLUE: 3 x 4). Past torch's default of 8 recompiles a function, torch would run the rest uncompiled,
    silently: MNLI's or STS-B's head, whichever came last. hardware.compile_forward leaves room; a later task with a
    head shape seen before compiles nothing new. (torch.compile's eager backend: dynamo's graphs, no code made.)"""
    from torch._dynamo.utils import counters
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, backend="eager"))
    rng = np.random.default_rng(0)
    seqs = [[2] + rng.integers(5, 50, size=int(n)).tolist() + [3] for n in rng.choice([20, 50, 80], size=48)]
    labels, graphs = np.array([int(7 in s) for s in seqs]), []
    args = argparse.Namespace(**{**fg.TINY, "epochs": 1, "batch_size": 8}, pad_id=0, compile=True)
    torch._dynamo.reset()
    counters.clear()
    name = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"  # older
    with torch._dynamo.config.patch({name: 8}):  # torch's default, whatever an earlier test set
        for n_out in (2, 3, 1, 2):  # two classes, three (MNLI), a regression (STS-B), two again
            models = [classifier.GlueModel(CrammedBERT(Config(n_layer=1, n_embd=16, n_head=2, ffn_hidden=32), 50,
                                                       96), 16, n_out, 8, 0.0, "cls", 3, False) for _ in range(2)]
            fg.finetune(models, seqs, labels if n_out > 1 else labels.astype(np.float32), args, [0, 1],
                        torch.device("cpu"), "")
            graphs.append(counters["stats"]["unique_graphs"])
    assert graphs == [3, 6, 9, 9]  # widths 32, 64, 96 for each head shape; none for a head seen before


def test_a_long_run_reports_once_its_pace_and_the_warm_up_before_it():
    """finetune's pace(seconds a step, seconds of the warm-up): once, at step 500, the mean of steps 300-500 and the
    time of the 300 before them (where compiling and recording graphs go), both of this run's own clock."""
    rng = np.random.default_rng(0)
    seqs = [[2] + rng.integers(5, 50, size=rng.integers(3, 10)).tolist() + [3] for _ in range(1040)]
    torch.manual_seed(0)
    model = classifier.GlueModel(CrammedBERT(Config(n_layer=1, n_embd=16, n_head=2, ffn_hidden=32), 50, 16), 16, 2, 8,
                                 0.0, "cls", 3, False)
    paces, t0 = [], time.perf_counter()
    args = argparse.Namespace(**{**fg.TINY, "epochs": 1, "batch_size": 2}, pad_id=0)  # 520 steps
    fg.finetune([model], seqs, np.array([int(7 in s) for s in seqs]), args, [0], torch.device("cpu"), "",
                lambda *p: paces.append(p))
    assert len(paces) == 1 and 200 * paces[0][0] + paces[0][1] < time.perf_counter() - t0
    assert 0 < paces[0][0] < paces[0][1]  # 300 steps take longer than one


def test_the_protocol_s_hours_are_projected_from_a_step_of_its_batch_of_16_only(capsys):
    """A step of 32 examples does not say how long one of 16 takes (between half and all of it): no projection."""
    data = {"t": (argparse.Namespace(labels=["a", "b"]), argparse.Namespace(a=[[2, 3]] * 64), None)}
    encoder, hours = CrammedBERT(Config(n_layer=1, n_embd=16, n_head=2, ffn_hidden=32), 50, 16), []
    for batch in (16, 32):
        args = argparse.Namespace(batch_size=batch, epochs=1, seeds=1, vs_random=False, compile=False, seeds_together=1)
        paced, pace = fg.plan_run(args, data, torch.device("cpu"), encoder, [False])
        pace(0.01, 1.0, 300)
        hours.append(paced["protocol_h"])
    assert hours == [pytest.approx(fg.PROTOCOL_STEPS * 0.01 / 3600), None]
    printed = capsys.readouterr().out
    assert "~ 4.1 h at this pace" in printed and "not projected from batches of 32: time it with --batch_size 16" \
        in printed


def test_the_pace_is_timed_once_every_width_has_been_seen_where_a_new_one_records_a_graph_or_compiles():
    widths = [32] * 350 + [64] + [32] * 600
    assert fg.timed_steps(widths, warms=False) == (300, 500)  # eager: a new width costs nothing more
    assert fg.timed_steps(widths, warms=True) == (353, 553)  # graphs, compiling: 3 steps after 64's first
    assert fg.timed_steps([32] * 400 + [96] + [32] * 100, warms=True) is None  # no 200 warm steps: no pace here
    assert fg.timed_steps([32] * 500, warms=False) is None and fg.timed_steps([], warms=True) is None
    late = [64] * 2000
    late[1850] = 32  # a width first seen long after the window: the window stays where it was (a review, 11-27)
    assert fg.timed_steps(late, warms=True) == (300, 500)
    back = [32] * 350 + [64] + [32] * 100 + [64] + [32] * 600  # 64 back at 451: its graph recorded there
    assert fg.timed_steps(back, warms=True) == (454, 654)


def test_seeds_as_one_model_run_attention_in_plain_ops_that_vmap_batches_on_any_device():
    """Fused attention kernels have no correct vmap rule for a mask with a vmap dimension on every torch (the CPU's
    has none: torch loops over the seeds and warns; CUDA's mishandled it until 2026-07): together's forward runs
    attention as matmul and softmax, whose rules are the plain ops', the same on a CPU and a GPU."""
    models = [classifier.GlueModel(CrammedBERT(Config(n_layer=1, n_embd=16, n_head=2, ffn_hidden=32), 50, 16), 16, 2, 8,
                                   0.1, "cls", 3, False) for _ in range(2)]
    params, forward, _ = hardware.together(models, torch.device("cpu"))
    ids, mask = torch.randint(5, 50, (2, 4, 12)), torch.rand(2, 4, 12) > 0.3
    mask[..., 0] = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        forward(ids, mask).sum().backward()
    assert not [w for w in caught if "batching rule" in str(w.message)] and all(p.grad is not None for p in params)


def test_plain_attention_computes_what_sdpa_computes():
    """hardware.PlainAttention: SDPA as its definition reads, with a padding mask (bool) or an additive bias, a scale
    of its own, fewer queries than keys (a narrow block), and in bf16 within bf16's rounding."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8)
    keys = torch.rand(2, 1, 1, 7) > 0.3
    keys[..., 0] = True
    for mask in (None, keys, torch.randn(2, 4, 3, 7)):
        for kw in ({}, {"scale": 0.3}):
            with hardware.PlainAttention():
                plain = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
            assert torch.allclose(plain, F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw), atol=1e-5)
    exact = F.scaled_dot_product_attention(3 * q, 3 * k, v, attn_mask=keys)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with hardware.PlainAttention():
            plain = F.scaled_dot_product_attention(3 * q.bfloat16(), 3 * k.bfloat16(), v.bfloat16(), attn_mask=keys)
        fused = F.scaled_dot_product_attention(3 * q.bfloat16(), 3 * k.bfloat16(), v.bfloat16(), attn_mask=keys)
    error = lambda y: (y.float() - exact).abs().max()  # noqa: E731
    assert plain.dtype == torch.bfloat16 and error(plain) <= 1.5 * error(fused)  # scores in bf16: 3.5x


def test_seeds_as_one_model_step_backward_under_cuda_s_autocast_rules():
    """CUDA's autocast computes softmax in fp32. Inside vmap it reached the softmax inside SDPA's MATH form too, whose
    autograd node had recorded bf16: CUDA's softmax backward refused the fp32 gradient (H100, 2026-11-26: "expected
    input and grad types to match"). Here the CPU's autocast is given CUDA's softmax rule, and a softmax backward
    must get matching types, as CUDA's kernel requires."""
    lib, seen = torch.library.Library("aten", "IMPL"), []

    def softmax_in_fp32(x, dim, dtype=None):  # what CUDA's autocast does to softmax
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)):
            return torch.ops.aten.softmax.int(x, dim, torch.float32 if x.dtype == torch.bfloat16 else dtype)

    class CudaRule(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._softmax_backward_data.default:
                seen.append((args[0].dtype, args[3]))  # the gradient's type, the forward input's
            return func(*args, **(kwargs or {}))
    lib.impl("softmax.int", softmax_in_fp32, "AutocastCPU")
    try:
        models = [classifier.GlueModel(CrammedBERT(Config(n_layer=1, n_embd=16, n_head=2, ffn_hidden=32), 50, 16), 16,
                                       2, 8, 0.1, "mean", 3, False) for _ in range(2)]
        params, forward, _ = hardware.together(models, torch.device("cpu"))
        ids, mask = torch.randint(5, 50, (2, 4, 12)), torch.rand(2, 4, 12) > 0.3
        mask[..., 0] = True
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = forward(ids, mask).float().sum()
        with CudaRule():
            loss.backward()
    finally:
        lib._destroy()
    assert seen and all(grad == forward_input for grad, forward_input in seen), seen


@pytest.mark.parametrize("regression", [False, True])
def test_the_rows_that_fill_up_an_epoch_s_short_last_batch_count_nothing(regression):
    """A batch of 4 filled up to 8 (weight 0 on the copies) steps the model as the batch of 4 alone does."""
    args, cpu, after = argparse.Namespace(**fg.TINY), torch.device("cpu"), []
    ids, y = torch.randint(5, 50, (1, 8, 12)), torch.rand(1, 8) if regression else torch.randint(0, 2, (1, 8))
    for rows, weight in ((slice(0, 4), torch.ones(1, 4)), (slice(0, 8), torch.tensor([[1.0] * 4 + [0.0] * 4]))):
        torch.manual_seed(0)
        model = classifier.GlueModel(CrammedBERT(Config(n_layer=1, n_embd=16, n_head=2, ffn_hidden=32), 50, 16), 16,
                                     1 if regression else 2, 8, 0.0, "cls", 3, False)
        params, forward, _ = hardware.together([model], cpu)
        step = fg.training_step(forward, params, args, cpu)[0]
        loss = step(ids[:, rows], torch.ones_like(ids[:, rows], dtype=torch.bool), y[:, rows], weight)
        after.append((loss, [p.detach().clone() for p in params]))
    (loss4, params4), (loss8, params8) = after
    assert loss8 == pytest.approx(loss4, rel=1e-5)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(params4, params8))

@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_more_padding_does_not_change_what_the_model_computes_so_a_gpu_may_pad_to_a_few_shapes(pool):
    """On a GPU a batch is padded to a multiple of 32 tokens (a few shapes, each a CUDA graph): the padded positions
    must change nothing, with the local bias of the tiny preset and without it."""
    for local_bias in (0.0, 1.0):
        cfg = Config(n_layer=2, n_embd=16, n_head=2, ffn_hidden=32, local_bias=local_bias)
        model = classifier.GlueModel(CrammedBERT(cfg, 20, 64), 16, 3, 8, 0.0, pool, 3, True).eval()
        seqs = [[2, 7, 8, 3, 9, 3], [2, 5, 3, 6, 6, 7, 8, 9, 3], [2, 3, 3]]
        ids, mask = fg.collate(seqs, 0, torch.device("cpu"))                    # (3, 9): the longest
        wide = torch.cat([ids, torch.zeros(3, 23, dtype=ids.dtype)], 1), F.pad(mask, (0, 23))   # (3, 32)
        assert torch.allclose(model(ids, mask), model(*wide), atol=1e-6)


def test_lr_warms_up_linearly_for_10_percent_then_decays_by_cosine_to_zero():
    lrs = [fg.lr_at(s, 100, 1.0) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[10] == pytest.approx(1.0) and lrs[55] == pytest.approx(0.5) and lrs[99] < 1e-3
    assert all(x >= y for x, y in zip(lrs[10:], lrs[11:]))


def test_head_is_fresh_and_reads_the_cls_token():
    torch.manual_seed(0)
    encoder = CrammedBERT(Config(n_layer=1, n_embd=32, n_head=2, ffn_hidden=64), 50, 128)
    model = fg.GlueModel(encoder, 32, 3, hidden=1024, dropout=0.1, pool="cls", sep_id=3, pair=False)
    first, last = model.head[0], model.head[3]
    assert (first.in_features, first.out_features, last.out_features) == (32, 1024, 3)
    assert first.bias.abs().sum() == 0 and abs(first.weight.std().item() - 0.02) < 0.002
    model.eval()
    ids = torch.tensor([[2, 7, 8, 3], [2, 7, 9, 3]])
    out = model(ids, torch.ones_like(ids, dtype=torch.bool))
    assert out.shape == (2, 3) and not torch.equal(out[0], out[1])


def mean_pool_model(pair):
    torch.manual_seed(0)
    encoder = CrammedBERT(Config(n_layer=1, n_embd=32, n_head=2, ffn_hidden=64), 50, 128)
    return fg.GlueModel(encoder, 32, 2, hidden=16, dropout=0.1, pool="mean", sep_id=3, pair=pair).eval()


def head_input(model, ids):
    """What the head reads for ids (B, T), unpadded, and the encoder's states (B, T, C)."""
    seen = []
    hook = model.head.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    mask = torch.ones_like(ids, dtype=torch.bool)
    model(ids, mask)
    hook.remove()
    return seen[0], model.encoder.encode(ids, mask)


def test_mean_pool_compares_a_pair_s_word_means_as_in_sentence_bert():
    model = mean_pool_model(pair=True)
    assert model.head[0].in_features == 4 * 32
    features, h = head_input(model, torch.tensor([[2, 7, 8, 3, 9, 10, 11, 3]]))  # [CLS] A A [SEP] B B B [SEP]
    u, v = h[0, 1:3].mean(0), h[0, 4:7].mean(0)  # A's words, B's words: no [CLS], no [SEP]
    assert torch.allclose(features[0], torch.cat([u, v, (u - v).abs(), u * v]), atol=1e-6)


def test_mean_pool_reads_a_single_sentence_s_word_mean():
    model = mean_pool_model(pair=False)
    assert model.head[0].in_features == 32
    features, h = head_input(model, torch.tensor([[2, 7, 8, 9, 3]]))  # [CLS] w w w [SEP]
    assert torch.allclose(features[0], h[0, 1:4].mean(0), atol=1e-6)


@pytest.mark.parametrize("pair", [False, True])
def test_padding_does_not_change_a_mean_pooled_prediction(pair):
    model, cpu = mean_pool_model(pair), torch.device("cpu")
    rows = [[2, 7, 8, 3, 9, 3], [2, 7, 8, 9, 10, 11, 12, 3, 13, 14, 3]]  # the first is padded with 5 [PAD]s
    padded = model(*fg.collate(rows, pad_id=0, device=cpu))
    alone = model(*fg.collate(rows[:1], pad_id=0, device=cpu))
    assert torch.allclose(padded[0], alone[0], atol=1e-5)


# ---------------------------------------------------------------------------------------------- metrics

def test_metrics_equal_hand_computed_values():
    preds, labels = np.array([1, 1, 0, 0, 1, 0]), np.array([1, 0, 0, 0, 1, 1])
    mrpc, cola, rte, stsb = (tasks.glue_task(name, "") for name in ("mrpc", "cola", "rte", "stsb"))
    # tp 2, fp 1, fn 1, tn 2: acc 4/6, f1 2*2/(2*2+1+1), mcc (2*2-1*1)/sqrt(3*3*3*3)
    assert tasks.compute_metrics(mrpc, preds, labels) == pytest.approx({"acc": 100 * 4 / 6, "f1": 100 * 4 / 6})
    assert tasks.compute_metrics(cola, preds, labels)["mcc"] == pytest.approx(100 * 3 / 9)
    assert tasks.compute_metrics(rte, preds, labels) == pytest.approx({"acc": 100 * 4 / 6})
    sts = tasks.compute_metrics(stsb, np.array([1.0, 2.0, 3.0, 5.0]), np.array([1.0, 2.0, 3.0, 4.0]))
    x, y = np.array([1.0, 2, 3, 5]) - 2.75, np.array([1.0, 2, 3, 4]) - 2.5
    assert sts["pearson"] == pytest.approx(100 * (x @ y) / np.sqrt((x @ x) * (y @ y)))
    assert sts["spearman"] == pytest.approx(100.0)
    assert tasks.compute_metrics(stsb, np.ones(4), np.arange(4.0)) == {"pearson": 0.0, "spearman": 0.0}
    assert tasks.compute_metrics(cola, np.ones(6), labels)["mcc"] == 0.0


def test_average_is_the_plain_mean_of_the_nine_numbers():
    titles = {s: f"{title} {t.metrics[0]}" for t in map(lambda n: tasks.glue_task(n, ""), tasks.GLUE)
              for s, (title, _) in t.evals.items()}
    table = dict(zip(titles, [40.0, 90.0, 85.0, 80.0, 85.0, 80.0, 81.0, 88.0, 55.0]))
    assert tasks.average(table) == pytest.approx(684 / 9)
    md = tasks.markdown({"ckpt.pt": reported(table)}, dict.fromkeys(table, 50.0), titles, 5, "paper", [])
    assert "| 76.0 [76.0, 76.0] |" in md and "all 9 numbers" in md and "MNLI-mm acc" in md and "| no model" in md
    two = {"rte": titles["rte"], "cola": titles["cola"]}
    md = tasks.markdown({"ckpt.pt": reported({"rte": 55.0, "cola": 40.0})}, {"rte": 50.0, "cola": 0.0}, two, 5, "x", [])
    assert "subset" in md


def test_a_score_below_no_model_is_said_plainly_under_the_table():
    """A learner's trial, 11-27: 40 reviews, pretrained 20.0 and random weights 10.0 against 50.0 for no model, and
    nothing said so; a training file of under 100 rows is called few where it is read."""
    titles = {"dev": "dev acc"}
    md = tasks.markdown({"ckpt.pt": reported({"dev": 20.0}), "random init": reported({"dev": 50.0})}, {"dev": 50.0},
                        titles, 3, "tiny", [])
    assert "ckpt.pt, dev acc: 20.0, below no model's 50.0: worse than one answer for every row." in md
    assert "random init, dev acc" not in md  # equal to no model is not below it
    assert "dev acc: the pretrained model below its random init, past the noise: pretraining has not helped" in md
    close = reported({"dev": 49.0})
    close["draws"]["dev"] = np.linspace(44.0, 54.0, 10)  # the difference's interval holds 0: nothing said
    md = tasks.markdown({"ckpt.pt": close, "random init": reported({"dev": 50.0})}, {"dev": 50.0}, titles, 3, "tiny",
                        [])  # (a learner's trial, 11-28: -9.1 [-12.6, -5.3], and nothing said why)
    assert "below its random init" not in md
    task = tasks.Task("mine", ("text", None, "label"), ("bad", "good"), ("acc",), "train.csv", {})
    few = tasks.Split(a=["x"] * 40, b=None, labels=np.array([0, 1] * 20), rows=[])
    assert "40 train rows (few: with under 100" in tasks.describe(task, few)
    assert "(few" not in tasks.describe(task, few._replace(a=["x"] * 100, labels=np.zeros(100, int)))


def reported(table):
    """A model's report as run_task fills it for markdown: each number with an interval of +-5 and its bootstrap
    draws (all equal here, so avg's interval is the average itself)."""
    return {"table": table, "draws": {c: np.full(10, v) for c, v in table.items()},
            "results": {c: {"main": "acc", "interval": {"acc": (v - 5, v + 5)}, "one_row": None}
                        for c, v in table.items()}}


# ---------------------------------------------------------------------------------------------- bad input

@pytest.fixture(scope="session")
def bad_runs(request, tmp_path_factory):
    """Every bad command line as a subprocess, two at a time (each pays torch's import): name -> [rc, stderr]."""
    return built_once(tmp_path_factory, "bad", lambda tmp: bad_commands(tmp, request.getfixturevalue("ckpt"),
                                                                          request.getfixturevalue("glue")))


def bad_commands(tmp, ckpt, glue):
    (tmp / "empty" / "RTE").mkdir(parents=True)
    (tmp / "empty" / "RTE" / "train.tsv").write_text("")
    (tmp / "tok").mkdir()
    (tmp / "tok" / "meta.json").write_text((ckpt.parent / "meta.json").read_text())
    vocab = json.loads((ckpt.parent / "tokenizer.json").read_text())
    vocab["model"]["vocab"]["extra"] = len(vocab["model"]["vocab"])  # one token more than the checkpoint has
    (tmp / "tok" / "tokenizer.json").write_text(json.dumps(vocab))
    for name, damaged in [("bad_tok", "tokenizer.json"), ("bad_meta", "meta.json")]:  # damaged copies of the set
        shutil.copytree(ckpt.parent, tmp / name)
        (tmp / name / damaged).write_bytes(np.random.default_rng(0).bytes(400))
    (tmp / "bad_ckpt.pt").write_bytes((ckpt.parent / "ckpt.pt").read_bytes()[:1000])  # cut short
    cases = {
        "damaged_tokenizer": [ckpt, "--glue_dir", glue, "--tokenizer_dir", tmp / "bad_tok"],
        "damaged_meta": [ckpt, "--glue_dir", glue, "--tokenizer_dir", tmp / "bad_meta"],
        "damaged_ckpt": [tmp / "bad_ckpt.pt", "--glue_dir", glue],
        "unknown_task": [ckpt, "--glue_dir", glue, "--tasks", "rte,wnli"],
        "missing_ckpt": [tmp / "nope.pt", "--glue_dir", glue, "--tasks", "rte,wnli"],  # the typo said first
        "missing_tokenizer": [ckpt, "--glue_dir", glue, "--tokenizer_dir", tmp],
        "vocab_mismatch": [ckpt, "--glue_dir", glue, "--tokenizer_dir", tmp / "tok"],
        "missing_file": [ckpt, "--glue_dir", tmp, "--tasks", "rte"],
        "empty_file": [ckpt, "--glue_dir", tmp / "empty", "--tasks", "rte"],
        "no_hub": [ckpt, "--tasks", "rte"],
    }
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # the hub fails at once instead of after retries
    def run(args):
        p = subprocess.run([sys.executable, str(ROOT / "finetune_glue.py"), "--device", "cpu", *map(str, args)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        return p.returncode, p.stderr
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(cases, pool.map(run, cases.values())))


def assert_one_line_error(run, *needles):
    rc, stderr = run
    assert rc != 0 and "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("finetune_glue.py: error:") and all(n in last for n in needles), stderr


@pytest.mark.slow
def test_a_damaged_tokenizer_meta_or_checkpoint_is_a_one_line_error(bad_runs):
    assert_one_line_error(bad_runs["damaged_tokenizer"], "cannot load", "bad_tok/tokenizer.json")
    assert_one_line_error(bad_runs["damaged_meta"], "bad_meta/meta.json is damaged")
    assert_one_line_error(bad_runs["damaged_ckpt"], "bad_ckpt.pt is damaged or not a cram.py checkpoint")


def test_unknown_task_is_a_one_line_error(bad_runs):
    assert_one_line_error(bad_runs["unknown_task"], "unknown task 'wnli'")


def test_missing_checkpoint_is_a_one_line_error(bad_runs):
    assert_one_line_error(bad_runs["missing_ckpt"], "no checkpoint at", "nope.pt")


def test_missing_tokenizer_is_a_one_line_error(bad_runs):
    assert_one_line_error(bad_runs["missing_tokenizer"], "no tokenizer", "--tokenizer_dir")


def test_vocab_mismatch_is_a_one_line_error(bad_runs):
    assert_one_line_error(bad_runs["vocab_mismatch"], f"has {5 + len(WORDS) + 1} tokens but",
                          f"was trained with {5 + len(WORDS)}")


def test_missing_task_file_is_named(bad_runs):
    assert_one_line_error(bad_runs["missing_file"], "missing", "RTE/train.tsv")


def test_empty_task_file_is_named(bad_runs):
    assert_one_line_error(bad_runs["empty_file"], "RTE/train.tsv", "empty")


def test_unreachable_hub_suggests_glue_dir(bad_runs):
    assert_one_line_error(bad_runs["no_hub"], "hub", "--glue_dir")


@pytest.mark.parametrize("flags", [["--lr", "-1"], ["--lr", "nan"], ["--beta1", "1"], ["--warmup", "1.5"],
                                   ["--dropout", "1"], ["--head_hidden", "0"], ["--seeds", "0"], ["--max_train", "-1"],
                                   ["--pool", "max"]])
def test_bad_hyper_parameters_are_refused_before_any_work(flags, tmp_path):
    with pytest.raises(tasks.CramError, match=re.escape(flags[0])):
        fg.run(fg.parse_args([str(tmp_path / "never_read.pt"), *flags]))


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """GLUE "from the hub" as the datasets library itself gives it: each split a parquet file in the hub's columns
    (label -1 on one row: the hub's unlabelled test rows), read by the real load_dataset; only the download is
    local. HF_HUB_OFFLINE: no network probe. Returns the (name, task, split) asked for."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    load, asked, rng = datasets.load_dataset, [], np.random.default_rng(0)

    def from_local_files(name, task, split):
        asked.append((name, task, split))
        col_a, col_b = tasks.GLUE[task][2]
        n_labels = len(tasks.GLUE[task][3] or ())
        labels = [(i * 0.75) % 5 for i in range(8)] if task == "stsb" else [i % n_labels for i in range(8)]
        cols = {col_a: [sentence(rng, 3 + i % 5) for i in range(9)], "label": labels + [-1], "idx": list(range(9))}
        if col_b:
            cols[col_b] = [sentence(rng, 2 + i % 4) for i in range(9)]
        file = tmp_path / f"{task}-{split}.parquet"
        datasets.Dataset.from_dict(cols).to_parquet(file)
        return load("parquet", data_files={split: str(file)}, split=split, cache_dir=str(tmp_path / "cache"))

    monkeypatch.setattr(datasets, "load_dataset", from_local_files)
    return asked


def test_hub_splits_map_every_tasks_columns_drop_unlabelled_rows_and_encode(hub, ckpt):
    """The hub path with real datasets.Dataset objects: the hub's column names per task, label -1 rows dropped,
    --max_train, and the texts encoded (datasets >= 4 gives a lazy Column, which encode cannot add to a list)."""
    tok = classifier.load_tokenizer(ckpt.parent, 5 + len(WORDS))
    args = type("Args", (), {"glue_dir": None, "max_train": 6})()
    for task in tasks.GLUE:
        train, devs = tasks.load_task(tasks.glue_task(task, None), args)
        assert len(train.a) == 6 and len(train.labels) == 6 and (train.b is None) == (tasks.GLUE[task][2][1] is None)
        for split in [train, *devs.values()]:
            ids = classifier.encode(tok, split, 128)
            assert len(ids) == len(split.labels) and all(x[0] == tok.special["cls"] for x in ids)
        assert all(len(split.a) == 8 for split in devs.values()), f"{task}: the label -1 row must be dropped"
    assert ("nyu-mll/glue", "mnli", "validation_matched") in hub
    assert ("nyu-mll/glue", "mnli", "validation_mismatched") in hub


def test_glue_from_the_hub_runs_end_to_end_with_the_datasets_library(hub, ckpt, tmp_path):
    """The README's `python finetune_glue.py out/ckpt.pt` (no --glue_dir), with the real library's datasets."""
    table = fg.main([str(ckpt), "--tasks", "sst2,stsb,mnli", "--epochs", "1", "--seeds", "1", "--device", "cpu",
                     "--out", str(tmp_path / "run")])
    assert list(table) == ["sst2", "stsb", "mnli_m", "mnli_mm"] and all(0 <= v <= 100 or k == "stsb"
                                                                       for k, v in table.items())
    assert len((tmp_path / "run" / "predictions" / "sst2.tsv").read_text().splitlines()) == 1 + 8
