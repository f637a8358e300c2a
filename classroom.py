"""The class kit behind `python exercises.py release` and `grade`: a student copy without the answers, the teacher's
bundle, and the grading of a class, each student's file in a process of its own.

    python exercises.py release class/student --teacher class/teacher   # every exercise; or name some after DIR
    python exercises.py check masking glu --file alice.py --json        # one file: JSON, points per exercise
    python exercises.py grade submissions --out grades.csv              # a class: a row per student, in the bundle

exercises.py hands this module the files to write and the command that checks a file: this module imports nothing
of the project (imports run one way: exercises.py imports it).

A release copies the project's files as git sees them (tracked and new ones, not what .gitignore ignores: data,
runs, checkpoints), and names those git does not track: a teacher's own file in the project's folder would travel
too. What a student copy leaves out, as it holds answers: the reference cram.py (the copy's cram.py has the exercises'
functions as stubs), the git history, the tests (they plant and test the reference's code), .ci/ (it runs them), the
lab notebook docs/notes.md, the answers of the teacher's guide (docs/teaching_answers.md), and the measured
answers of the scaling exercise (LEAVE_OUT, STRIP below). Before anything is written, every text file of the copy is
searched for the lines of the reference's answers: a hit stops the release with nothing written. exercises.py's
checks stay (students check their own work), and they compute what they compare with from the assignment's formulas:
`release --no_checks` leaves their code out.

What isolation the grader gives. Each student's file is checked in a Python process of its own, started with
  - a fresh temporary folder as its working folder (deleted afterwards), and HOME there, no input (stdin closed);
  - a time limit (--timeout, 60 s): then the process and those it started are killed, the check running counts 0
    ("timed out"), and the exercises after it are checked in a fresh process with the same limit;
  - an environment reduced to PASSED_ON (the PATH, the locale, the temporary folder, thread counts, Python's
    own): tokens, keys and passwords in the teacher's environment variables are not passed on;
  - what the student's code prints thrown away (the results travel apart, one JSON line per exercise), and a
    crash of the process costs only the exercise it was checking.
What it does not give: it is not a sandbox. The student's code runs with the grader's user rights: it can read and
write every file the grader's user can (by absolute path), reach the network, use all the memory and every core
(there is no memory limit), and a student who sets out to can forge their own results. For code from strangers,
grade in a throwaway account, container or virtual machine that holds no secrets and no network.
"""
import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from fnmatch import fnmatch
from pathlib import Path

from errors import written_whole

# The student copy: what it leaves out (a folder ends in /), and the sections of pages it cuts (to the next heading of
# the same level), as they hold answers. Folders that hold an earlier release (CLASS_MARKS) are never copied.
LEAVE_OUT = (".git/", "tests/", ".ci/", "docs/notes.md", "docs/teaching_answers.md", "docs/scaling_tokens.png",
             "docs/scaling_flops.png")
STRIP = {"docs/scaling.md": ("## What we measured",), "docs/results.md": ("## Size, not shape",),
         "docs/teaching.md": ("## Common slips, and what the student sees",)}  # its fixes: the checks' messages
CLASS_MARKS = ("CLASS.md", "class.json")  # written into a student copy and a teacher's bundle
TEXT = (".py", ".md", ".ipynb", ".txt", ".json", ".csv", ".cfg", ".toml", ".yml", ".yaml", ".sh", "")  # "": run

# The grader's processes see only these of the teacher's environment variables: what Python, torch and the
# platform need to start (Windows' SYSTEMROOT, a virtual environment's or conda's paths, the thread counts).
PASSED_ON = ("PATH", "PATHEXT", "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "COMSPEC", "TEMP", "TMP", "TMPDIR", "LANG",
             "LANGUAGE", "LC_ALL", "LC_CTYPE", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH",
             "DYLD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "NUMBER_OF_PROCESSORS",
             "PROCESSOR_ARCHITECTURE")


# ----------------------------------------------------------------------------------------------------------------
# Release: the student copy and the teacher's bundle.

def git_files(root, *which):
    listed = subprocess.run(["git", "ls-files", *which, "-z"], cwd=root, capture_output=True, timeout=60,
                            check=True).stdout
    return [p for p in listed.decode("utf-8", "surrogateescape").split("\0") if p]


def project_files(root, skip=()):
    """(the project's files, those of them git does not track): paths relative to `root`, with /, as git sees
    them, tracked and new, not what .gitignore ignores (data, runs, checkpoints); without git, every file
    .gitignore does not name. Not the folders `skip` (where the release goes), nor one holding an earlier release."""
    untracked = []
    try:
        untracked = git_files(root, "--others", "--exclude-standard")
        paths = git_files(root, "--cached") + untracked
    except (OSError, subprocess.SubprocessError):  # not a git checkout (a downloaded zip): .gitignore's patterns
        patterns = [line.strip() for line in read(root / ".gitignore").splitlines()
                    if line.strip() and not line.startswith("#")]
        paths = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
        paths = [p for p in paths if not ignored(p, patterns)]
    skip = [s.resolve() for s in skip]
    marked = {p.rsplit("/", 1)[0] for p in paths if "/" in p and p.rsplit("/", 1)[1] in CLASS_MARKS}
    paths = sorted(p for p in set(paths) if (root / p).is_file() and not p.startswith(".git/")
                   and not any(p.startswith(m + "/") for m in marked)
                   and not any(s == (root / p).resolve() or s in (root / p).resolve().parents for s in skip))
    return paths, [p for p in paths if p in untracked]


def ignored(path, patterns):
    """Does one of .gitignore's simple patterns ("data/": a folder, "*.pt": a file) name the file `path`?"""
    parts = path.split("/")
    return any(fnmatch(part, pattern.strip("/")) for pattern in patterns
               for part in (parts[:-1] if pattern.endswith("/") else parts[-1:]))


def read(path):
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def stripped(text, headings):
    """A page without the sections that start at `headings` (each to the next heading of its level, or the end)."""
    for heading in headings:
        if heading not in text:
            raise SystemExit(f"exercises.py: error: the release cuts the section {heading!r}, which is gone from its "
                             "page: update classroom.STRIP")
        level = heading.split(" ")[0] + " "
        before, after = text.split(heading, 1)
        rest = after.split("\n" + level, 1)
        text = before + (level + rest[1] if len(rest) > 1 else "").rstrip("\n") + "\n"
    return text


def left_out(path):
    return any(path.startswith(x) if x.endswith("/") else path == x for x in LEAVE_OUT)


def unlinked(text):
    """A page whose links to a left-out page (the lab notebook, ...) keep their words, not the link: no dead link."""
    pages = "|".join(re.escape(Path(x).name) for x in LEAVE_OUT if x.endswith(".md"))
    return re.sub(rf"\[([^\]]+)\]\((?:[\w./]*/)?(?:{pages})(?:#[^)]*)?\)", r"\1", text)


def copy_tree(root, files, into, written, leave_out):
    """Copy `files` from root into the folder `into`; `written` {path: text} replaces or adds files."""
    for path in files:
        if leave_out and left_out(path) or path in written:
            continue
        target = into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if leave_out and (path in STRIP or path.endswith(".md")):
            target.write_text(unlinked(stripped(read(root / path), STRIP.get(path, ()))), encoding="utf-8")
        else:
            shutil.copy2(root / path, target)
    for path, text in written.items():
        (into / path).parent.mkdir(parents=True, exist_ok=True)
        (into / path).write_text(text, encoding="utf-8")


def answers_in(folder, answers):
    """(file, exercise, a line) for each text file of `folder` that holds the answer of an exercise: two of its
    lines (its reference code's lines, comments cut, found nowhere else in cram.py: answers {exercise: lines}), or
    its one line."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in TEXT):
        text = read(path)
        if path.suffix == ".ipynb":  # the cells' code, not its JSON escapes
            try:
                text = "\n".join("".join(c.get("source", "")) for c in json.loads(text).get("cells", []))
            except (ValueError, AttributeError):
                pass
        code = {line.split("  #")[0].strip() for line in text.splitlines()}
        for exercise, lines in answers.items():
            found = [line for line in lines if line in code]
            if found and len(found) >= min(2, len(lines)):
                yield path.relative_to(folder).as_posix(), exercise, found[0]


def fresh(folder, what):
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise SystemExit(f"exercises.py: error: {what} {folder} exists and is not empty: name a new folder (nothing "
                         "was written)")
    folder.parent.mkdir(parents=True, exist_ok=True)  # class/student: class/ made if need be


def release(root, dest, student_files, answers, teacher=None, teacher_files=None):
    """Write the student copy to `dest`: the project without LEAVE_OUT, STRIP's sections cut, `student_files`
    {path: text} written in; with `teacher`, the bundle there: the whole project and `teacher_files`. Each folder is
    made beside its place and renamed into it when whole; no file of the copy may hold `answers`. Returns the
    files of the copy that git does not track (a teacher's own file in the project's folder would travel too)."""
    fresh(dest, "the student copy")
    if teacher:
        fresh(teacher, "--teacher")
        if teacher.resolve() == dest.resolve():
            raise SystemExit("exercises.py: error: --teacher must be another folder than the student copy's")
    files, untracked = project_files(root, skip=[dest] + ([teacher] if teacher else []))
    made = []
    try:
        for folder, written, leave_out in [(dest, student_files, True)] + \
                ([(teacher, teacher_files or {}, False)] if teacher else []):
            made.append(folder.parent / f".{folder.name}-{os.getpid()}-{time.time_ns()}.tmp")
            made[-1].mkdir()  # the user's usual permissions (mkdtemp's would be the owner's only)
            copy_tree(root, files, made[-1], written, leave_out)
        leak = next(answers_in(made[0], answers), None)
        if leak:
            raise SystemExit(f"exercises.py: error: {leak[0]} would give students the answer of {leak[1]} "
                             f"({leak[2]!r}): nothing was written; leave it out of the copy (classroom.LEAVE_OUT) or "
                             "cut it (STRIP)")
        for tmp, folder in zip(made, [dest, teacher]):
            if folder.exists():
                folder.rmdir()  # empty (fresh() said so)
            os.replace(tmp, folder)
    finally:
        for tmp in made:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already once renamed
    return [p for p in untracked if not left_out(p)]


def class_page(exercises, order, checks):
    """CLASS.md of a student copy: what to write (exercises {name: its fields}), an order that works, the commands,
    what the copy leaves out."""
    rows = [f"| `{n}` | {', '.join(f'`{w}`' for w in ex['write'])} | {ex['points']} | {ex['minutes']} | "
            f"{', '.join(d for d in ex['needs'] if d in exercises)} |" for n, ex in ((n, exercises[n]) for n in order)]
    checking = ("- `python exercises.py check NAME`: PASS, or FAIL with what differs, in your cram.py\n"
                "- `python exercises.py check all`: every exercise of this copy\n") if checks else ""
    return f"""# Your exercises

This is a student copy of the project. In `cram.py` the functions below are yours to write: each keeps its
signature and docstring and raises `NotImplementedError` until you write it. The rest of the project is as it is.

| exercise | you write | points | minutes | its check also runs (write it first) |
|---|---|---:|---:|---|
{chr(10).join(rows)}

An order that works: {', '.join(order)}. Fix a FAIL in this order: a later check runs the code of the earlier
exercises it names, so a slip there can fail it too. (Your teacher's grader runs the reference's code of those
earlier exercises, so each exercise is graded on its own code alone.)

- `python exercises.py show NAME`: the assignment
{checking}- `python prepare.py --vocab_size 8192 --max_tokens_per_char 0.3`: the data, once (seconds), before training
- `python cram.py --preset tiny`: trains once the exercises it runs are written; else it names one
{"" if checks else chr(10) + "This copy has no checks: your teacher grades your cram.py." + chr(10)}
Hand in your `cram.py` as your teacher asks (the grader takes one file per student, `alice.py`, or one folder per
student, `alice/cram.py`). In Colab, download it first: a Colab session's files are gone when it ends.

Left out of this copy, as they hold the answers: the reference `cram.py`, the tests (the README's test command
has nothing to run here), the git history, the lab notebook (`docs/notes.md`, which some pages name), the teacher's
answers (`docs/teaching_answers.md`), and the measured answers of the scaling exercise (`docs/scaling.md`,
`docs/results.md`).
"""


def answers_page(exercises):
    """answers.md of a teacher's bundle: per exercise ({name: its fields and "code"}) the assignment, what its check
    runs, the reference code."""
    parts = [f"## {n}: {ex['title']}\n\n{ex['points']} points, about {ex['minutes']} minutes; {ex['paper']}. The "
             f"student writes {', '.join(f'`{w}`' for w in ex['write'])}."
             + (f" Its check runs the code of {', '.join(ex['needs'])} too." if ex["needs"] else "")
             + f"\n\n{ex['text']}\n\nThe reference (cram.py):\n\n```python\n{ex['code']}\n```\n"
             for n, ex in exercises.items()]
    return (f"# The answers: {', '.join(exercises)}\n\nNot for students: the teacher's bundle of a class, made by "
            "`python exercises.py release`. This folder is the project with its reference `cram.py`, the tests and the "
            "lab notebook; `class.json` names the class's exercises and their points. Grade here (a row per student, a "
            "column per exercise; then one student's file):\n\n```\n"
            "python exercises.py grade SUBMISSIONS --out grades.csv\n"
            "python exercises.py check NAME --file alice.py --json\n```\n\n"
            "docs/exercises.md says what the grader isolates and what not. Below, each exercise: its points and "
            "minutes, the assignment the students read, and the reference code.\n\n" + "\n".join(parts))


# ----------------------------------------------------------------------------------------------------------------
# Grading: a student's file checked in a process of its own, with a time limit.

class Discard(io.TextIOBase):
    """Where the student's prints go in the grader's process: nowhere (a print in an endless loop fills nothing)."""

    def write(self, text):
        return len(text)


def stop(process):
    """Kill the process and those it started (its process group on Linux and macOS, its tree on Windows)."""
    try:
        if os.name == "nt":
            subprocess.run(["taskkill", "/F", "/T", "/PID", str(process.pid)], capture_output=True, timeout=30)
        else:
            os.killpg(process.pid, signal.SIGKILL)
    except (OSError, subprocess.SubprocessError):
        pass
    process.kill()  # in case the above could not


def run_worker(command, timeout):
    """Run `command` (a check --worker) in a fresh temporary folder, with PASSED_ON's environment and a time limit:
    (its JSON lines, timed out?, seconds, the last line of its stderr, its exit code)."""
    home = tempfile.mkdtemp(prefix="grade-")
    env = {name: value for name, value in os.environ.items() if name in PASSED_ON}
    env.update(HOME=home, USERPROFILE=home, PYTHONIOENCODING="utf-8", PYTHONDONTWRITEBYTECODE="1")
    start, timed_out = time.perf_counter(), False
    try:
        try:
            process = subprocess.Popen(command, cwd=home, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, start_new_session=os.name != "nt",
                                       creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0))
        except OSError as e:  # no Python there, no memory to start one
            return [], False, 0.0, f"it could not start: {e}", None
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            stop(process)
            try:
                out, err = process.communicate(timeout=30)  # what it wrote before: the checks that ended
            except subprocess.TimeoutExpired:  # a pipe held open by a process that escaped the kill
                out, err = b"", b""
    finally:
        shutil.rmtree(home, ignore_errors=True)
    lines = []
    for line in out.decode("utf-8", "replace").splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue  # the student's code wrote to the real stdout
        if not isinstance(lines[-1], dict):
            lines.pop()
    last = (err.decode("utf-8", "replace").strip().splitlines() or [""])[-1][:300]
    return lines, timed_out, time.perf_counter() - start, last, process.returncode


def seconds_in(line, key):
    value = line.get(key)
    return float(value) if isinstance(value, (int, float)) else 0.0


def check_file(command, names, timeout):
    """{exercise: {"pass", "message", "seconds"}} of one student's file: command(names) is the process that checks
    them. A check still running at the time limit, or one the process died in, fails; the rest go on in a fresh one."""
    results, todo = {}, list(names)
    while todo:
        lines, timed_out, seconds, last, code = run_worker(command(todo), timeout)
        imported, spent = None, seconds
        for line in lines:
            if "error" in line:  # the file does not import: nothing to check
                return {**results, **{n: {"pass": False, "message": line["error"], "seconds": 0.0} for n in todo}}
            if "imported" in line:
                imported = seconds_in(line, "imported")
                spent -= imported
            elif line.get("name") in todo and line["name"] not in results:
                results[line["name"]] = {"pass": line.get("pass") is True, "message": str(line.get("message", "")),
                                         "seconds": seconds_in(line, "seconds")}
                spent -= results[line["name"]]["seconds"]
        todo = [n for n in todo if n not in results]
        why = f"timed out after {timeout:g} s (an endless loop?)" if timed_out else \
            f"the check's process stopped (exit code {code}{': ' + last if last else ''})"
        if todo and imported is None:  # it never got past the import: the others would not either
            return {**results, **{n: {"pass": False, "message": f"{why}, importing the file", "seconds": 0.0}
                                  for n in todo}}
        if todo:  # the check it was running
            results[todo.pop(0)] = {"pass": False, "message": why, "seconds": round(max(spent, 0.0), 2)}
    return {n: results[n] for n in names}


def submissions(folder, sheet=None):
    """[(student, their file)]: each .py file in `folder` (the student: its name), each folder (its cram.py) and
    each other file (its whole name: grade refuses it in its row, so no student is left off the sheet); hidden
    entries, __pycache__, Windows' own files and the grade sheet itself (`sheet`, and its twin) are skipped."""
    if not folder.is_dir():
        raise SystemExit(f"exercises.py: error: no folder {folder}: grade needs a folder of students' files (one .py "
                         "file, or one folder with its cram.py, per student)")
    ours = {sheet.name, sheet.name + ".tmp"} if sheet and sheet.resolve().parent == folder.resolve() else set()
    entries = [p for p in sorted(folder.iterdir()) if not p.name.startswith((".", "__"))
               and p.name.lower() not in ("thumbs.db", "desktop.ini") and p.name not in ours]
    names = [p.stem if p.is_file() and p.suffix.lower() == ".py" else p.name for p in entries]  # hank.PY too
    found = [(name if names.count(name) == 1 else p.name + "/" * p.is_dir(), p / "cram.py" if p.is_dir() else p)
             for name, p in zip(names, entries)]  # judy.py and judy/: two rows, each named by its entry
    if not found:
        raise SystemExit(f"exercises.py: error: {folder} holds no student's file (one .py file, or one folder with "
                         "its cram.py, per student)")
    return found


def cell(value):
    """A CSV cell a spreadsheet shows as text: one that starts like a formula (=, +, -, @) gets a ' first."""
    return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def grade(folder, names, points, out, overwrite, graded):
    """Grade every student's file in `folder` (graded(path): exercises.py's results of one file) on the exercises
    `names` ({name: points}); write `out`, a CSV: a row per student, each exercise's points, the total, what failed."""
    if not out or not str(out).endswith(".csv"):
        raise SystemExit("exercises.py: error: grade needs --out FILE.csv (the grades, a row per student)")
    out = Path(out)
    if out.exists() and not overwrite:
        raise SystemExit(f"exercises.py: error: {out} exists already: name another --out, or add --overwrite")
    if not out.resolve().parent.is_dir():
        raise SystemExit(f"exercises.py: error: --out {out}: no folder {out.parent}: make it first")
    if out.is_dir():
        raise SystemExit(f"exercises.py: error: --out {out} is a folder: name a .csv file")
    rows, possible = [], sum(points[n] for n in names)
    for student, path in submissions(folder, out):
        if path.is_file() and path.suffix.lower() == ".py":
            result = graded(path)
        elif path.name == "cram.py":  # a student's folder without it
            result = {"refused": f"no cram.py in {path.parent}", "exercises": [], "points": 0}
        else:
            result = {"refused": f"{path.name} is not a .py file: hand in the cram.py you wrote, as a .py",
                      "exercises": [], "points": 0}
        failed = [r for r in result["exercises"] if not r["pass"]]
        message = result.get("refused") or " | ".join(f"{r['name']}: {r['message']}" for r in failed)
        earned = {r["name"]: r["points"] for r in result["exercises"]}
        rows.append([student, *(earned.get(n, 0) for n in names), result["points"], message])
        summary = f"refused: {message}" if "refused" in result else \
            "failed: " + ", ".join(r["name"] for r in failed) if failed else "every exercise passed"
        print(f"{student:20s} {result['points']:3d} of {possible}  {summary}")
    try:
        with written_whole(out, "w", encoding="utf-8", newline="") as f:  # whole or not at all
            writer = csv.writer(f)
            writer.writerow(["student", *names, "total", "message"])
            writer.writerows([cell(c) for c in row] for row in rows)
    except OSError as e:  # no permission, a full disk: the grades are above, as printed
        raise SystemExit(f"exercises.py: error: cannot write {out} ({e.strerror or e}): the grades are printed above; "
                         "grade again with another --out") from None
    print(f"wrote {out}: {len(rows)} students, {len(names)} exercises, {possible} points in all")
    return 0
