"""What several test files share: a tiny checkpoint in cram.py's layout, with its tokenizer beside it (torchrun's tests
take `--standalone`: a free port, torchrun's own pick); a fixture's value built once for all pytest-xdist workers
(built_once); the slow tests first, handed out one at a time; and the machine every test runs on, the same whatever
the machine has:

- the CPU. A test not marked `cuda` sees no CUDA GPU: torch.cuda.is_available() says False in this process, and
  CUDA_VISIBLE_DEVICES="" hides the GPU from every process a test starts (cram.py, torchrun, the lesson's kernel),
  so --device auto is the CPU and --preset auto is tiny, as on a laptop. Apple's GPU (mps) is left as torch reports
  it. A test may still simulate a GPU with its own monkeypatch (tests/test_gpu_paths.py): it runs after this one.
- `@pytest.mark.cuda`: a test that needs the real GPU, and sees it; skipped, with the reason, where there is none.
- its share of the cores: under pytest-xdist (-n N) each worker's torch, and each process a test starts
  (OMP_NUM_THREADS), takes cores / N threads, not all of them each.
- every script a test starts names its device, and cram.py and bench.py their preset: a command line that leaves
  them to the machine fails the test that starts it (pinned_popen), here as on a GPU machine.
"""
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 0))  # set by pytest-xdist in each worker, before this runs
if WORKERS:
    CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    THREADS = max(1, CORES // WORKERS)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):  # torch's; the tokenizers' (Rust)
        os.environ[name] = str(THREADS)  # before torch starts its thread pool, and inherited by every subprocess

import torch  # noqa: E402

if WORKERS:
    torch.set_num_threads(THREADS)

# Asked once, before anything hides the GPU. On a GPU machine this also starts CUDA's driver, which reads
# CUDA_VISIBLE_DEVICES only then: hiding the GPU later (pin_the_cpu) leaves it to this process's `cuda` tests.
REAL_CUDA = torch.cuda.is_available()
REAL = {name: getattr(torch.cuda, name) for name in ("is_available", "device_count")}
REAL_VISIBLE = os.environ.get("CUDA_VISIBLE_DEVICES")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from cram import Config, CrammedBERT  # noqa: E402

WORDS = ("the a cat dog sat on mat is not good bad movie film he said \" ' , . ? ! yes no man woman play "
         "plays playing ran runs quickly why what who where how it was were").split()


# ---------------------------------------------------------------------------------------------- the machine

def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU and sees it (other tests see none); skipped without")
    config.addinivalue_line("markers", "slow: among the slowest (~7 s or more on 2 cores, or a compile); runs first")
    # pytest-xdist starts each worker on a run of consecutive tests (a quarter of its share: 13 on 12 workers), which
    # would give the slow tests, sorted first, all to the first worker. Unless told otherwise (--maxschedchunk), it
    # hands them out one at a time: each worker starts with two tests, and takes one more whenever it is free.
    if getattr(config.option, "maxschedchunk", 0) is None:  # None: pytest-xdist is here and no one chose
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU: torch.cuda.is_available() is False here")
    for item in items:
        if item.get_closest_marker("cuda") and not REAL_CUDA:
            item.add_marker(skip)
    # The slowest tests first: pytest-xdist hands tests out in this order (one at a time: pytest_configure), so no
    # worker is left alone at the end with a long one (the longest first, the classic rule). On 12 workers ~105 s ->
    # ~60 s, replayed with pytest-xdist's own scheduler over measured durations (notes, 2026-11-27).
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: the rest keep their order


# Project scripts that choose for themselves unless told: their device (--device auto: CUDA, else mps, else the
# CPU) and, for cram.py and bench.py, their preset (--preset auto: paper on CUDA, else tiny).
CHOOSES = {"cram.py": ("--device", "--preset"), "bench.py": ("--device", "--preset"), "finetune_glue.py": ("--device",),
           "fill_mask.py": ("--device",), "classify.py": ("--device",), "mfu_probe.py": ("--device", "--preset")}


def unpinned(args, env=None):
    """Why a command a test starts would let the machine choose (a line), or None. args and env as subprocess.Popen
    takes them; only Python commands (and torchrun) are judged, and `--help` chooses nothing."""
    if isinstance(args, (bytes, os.PathLike)):
        args = [args]
    words = shlex.split(args) if isinstance(args, str) else [os.fsdecode(a) for a in args]
    if not words or not (words[0] == sys.executable or Path(words[0]).name.startswith(("python", "torchrun"))):
        return None
    if (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES") != "":
        return ("its environment shows it the GPU (no CUDA_VISIBLE_DEVICES=\"\"): build env from os.environ, "
                "env={**os.environ, ...}")
    if "--help" in words or "-h" in words:
        return None
    for word in words:
        missing = [flag for flag in CHOOSES.get(Path(word).name, ()) if flag not in words]
        if missing:
            return f"{Path(word).name} is started without {' and '.join(missing)} (say --device cpu, --preset tiny)"
    return None


REAL_POPEN_INIT = subprocess.Popen.__init__


def pinned_popen(self, args, *rest, **kw):
    """subprocess.Popen (so subprocess.run too) in the tests: a command that would let the machine choose is refused."""
    if PINNED and (why := unpinned(args, kw.get("env"))):
        pytest.fail(f"a test started {args!r}, which would pick its own device or preset on a GPU machine: {why}",
                    pytrace=False)
    REAL_POPEN_INIT(self, args, *rest, **kw)


PINNED = False  # True while a test that is not marked `cuda` (or a fixture of one) runs


@pytest.fixture(scope="session", autouse=True)
def pin_the_cpu():
    """For the whole session, fixtures of every scope included: no CUDA, in this process and in those it starts."""
    global PINNED
    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch.cuda, "is_available", lambda: False)
        m.setattr(torch.cuda, "device_count", lambda: 0)
        m.setenv("CUDA_VISIBLE_DEVICES", "")
        m.delenv("GLUE_DIR", raising=False)  # each test names its GLUE folder, or none (the hub), whatever the shell says
        m.setattr(subprocess.Popen, "__init__", pinned_popen)
        PINNED = True
        yield
        PINNED = False


@pytest.fixture(autouse=True)
def cuda_tests_see_the_gpu(request, monkeypatch):
    """A test marked `cuda` (run only where there is a GPU) gets it back, and may start what it likes."""
    global PINNED
    if request.node.get_closest_marker("cuda") is None:
        yield
        return
    show_the_gpu(monkeypatch)
    PINNED = False
    yield
    PINNED = True
    forget_what_torch_asked_of_cuda()  # the tests after it see no GPU again


def show_the_gpu(monkeypatch):
    for name, real in REAL.items():
        monkeypatch.setattr(torch.cuda, name, real)
    if REAL_VISIBLE is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", REAL_VISIBLE)
    forget_what_torch_asked_of_cuda()


def forget_what_torch_asked_of_cuda():
    """torch keeps some answers to torch.cuda.is_available() for good (functools caches: "is there a GPU for Triton?").
    Asked by a CPU test's compile with the GPU hidden, "no" would stay for a `cuda` test in the same worker: its
    compile failed with TritonMissing on an H200 (2026-11-27). Emptied whenever the GPU is shown or hidden again."""
    for module in ("torch.utils._triton", "torch._inductor.utils"):
        for value in list(getattr(sys.modules.get(module), "__dict__", {}).values()):
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()


def built_once(tmp_path_factory, name, build):
    """A session fixture's value built once for the whole run: under pytest-xdist the first worker to ask builds it
    and the others wait for it and read it, where each would build its own (~20 s for two trainings, on each).
    build(folder) fills a new folder, seen by every worker, and returns what the tests get (JSON: lists, not tuples)."""
    if not WORKERS:
        return build(tmp_path_factory.mktemp(name))
    from filelock import FileLock  # a dependency of torch
    shared = tmp_path_factory.getbasetemp().parent  # the folder above each worker's own: this run's, for all
    with FileLock(str(shared / f"{name}.lock")):
        done = shared / f"{name}.json"
        if not done.exists():  # the first to ask, or a worker after one whose build failed
            shutil.rmtree(shared / name, ignore_errors=True)
            (shared / name).mkdir()
            done.write_text(json.dumps(build(shared / name)), encoding="utf-8")
        return json.loads(done.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------- a tiny checkpoint

@pytest.fixture(scope="session")
def ckpt(tmp_path_factory):
    """A 1-layer, 32-wide checkpoint in cram.py's layout, with a tiny WordPiece tokenizer beside it."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    folder = tmp_path_factory.mktemp("ckpt")
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.save(str(folder / "tokenizer.json"))
    meta = {"version": 1, "tokenizer": "wordpiece", "tokenizer_file": "tokenizer.json", "vocab_size": len(vocab),
            "special_ids": {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}, "seq_len": 128,
            "num_sequences": {"train": 1, "val": 1}}
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    cfg = Config(n_layer=1, n_embd=32, n_head=2, ffn_hidden=64)
    torch.manual_seed(1234)  # not a fine-tuning seed, so --random_init's weights differ from these
    model = CrammedBERT(cfg, len(vocab), 128)
    torch.save({"model": model.state_dict(), "config": dataclasses.asdict(cfg), "vocab_size": len(vocab),
                "seq_len": 128, "meta": meta, "step": 0}, folder / "ckpt.pt")
    return folder / "ckpt.pt"
