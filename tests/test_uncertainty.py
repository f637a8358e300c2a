"""Honest numbers on small data as a specification: every dev score with its 95% interval (checked by hand), what one
dev row is worth, a difference within the noise said so, a second run that keeps the first one's table, and a log
without progress bars."""
import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import classify  # noqa: E402
import finetune_glue as fg  # noqa: E402
import tasks  # noqa: E402

from conftest import WORDS  # noqa: E402

FAST = ["--epochs", "1", "--seeds", "1", "--device", "cpu", "--task_name", "student"]
BINARY = tasks.Task("t", ("text", None, "label"), ("no", "yes"), ("acc", "mcc", "f1", "macro_f1"), "", {})
THREE = tasks.Task("t", ("text", None, "label"), ("a", "b", "c"), ("acc", "mcc", "macro_f1"), "", {})
SCORES = tasks.Task("t", ("text", None, "label"), None, ("pearson", "spearman", "rmse"), "", {})


# ---------------------------------------------------------------------------------------------- the intervals

def test_metrics_of_many_resamples_at_once_equal_scikit_learn_s_on_each():
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
    rng = np.random.default_rng(0)
    for task, k in [(BINARY, 2), (THREE, 3)]:
        labels, preds = rng.integers(0, k, (50, 12)), rng.integers(0, k, (50, 12))
        preds[:5] = preds[:5, :1]  # constant predictions: MCC 0, absent classes
        got = tasks.compute_metrics(task, preds, labels)
        for b, (p, y) in enumerate(zip(preds, labels)):
            want = {"acc": accuracy_score(y, p), "mcc": matthews_corrcoef(y, p),
                    "macro_f1": f1_score(y, p, average="macro", zero_division=0.0),
                    "f1": f1_score(y, p, zero_division=0.0) if k == 2 else 0}
            assert {m: got[m][b] for m in task.metrics} == pytest.approx({m: 100 * want[m] for m in task.metrics})
    labels, preds = rng.integers(0, 5, (30, 9)).astype(float), rng.normal(size=(30, 9))
    got = tasks.compute_metrics(SCORES, preds, labels)
    for b, (p, y) in enumerate(zip(preds, labels)):
        assert got["pearson"][b] == pytest.approx(100 * pearsonr(p, y)[0])
        assert got["spearman"][b] == pytest.approx(100 * spearmanr(p, y)[0])


def test_wilson_s_interval_equals_the_formula_by_hand_and_keeps_a_width_at_ten_of_ten():
    # (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), z = 1.96
    z, n = 1.96, 10
    for right, (low, high) in [(8, (49.02, 94.33)), (10, (72.25, 100.0)), (0, (0.0, 27.75))]:
        p = right / n
        root = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        by_hand = [100 * (p + z * z / (2 * n) + s * root) / (1 + z * z / n) for s in (-1, 1)]
        assert tasks.wilson(right, n) == pytest.approx(by_hand)
        assert by_hand == pytest.approx([low, high], abs=0.01)


def test_the_bootstrap_interval_of_an_accuracy_is_the_binomial_normal_approximation_and_fixed_by_its_seed():
    labels = np.ones(400, dtype=int)
    preds = np.r_[np.ones(300, dtype=int), np.zeros(100, dtype=int)]  # 75% right
    low, high = tasks.interval(tasks.bootstrap(BINARY, preds, labels)["acc"])
    half = 100 * 1.96 * np.sqrt(0.75 * 0.25 / 400)  # 4.24 points
    assert (low, high) == pytest.approx((75 - half, 75 + half), abs=0.8)
    again, other = tasks.bootstrap(BINARY, preds, labels)["acc"], tasks.bootstrap(BINARY, preds, labels, seed=1)["acc"]
    assert tasks.interval(again) == (low, high) and tasks.interval(other) != (low, high)


def test_a_paired_difference_of_the_same_predictions_is_zero_and_of_far_apart_models_is_beyond_the_noise():
    labels = np.tile([0, 1], 50)
    def report(preds):
        return {"table": {"s": tasks.compute_metrics(BINARY, preds, labels)["acc"]},
                "draws": {"s": tasks.bootstrap(BINARY, preds, labels)["acc"]}}
    good, fair = labels.copy(), np.where(np.arange(100) < 60, labels, 1 - labels)  # 100% and 60% right
    same = tasks.difference(report(fair), report(fair))["s"]
    assert same["value"] == 0 and same["interval"] == (0, 0) and same["within_noise"]
    apart = tasks.difference(report(good), report(fair))["s"]
    assert apart["value"] == pytest.approx(40) and apart["interval"][0] > 25 and not apart["within_noise"]


def test_one_row_is_100_over_n_points_of_accuracy_or_the_most_one_left_out_row_moves_a_regression():
    assert tasks.one_row(BINARY, np.zeros(10), np.ones(10)) == (
        "one dev row is worth 10.0 points of accuracy here (10 rows)")
    assert tasks.one_row(BINARY, np.zeros(200), np.ones(200)) is None  # a large dev set: no line
    preds, labels = np.array([1.0, 2.0, 3.0, 4.0, 9.0]), np.array([1.0, 3.0, 2.0, 4.0, 5.0])
    full = np.corrcoef(preds, labels)[0, 1]
    moved = max(abs(np.corrcoef(np.delete(preds, i), np.delete(labels, i))[0, 1] - full) for i in range(5))
    assert f"moves pearson by up to {100 * moved:.1f} points here (5 rows)" in tasks.one_row(SCORES, preds, labels)
    for n in (1, 2):  # a regression's dev set of one row crashed here after training (a reading, 11-27)
        assert tasks.one_row(SCORES, preds[:n], labels[:n]).endswith("cannot measure pearson: a correlation needs 3 "
                                                                     "rows at least")


# ---------------------------------------------------------------------------------------------- end to end

@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """A student's CSV: 26 training rows and a 10-row dev set."""
    tmp, rng = tmp_path_factory.mktemp("student"), np.random.default_rng(3)
    for name, n in [("train.csv", 26), ("dev.csv", 10)]:
        with open(tmp / name, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            w.writerows([" ".join(rng.choice(WORDS, 6)), ["good", "bad"][i % 2]] for i in range(n))
    return tmp


def test_a_ten_row_dev_set_shows_its_intervals_what_one_row_is_worth_and_whether_the_difference_is_noise(
        ckpt, student, tmp_path, capsys):
    fg.main([str(ckpt), "--train_file", str(student / "train.csv"), "--validation_file", str(student / "dev.csv"),
             "--out", str(tmp_path / "out"), "--vs_random", "--save_model", str(tmp_path / "model"), *FAST])
    printed, md = capsys.readouterr().out, (tmp_path / "out" / "glue.md").read_text(encoding="utf-8")
    report = json.loads((tmp_path / "out" / "glue.json").read_text(encoding="utf-8"))
    for text in (printed, md):
        assert "student acc: one dev row is worth 10.0 points of accuracy here (10 rows)." in text
        assert "Wilson's binomial interval" in text and "percentile bootstrap (1000 resamples" in text
    rows = (tmp_path / "out" / "predictions" / "student.tsv").read_text(encoding="utf-8").splitlines()[1:]
    right = sum(line.split("\t")[1] == line.split("\t")[2] for line in rows)  # the median seed's predictions
    low, high = tasks.wilson(right, 10)
    assert report["results"]["student"]["interval"]["acc"] == pytest.approx([low, high])
    assert f"| {report['table']['student']:.1f} [{low:.1f}, {high:.1f}] |" in md
    diff = report["difference"]["student"]
    assert diff["within_noise"] == (diff["interval"][0] <= 0 <= diff["interval"][1])
    line = next(line for line in md.splitlines() if line.startswith("| difference |"))
    assert line.split("|")[2].strip() == (f"{diff['value']:+.1f} [{diff['interval'][0]:+.1f}, "
                                          f"{diff['interval'][1]:+.1f}]" + " within the noise" * diff["within_noise"])

    classify.main(["--device", "cpu", str(tmp_path / "model"), "--input", str(student / "dev.csv"), "--output",
                   str(tmp_path / "l.csv")])
    printed = capsys.readouterr().out
    assert f"acc {100 * right / 10:.2f} [{low:.1f}, {high:.1f}]" in printed
    assert "\none row is worth 10.0 points of accuracy here (10 rows)" in printed and "Wilson" in printed  # not "dev"


def test_a_second_run_into_the_same_out_keeps_the_first_run_s_table_and_predictions(
        ckpt, student, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fg.time, "strftime", lambda *a: "20261125-163012")  # both runs in the same second
    args = [str(ckpt), "--train_file", str(student / "train.csv"), "--validation_file", str(student / "dev.csv"),
            "--out", str(tmp_path), *FAST]
    fg.main(args)
    first = {p.relative_to(tmp_path).as_posix(): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert "student" in (tmp_path / "glue-student-20261125-163012.md").read_text(encoding="utf-8")
    fg.main(args + ["--lr", "1e-3"])  # another run: another table
    printed = capsys.readouterr().out
    assert "glue-student-20261125-163012-2.md" in printed and "the latest run's" in printed
    for name, data in first.items():  # the first run's own files are all there, unchanged
        if name.startswith("glue-") or name.startswith("predictions/glue-"):
            assert (tmp_path / name).read_bytes() == data, name
    latest = (tmp_path / "glue-student-20261125-163012-2.md").read_text(encoding="utf-8")
    assert (tmp_path / "glue.md").read_text(encoding="utf-8") == latest != first["glue.md"].decode("utf-8")
    assert json.loads((tmp_path / "glue-student-20261125-163012-2.json").read_text(encoding="utf-8"))["settings"][
        "lr"] == 1e-3
    assert (tmp_path / "predictions" / "glue-student-20261125-163012-2" / "student.tsv").is_file()
    (tmp_path / "predictions" / "glue-student-20261125-163012-3").mkdir()  # claimed by a run still training
    fg.main(args + ["--lr", "2e-3"])
    assert "glue-student-20261125-163012-4.md" in capsys.readouterr().out


def test_progress_bars_only_on_a_terminal_and_one_seed_is_a_seed(ckpt, student, tmp_path, capfd, monkeypatch):
    args = [str(ckpt), "--train_file", str(student / "train.csv"), "--validation_file", str(student / "dev.csv"),
            "--out", str(tmp_path), *FAST]
    fg.main(args)
    out, err = capfd.readouterr()
    assert "\r" not in err and "step/s" not in err and "student 0:" not in err  # a redirected log: no bar
    assert "median of 1 seed," in out and "median of 1 fine-tuning seed per task" in out and "1 seeds" not in out
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a terminal: the bar, as before
    fg.main(args)
    assert "student 0:" in capfd.readouterr().err


def test_a_median_beside_another_seed_s_interval_names_that_seed_s_own_score():
    """The printed line gives each metric's median over the seeds and the interval of the kept seed's predictions;
    where the two seeds tie on accuracy but not on F1 (a trial: 76.79 printed, 71.53 kept), the kept seed's F1 too."""
    line = tasks.scored({"acc": 80.0, "macro_f1": 76.79}, {"acc": 80.0, "macro_f1": 71.53}, 2,
                        {"acc": (54.8, 93.0), "macro_f1": (43.4, 94.3)})
    assert line == "acc 80.00 [54.8, 93.0], macro_f1 76.79 (seed 2: 71.53 [43.4, 94.3])"
