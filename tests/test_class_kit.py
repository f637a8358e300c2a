"""The class kit as a specification: a student copy holds no answer and still works, each check runs only its own
exercise's code, and the grader checks each student's file in a process of its own, with a time limit."""
import ast
import csv
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import classroom  # noqa: E402
import conftest  # noqa: E402
import exercises  # noqa: E402
from test_cram import write_data  # noqa: E402

REFERENCE = (ROOT / "cram.py").read_text(encoding="utf-8")
ALL = list(exercises.EXERCISES)


def python(*args, cwd, timeout=300):
    """A Python command as a student or a teacher types it, in the folder `cwd`: (exit code, stdout, stderr)."""
    p = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, encoding="utf-8", timeout=timeout,
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return p.returncode, p.stdout, p.stderr


def definitions(tree, name):
    """The functions `name` ("f", "Class", "Class.method") holds in a parsed module."""
    node = tree
    for part in name.split("."):
        node = next(n for n in node.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part)
    return [n for n in node.body if isinstance(n, ast.FunctionDef)] if isinstance(node, ast.ClassDef) else [node]


def answers(names):
    """{exercise: the lines of the reference's code of its functions (comments cut) found nowhere else in cram.py}."""
    tree, code = ast.parse(REFERENCE), [line.split("  #")[0].strip() for line in REFERENCE.splitlines()]
    found = {}
    for name in names:
        mine = [c for what in exercises.EXERCISES[name].write for node in definitions(tree, what)
                for c in code[node.body[1 if ast.get_docstring(node) is not None else 0].lineno - 1:node.end_lineno]
                if len(c) >= 16]
        found[name] = {c for c in mine if code.count(c) == mine.count(c)}
        assert found[name], f"{name}: no line of its answer to look for"
    return found


def solved(source, names):
    """A student's cram.py with the exercises `names` written: the reference's code in place of each stub."""
    for what in [w for name in names for w in exercises.EXERCISES[name].write]:
        node, ref = (exercises.find(ast.parse(text), what) for text in (source, REFERENCE))
        lines = source.splitlines(keepends=True)
        lines[node.lineno - 1:node.end_lineno] = [ast.get_source_segment(REFERENCE, ref, padded=True) + "\n"]
        source = "".join(lines)
    return source


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """Every exercise released: the student copy and the teacher's bundle."""
    tmp = tmp_path_factory.mktemp("class")
    assert exercises.main(["release", str(tmp / "student"), "--teacher", str(tmp / "teacher")]) == 0
    return tmp / "student", tmp / "teacher"


# ---------------------------------------------------------------------------------------------- the student copy

def test_a_student_copy_holds_no_answer_no_tests_no_history_no_lab_notebook(released):
    student, _ = released
    files = sorted(p.relative_to(student).as_posix() for p in student.rglob("*") if p.is_file())
    assert "cram.py" in files and "exercises.py" in files and "CLASS.md" in files and "docs/exercises.md" in files
    for gone in (".git", "tests", ".ci", "docs/notes.md"):
        assert not any(f == gone or f.startswith(gone + "/") for f in files), f"{gone} is in the student copy"
    copy = (student / "cram.py").read_text(encoding="utf-8")
    assert copy != REFERENCE and all(exercises.unwritten(copy, name) for name in ALL), "an answer is still written"
    assert "## What we measured" not in (student / "docs" / "scaling.md").read_text(encoding="utf-8")
    assert "## Size, not shape" not in (student / "docs" / "results.md").read_text(encoding="utf-8")
    lines = answers(ALL)
    for path in student.rglob("*"):  # grep every text file for the reference's code of each exercise
        if not path.is_file() or path.suffix not in (".py", ".md", ".ipynb", ".txt", ".json", ""):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".ipynb":
            text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
        have = {line.split("  #")[0].strip() for line in text.splitlines()}  # its lines of code, comments cut
        for name, code in lines.items():
            found = [line for line in code if line in have]
            assert not (found and path.name == "cram.py"), f"cram.py holds {name}'s answer: {found}"
            assert len(found) < min(2, len(code)), f"{path.relative_to(student)} holds {name}'s answer: {found}"


@pytest.mark.slow
def test_in_a_student_copy_every_stub_fails_not_written_yet_and_written_it_passes(released, tmp_path):
    student, _ = released
    code, out, err = python("exercises.py", "check", "all", cwd=student)
    assert code == 1 and out.strip().endswith("0 of 10 passed"), out + err
    for name in ALL:
        assert f"FAIL  {name}: not written yet" in out, out
    work = tmp_path / "copy"  # a student who wrote every exercise (the reference's code, typed in)
    classroom.copy_tree(student, [p.relative_to(student).as_posix() for p in student.rglob("*") if p.is_file()],
                        work, {"cram.py": solved((student / "cram.py").read_text(encoding="utf-8"), ALL)}, False)
    code, out, err = python("exercises.py", "check", "all", cwd=work)
    assert code == 0 and out.strip().endswith("10 of 10 passed"), out + err


@pytest.mark.slow
def test_the_student_copy_trains_where_training_needs_no_stub_and_else_names_the_exercise_in_one_line(tmp_path):
    data = write_data(tmp_path / "data")
    flags = ["--preset", "tiny", "--device", "cpu", "--max_steps", "5", "--data_dir", str(data), "--n_layer", "2",
             "--n_embd", "32", "--n_head", "2", "--ffn_hidden", "64", "--micro_batch", "4", "--batch_size", "8",
             "--eval_seqs", "8"]
    for names in (["narrow"], ["lr_schedule", "masking"]):
        copy = tmp_path / "_".join(names)
        exercises.main(["release", str(copy), *names])
        code, out, err = python("cram.py", *flags, "--out_dir", str(copy / "out"), cwd=copy)
        if names == ["narrow"]:  # --narrow 0: training never runs the narrow blocks
            assert code == 0 and "done: 5 steps" in out, err[-2000:]
        else:
            assert code == 1 and "Traceback" not in err, err[-2000:]
            assert err.strip() == ("cram.py: error: exercise lr_schedule: write lr_at (python exercises.py show "
                                   "lr_schedule); training runs it: finish that exercise first"), err


def test_a_student_copy_without_checks_holds_no_check_code(tmp_path):
    exercises.main(["release", str(tmp_path / "exam"), "glu", "--no_checks"])
    tool = (tmp_path / "exam" / "exercises.py").read_text(encoding="utf-8")
    assert "F.gelu(second)" not in tool and "def check_glu(cram):" in tool and "STUDENT_COPY = (\"glu\",)" in tool
    assert "This copy has no checks" in (tmp_path / "exam" / "CLASS.md").read_text(encoding="utf-8")
    code, out, _ = python("exercises.py", "check", "glu", cwd=tmp_path / "exam")
    assert code == 1 and "FAIL  glu: this copy has no checks: your teacher grades your cram.py" in out, out
    exercises.main(["release", str(tmp_path / "exam2"), "prenorm", "--no_checks"])  # its check runs glu, attention
    code, out, _ = python("exercises.py", "check", "prenorm", cwd=tmp_path / "exam2")
    assert "FAIL  prenorm: this copy has no checks: your teacher grades your cram.py\n" in out, out  # nothing more


def test_an_exam_on_attention_empties_the_narrow_block_too_whose_code_shows_the_heads_split(tmp_path):
    exercises.main(["release", str(tmp_path / "exam"), "glu", "attention", "--no_checks"])
    copy = (tmp_path / "exam" / "cram.py").read_text(encoding="utf-8")
    assert exercises.unwritten(copy, "attention") and exercises.unwritten(copy, "narrow")
    assert "C // H).transpose(1, 2)" not in copy and ".permute(2, 0, 3, 1, 4)" not in copy  # q's heads; k's, v's
    assert "Also empty, not assigned: exercise narrow" in (tmp_path / "exam" / "CLASS.md").read_text(encoding="utf-8")
    assert 'STUDENT_COPY = ("glu", "attention",)' in (tmp_path / "exam" / "exercises.py").read_text(encoding="utf-8")


def test_a_student_copy_s_pages_keep_no_link_to_a_page_it_leaves_out(released):
    student, _ = released
    pages = {p.relative_to(student).as_posix(): p.read_text(encoding="utf-8") for p in student.rglob("*.md")}
    assert "the lab notebook" in pages["README.md"]  # the words stay
    for path, text in pages.items():
        for target in re.findall(r"\]\(([^)#]+)", text):
            if not target.startswith(("http", "mailto")):
                assert ((student / path).parent / target).exists(), f"{path} links to {target}, not in the copy"


def test_a_release_refuses_a_folder_in_use_and_a_student_copy_cannot_release(released, tmp_path):
    student, _ = released
    with pytest.raises(SystemExit, match="exists and is not empty: name a new folder"):
        exercises.main(["release", str(student), "glu"])
    code, _, err = python("exercises.py", "release", str(tmp_path / "again"), cwd=student)
    assert code == 1 and "this is a student copy" in err and not (tmp_path / "again").exists(), err


def test_in_a_student_copy_stub_points_at_cram_py_itself_and_a_release_makes_its_parent_folder(released, tmp_path):
    code, _, err = python("exercises.py", "stub", "masking", cwd=released[0])
    assert code == 1 and "write your functions in cram.py itself" in err and not (released[0] / "my_cram.py").exists()
    assert exercises.main(["release", str(tmp_path / "class" / "student"), "glu"]) == 0  # class/ did not exist
    assert (tmp_path / "class" / "student" / "cram.py").is_file()


def test_a_release_that_would_hand_out_an_answer_writes_nothing(tmp_path):
    project = tmp_path / "project"  # a tiny project, not a git checkout: one file in it holds the answer
    (project / "docs").mkdir(parents=True)
    (project / "README.md").write_text("# a project\n", encoding="utf-8")
    (project / "docs" / "spoiler.md").write_text("x = secret_step(1)\ny = other_step(x)\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"docs/spoiler.md would give students the answer of ex .*nothing was "
                                         "written"):
        classroom.release(project, tmp_path / "student", {"cram.py": "stub\n"},
                          {"ex": ["x = secret_step(1)", "y = other_step(x)"]})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project"], "a folder was left behind"


def test_the_teacher_bundle_holds_the_reference_the_answers_and_the_class(released):
    _, teacher = released
    assert (teacher / "cram.py").read_text(encoding="utf-8") == REFERENCE
    assert (teacher / "tests" / "test_exercises.py").is_file() and (teacher / "docs" / "notes.md").is_file()
    page = (teacher / "answers.md").read_text(encoding="utf-8")
    for name in ALL:
        for what in exercises.EXERCISES[name].write:
            for node in definitions(ast.parse(REFERENCE), what):
                assert ast.get_source_segment(REFERENCE, node) in page, f"answers.md lacks {what}"
    assert json.loads((teacher / "class.json").read_text(encoding="utf-8"))["exercises"] == ALL


def test_the_teachers_guide_goes_to_students_and_its_answers_only_to_the_teacher(released):
    student, teacher = released
    answers = (ROOT / "docs" / "teaching_answers.md").read_text(encoding="utf-8")
    assert (teacher / "docs" / "teaching_answers.md").read_text(encoding="utf-8") == answers
    assert not (student / "docs" / "teaching_answers.md").exists(), "the guide's answers are in the student copy"
    guide, whole = ((folder / "docs" / "teaching.md").read_text(encoding="utf-8") for folder in (student, ROOT))
    slips = "## Common slips, and what the student sees"  # its fixes are the checks' messages: an exam's answers
    assert slips in whole and slips not in guide and guide.startswith(whole.split(slips)[0].rstrip())
    assert "](teaching_answers.md" not in guide, "a link from the guide to its answers is broken in the student copy"
    assert "`docs/teaching_answers.md`" in (student / "CLASS.md").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------- each check, alone

@pytest.mark.parametrize("name", ALL)
def test_in_the_project_a_check_runs_only_its_exercise_every_other_one_a_stub(name, tmp_path, capsys):
    """Where the reference is (the project, the bundle), each check runs the reference's other functions."""
    path = tmp_path / "my_cram.py"
    path.write_text(exercises.student_source(REFERENCE, [n for n in ALL if n != name], "# all but one\n"),
                    encoding="utf-8")
    assert exercises.main(["check", name, "--file", str(path)]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("name", ALL)
def test_in_a_student_copy_a_check_needs_only_the_exercises_it_names(name, tmp_path, monkeypatch):
    """Without the reference, a check runs the copy's own functions: those of `needs`, and no others."""
    monkeypatch.setattr(exercises, "STUDENT_COPY", tuple(ALL))
    needs = exercises.EXERCISES[name].needs
    path = tmp_path / "cram.py"
    path.write_text(exercises.student_source(REFERENCE, [n for n in ALL if n != name and n not in needs], "#\n"),
                    encoding="utf-8")
    assert exercises.verdict(name, str(path)) == (True, "")
    for need in needs:  # each one it names is needed: a stub says to write it first
        path.write_text(exercises.student_source(REFERENCE, [need], "#\n"), encoding="utf-8")
        passed, message = exercises.verdict(name, str(path))
        assert not passed and message.startswith(f"do exercise {need} first: this check runs its "), message
    assert exercises.in_order(ALL).index(name) > max([exercises.in_order(ALL).index(n) for n in needs], default=-1)



def test_in_a_student_copy_a_fail_names_the_exercise_it_runs_that_fails_its_own_check(tmp_path, monkeypatch):
    """narrow's check runs Attention.attend (exercise attention): with attend's slip (the mask dropped), narrow's
    FAIL says to fix attention first."""
    monkeypatch.setattr(exercises, "STUDENT_COPY", tuple(ALL))
    right = "y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,"
    assert REFERENCE.count(right) == 1
    path = tmp_path / "cram.py"
    path.write_text(REFERENCE.replace(right, "y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,"),
                    encoding="utf-8")
    passed, message = exercises.verdict("narrow", str(path))
    assert not passed and message.endswith("(exercise attention fails its own check too, and this check runs that "
                                           "code: fix it first)"), message
    assert not exercises.verdict("attention", str(path))[0] and exercises.verdict("glu", str(path)) == (True, "")

# ---------------------------------------------------------------------------------------------- grading

LOOP = '    """Paper\'s one-cycle on budget fraction t: 0.25*peak at t=0, peak at t=0.75, 0 at t=1."""\n'


def looping(source, name):
    """`source` with an endless loop (that prints) at the start of the function `name`."""
    lines = source.splitlines(keepends=True)
    lines.insert(definitions(ast.parse(source), name)[0].body[1].lineno - 1, "    while True:\n        print(1)\n")
    return "".join(lines)


def test_every_student_s_entry_gets_a_row_and_two_of_one_name_get_a_row_each(tmp_path, capsys):
    """hank.PY (Windows keeps a name's case) is a student's file; ivan.py.txt (an editor's) and frank.txt get a row
    that says why they were not graded (a student left off the sheet is a zero nobody sees); judy.py beside judy/:
    two rows, each named by its entry; an empty file and another homework are refused in one line each."""
    import classroom
    for name in ("alice.py", "hank.PY", "ivan.py.txt", "frank.txt", "judy.py", ".hidden.py"):
        (tmp_path / name).write_text("x = 1\n", encoding="utf-8")
    (tmp_path / "judy").mkdir()
    (tmp_path / "__pycache__").mkdir()
    found = [(student, path.relative_to(tmp_path).as_posix()) for student, path in classroom.submissions(tmp_path)]
    assert found == [("alice", "alice.py"), ("frank.txt", "frank.txt"), ("hank", "hank.PY"),
                     ("ivan.py.txt", "ivan.py.txt"), ("judy/", "judy/cram.py"), ("judy.py", "judy.py")]
    (tmp_path / "erin.py").write_text("", encoding="utf-8")
    for junk in ("Thumbs.db", "desktop.ini", "grades.csv"):  # Windows' own files; the sheet, graded again into here
        (tmp_path / junk).write_text("x", encoding="utf-8")
    out = tmp_path / "grades.csv"
    assert classroom.grade(tmp_path, ["masking"], {"masking": 5}, out, True, lambda path: exercises.graded(
        path, ["masking"], 10)) == 0
    with open(out, encoding="utf-8", newline="") as f:
        rows = {row[0]: row[1:] for row in csv.reader(f)}
    assert rows["frank.txt"] == ["0", "0", "frank.txt is not a .py file: hand in the cram.py you wrote, as a .py"]
    assert rows["erin"][2].endswith("erin.py is empty: it is not a copy of cram.py with the exercises written in")
    assert rows["alice"][2].endswith("alice.py defines none of mask_tokens: it is not a copy of cram.py with the "
                                     "exercises written in")
    assert rows["judy/"][2] == f"no cram.py in {tmp_path / 'judy'}"
    assert not {"Thumbs.db", "desktop.ini", "grades.csv"} & set(rows)
    assert "erin" in capsys.readouterr().out


def test_check_all_and_the_grade_sheet_go_in_class_md_s_order_each_exercise_after_those_its_check_runs():
    """A teacher's trial, 11-28: CLASS.md said glu, attention, prenorm, ... while `check all` and the grade sheet's
    columns went glu, sparse_head, prenorm, attention."""
    order = exercises.class_exercises()
    assert sorted(order) == sorted(ALL) and order == exercises.in_order(ALL)
    assert all(order.index(d) < order.index(n) for n in order for d in exercises.EXERCISES[n].needs if d in order)
    assert order.index("attention") < order.index("prenorm") < order.index("sparse_head")


def test_a_stub_or_a_grade_sheet_named_as_a_folder_is_one_line_before_any_work_and_leaves_nothing(tmp_path):
    """stub --out and grade --out naming an existing folder: refused in one line, no .tmp left beside it (once, a
    traceback after all the grading)."""
    (tmp_path / "mine.py").mkdir()
    (tmp_path / "grades.csv").mkdir()
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "alice.py").write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="--out .*mine.py is a folder: name a .py file"):
        exercises.main(["stub", "masking", "--out", str(tmp_path / "mine.py"), "--overwrite"])
    with pytest.raises(SystemExit, match="--out .*grades.csv is a folder: name a .csv file"):
        exercises.main(["grade", str(tmp_path / "subs"), "masking", "--out", str(tmp_path / "grades.csv"),
                        "--overwrite"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grades.csv", "mine.py", "subs"]


@pytest.mark.slow
def test_grading_a_class_gives_a_row_per_student_and_an_endless_loop_times_out(tmp_path, capsys, monkeypatch):
    """Three students (right, a slip, an endless loop) and one who wrote nothing: a row each, the loop stopped."""
    names = ["lr_schedule", "batch_ramp"]
    assert exercises.main(["release", str(tmp_path / "student"), *names]) == 0
    stub = (tmp_path / "student" / "cram.py").read_text(encoding="utf-8")
    right = solved(stub, names)
    assert "min(0.25 + t, 4.0 * (1.0 - t))" in right
    subs = tmp_path / "submissions"
    (subs / "carol").mkdir(parents=True)
    (subs / "alice.py").write_text(right, encoding="utf-8")
    (subs / "bob.py").write_text(right.replace("min(0.25 + t, 4.0 * (1.0 - t))", "min(0.25 + t, 1.0)"),
                                 encoding="utf-8")
    (subs / "carol" / "cram.py").write_text(looping(right, "batch_size_at"), encoding="utf-8")
    (subs / "dave.py").write_text(stub, encoding="utf-8")
    grades = tmp_path / "grades.csv"
    # carol's file is a path that ends in cram.py: the grader's process imports it and never runs its main(), and
    # it sees no GPU (CUDA_VISIBLE_DEVICES="" is passed on), so conftest need not ask for --device and --preset
    monkeypatch.setattr(conftest, "PINNED", False)
    assert exercises.main(["grade", str(subs), *names, "--out", str(grades), "--timeout", "6"]) == 0
    with open(grades, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["student", "lr_schedule", "batch_ramp", "total", "message"]
    assert rows[1] == ["alice", "2", "3", "5", ""]
    assert rows[2][:4] == ["bob", "0", "3", "3"] and rows[2][4].startswith("lr_schedule: lr_at(0.8, 1e-3) should be")
    assert rows[3] == ["carol", "2", "0", "2", "batch_ramp: timed out after 6 s (an endless loop?)"], rows[3]
    assert rows[4][:4] == ["dave", "0", "0", "0"] and "unchanged from the stub: nothing written yet" in rows[4][4]
    assert len(rows) == 5 and [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []
    assert f"wrote {grades}: 4 students, 2 exercises, 5 points in all" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="grades.csv exists already: name another --out, or add --overwrite"):
        exercises.main(["grade", str(subs), *names, "--out", str(grades)])


def test_the_teacher_bundle_grades_its_class_unless_told_other_exercises(released, monkeypatch):
    _, teacher = released
    monkeypatch.setattr(exercises, "HERE", teacher)
    (teacher / "class.json").write_text(json.dumps({"exercises": ["glu", "masking"]}), encoding="utf-8")
    assert exercises.class_exercises() == ["glu", "masking"]


def test_check_json_runs_the_file_apart_and_prints_each_exercise_with_its_points(tmp_path, capsys):
    path = tmp_path / "bob.py"
    path.write_text(REFERENCE.replace("return peak * max(0.0, min(0.25 + t, 4.0 * (1.0 - t)))", "return peak"),
                    encoding="utf-8")
    assert exercises.main(["check", "lr_schedule", "batch_ramp", "--file", str(path), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["file"] == str(path) and result["points"] == 3 and result["out_of"] == 5
    assert [(r["name"], r["pass"], r["points"], r["out_of"]) for r in result["exercises"]] == \
        [("lr_schedule", False, 0, 2), ("batch_ramp", True, 3, 3)]
    for r in result["exercises"]:
        assert set(r) == {"name", "pass", "message", "seconds", "points", "out_of"} and r["seconds"] >= 0
    assert "lr_at(0.0, 1e-3) should be 0.00025" in result["exercises"][0]["message"]


def test_check_json_refuses_the_reference_and_a_file_with_nothing_written_in_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"cram.py is the reference cram.py itself, not a student's work"):
        exercises.main(["check", "glu", "--json"])
    stub = tmp_path / "my_cram.py"
    exercises.main(["stub", "glu", "lr_schedule", "--out", str(stub)])
    with pytest.raises(SystemExit, match=r"my_cram.py is unchanged from the stub: nothing written yet for glu"):
        exercises.main(["check", "glu", "--file", str(stub), "--json"])


def test_a_crash_of_the_checking_process_costs_only_its_exercise(tmp_path):
    path = tmp_path / "eve.py"
    path.write_text(REFERENCE.replace(LOOP, LOOP + "    os._exit(3)\n"), encoding="utf-8")
    result = exercises.graded(path, ["masking", "lr_schedule", "batch_ramp"], timeout=60)
    assert [r["pass"] for r in result["exercises"]] == [True, False, True]
    assert result["exercises"][1]["message"].startswith("the check's process stopped (exit code 3")


def test_the_grader_passes_on_no_secret_and_works_in_a_folder_of_its_own(tmp_path, monkeypatch):
    spy = tmp_path / "spy.py"
    spy.write_text(textwrap.dedent("""
        import json, os, sys
        print(json.dumps({"name": "env", "pass": True, "message": json.dumps([sorted(os.environ), os.getcwd()]),
                          "seconds": 0}))
    """), encoding="utf-8")
    monkeypatch.setenv("GITHUB_TOKEN", "s3cret")
    lines, timed_out, *_ = classroom.run_worker([sys.executable, str(spy)], timeout=60)
    names, cwd = json.loads(lines[0]["message"])
    passed_on = [n for n in names if n in os.environ and n not in classroom.PASSED_ON]
    set_here = {"HOME", "USERPROFILE", "PYTHONIOENCODING", "PYTHONDONTWRITEBYTECODE"}  # the grader sets them
    assert not timed_out and "GITHUB_TOKEN" not in names and set(passed_on) <= set_here, passed_on
    assert Path(cwd) != Path.cwd() and not Path(cwd).exists(), "its working folder is a fresh one, removed after"


def test_a_csv_cell_that_starts_like_a_formula_is_kept_as_text():
    assert [classroom.cell(v) for v in ("=HYPERLINK(1)", "+1", "-x", "@a", "alice", 3)] == \
        ["'=HYPERLINK(1)", "'+1", "'-x", "'@a", "alice", 3]
