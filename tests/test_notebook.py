"""The lesson (lesson.ipynb) runs top to bottom, headless, as a teacher runs it: CI executes it from the fresh clone,
so it cannot rot. LESSON_QUICK=1 shrinks its step counts (the committed outputs come from the normal run)."""
import json
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "lesson.ipynb"
LESSON_WRITES = (".bin", ".pt", ".json", ".jsonl", ".md", ".csv", ".tsv", ".txt", ".png")  # data, model, logs, tables


def files_of(root):
    """Every file under root but git's and Python's caches: what the lesson must leave as it found it."""
    found = set()
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git", "__pycache__", ".pytest_cache")]
        found |= {str(Path(folder, name).relative_to(root)) for name in names}
    return found


def test_the_committed_lesson_has_its_outputs_and_needs_nothing_outside_the_repository():
    nb = json.loads(LESSON.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] for c in code[1:]), "a cell has no output: execute the notebook before committing it"
    assert not any(o["output_type"] == "error" for c in code for o in c["outputs"])
    source = "".join("".join(c["source"]) for c in nb["cells"])
    assert "../shared" not in source and "pip install -q -r requirements.txt" in source


@pytest.mark.slow
def test_the_lesson_runs_top_to_bottom_offline_and_draws_its_pictures(tmp_path, monkeypatch):
    monkeypatch.setenv("LESSON_QUICK", "1")  # the kernel inherits the environment: fewer steps
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no hub: a call to it fails at once
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the lesson's temp folder (data, model) goes, and goes away, here
    nb = nbformat.read(LESSON, as_version=4)
    before = files_of(ROOT)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})  # the kernel starts in the repository
    try:
        client.execute()  # raises CellExecutionError, with the cell and its traceback, at the first failing cell
    finally:
        nbformat.write(nb, tmp_path / "lesson.ipynb")  # the executed copy, to read when it fails
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    pictures = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pictures) >= 3, f"{len(pictures)} pictures drawn"
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert "26 [MASK], 3 random, 3 kept" in text and "(16, 32, 8192)" in text and "| difference |" in text
    assert "installing requirements" not in text  # everything is installed: the set-up cell installs nothing
    written = [f for f in files_of(ROOT) - before if f.endswith(LESSON_WRITES)]  # what a run leaves, by its names
    assert not written, f"the lesson wrote {written} into the repository: its files belong in its temp folder"
