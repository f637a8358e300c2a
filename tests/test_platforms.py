"""Learners' laptops, simulated on Linux: Windows (no Unix-only modules, cp1252 as the default encoding of files and of
redirected output, Ctrl+Break) and Macs (Apple's GPU, "mps": the device decisions are functions of what torch reports,
monkeypatched here as tests/test_gpu_paths.py does for CUDA)."""
import ast
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import types

import numpy as np
import pytest
import torch

from test_cram import ROOT, TINY_FLAGS, write_data
import bench  # noqa: E402  (test_cram put the project on sys.path)
import cram  # noqa: E402
import finetune_glue  # noqa: E402
import hardware  # noqa: E402

SCRIPTS = ["bench.py", "cram.py", "prepare.py", "finetune_glue.py", "fill_mask.py", "plot.py", "exercises.py"]
MPS, CPU = torch.device("mps"), torch.device("cpu")


def project_modules():
    """Every .py file of the project outside tests/, new ones included (tracked or not yet, unless git ignores them),
    none in a hidden folder (.venv, a copy of another project beside ours that no .gitignore names)."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.py"],
                                cwd=ROOT, capture_output=True, encoding="utf-8", timeout=30, check=True).stdout
        paths = {ROOT / line for line in listed.splitlines()}
    except (OSError, subprocess.SubprocessError):  # not a git checkout: the scripts beside cram.py
        paths = set(ROOT.glob("*.py"))
    parts = lambda p: p.relative_to(ROOT).parts  # noqa: E731
    return sorted(p for p in paths if p.exists() and parts(p)[0] != "tests" and not any(
        d.startswith(".") for d in parts(p)[:-1]))


# ---------------------------------------------------------------------------------------------- Windows: imports

def test_every_script_imports_and_prints_its_help_without_the_unix_only_resource_module():
    runner = (f"import runpy, sys\nsys.modules['resource'] = None  # Windows has no resource module\n"
              f"sys.path.insert(0, {str(ROOT)!r})\n"
              f"for script in {SCRIPTS!r}:\n"
              "    sys.argv = [script, '--help']\n"
              "    try:\n"
              "        runpy.run_path(script, run_name='__main__')\n"
              "    except SystemExit as e:\n"
              "        print('exit', script, e.code, flush=True)\n"
              "    except Exception as e:\n"
              "        print('crash', script, type(e).__name__, e, flush=True)\n")
    p = subprocess.run([sys.executable, "-c", runner], cwd=ROOT, capture_output=True, encoding="utf-8", timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert [line for line in p.stdout.splitlines() if line.startswith(("exit", "crash"))] == \
        [f"exit {s} 0" for s in SCRIPTS], p.stdout[-3000:]
    assert p.stdout.count("usage:") == len(SCRIPTS)


def test_every_command_line_refuses_a_shortened_flag_which_argparse_would_take_for_the_longer_one(capsys):
    parsers = [(p.name, node.lineno) for p in project_modules() for node in ast.walk(ast.parse(p.read_text("utf-8")))
               if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("ArgumentParser", "add_parser")
               and not any(k.arg == "allow_abbrev" and getattr(k.value, "value", 1) is False for k in node.keywords)]
    assert parsers == []  # e.g. cram.py --max_step 20 trained to the end into out/, as no --max_steps was read
    with pytest.raises(SystemExit):
        cram.parse_config(["--max_step", "20"])
    assert "unrecognized arguments: --max_step 20" in capsys.readouterr().err


PLATFORM_ONLY = {"resource", "fcntl", "termios", "pwd", "grp", "pty", "tty", "posix", "crypt", "syslog", "readline",
                 "msvcrt", "winreg", "winsound", "_winapi"}


def unguarded_platform_imports(source):
    """(line, module) of each import of a Unix- or Windows-only module that no `try ... except ImportError` guards."""
    tree, found = ast.parse(source), []

    def guards(node):
        return isinstance(node, ast.Try) and any(
            h.type is None or any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError", "Exception")
                                  for n in ast.walk(h.type)) for h in node.handlers)

    def visit(node, guarded):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found.extend((node.lineno, n) for n in names if n.split(".")[0] in PLATFORM_ONLY and not guarded)
        for child in ast.iter_child_nodes(node):
            visit(child, guarded or (guards(node) and child in node.body))
    visit(tree, False)
    return found


def test_no_module_imports_a_unix_or_windows_only_module_unless_a_try_catches_its_import_error():
    bad = [f"{p.name}:{line} imports {name}" for p in project_modules()
           for line, name in unguarded_platform_imports(p.read_text(encoding="utf-8"))]
    assert not bad, bad


# ---------------------------------------------------------------------------------------------- UTF-8 files

ARCHIVES = {"os", "tarfile", "zipfile", "webbrowser", "wave", "sunau", "dbm", "shelve", "Image"}  # not text files
BINARY_BY_DEFAULT = {"gzip", "bz2", "lzma"}  # their open() reads bytes unless told "rt"
TEXT_WRAPPERS = {"TextIOWrapper", "FileHandler", "RotatingFileHandler", "TimedRotatingFileHandler"}
TEMPFILES = {"NamedTemporaryFile", "TemporaryFile", "SpooledTemporaryFile"}  # binary unless a mode says otherwise
SUBPROCESS = {"run", "Popen", "check_output", "check_call", "call"}


def text_io_without_encoding(source):
    """(line, call) of each text-mode file open, read_text or write_text (and subprocess text pipes) that leaves the
    encoding to the platform's default (cp1252 on Windows): binary modes need none."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func, keywords = node.func, {k.arg: k.value for k in node.keywords}
        if "encoding" in keywords:
            continue
        callee = func.body if isinstance(func, ast.IfExp) else func  # (gzip.open if gz else open)(path, "rt")
        name = callee.id if isinstance(callee, ast.Name) else callee.attr if isinstance(callee, ast.Attribute) else ""
        owner = callee.value.id if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) else ""
        modes = [a.value for a in [*node.args[:2], keywords.get("mode")]
                 if isinstance(a, ast.Constant) and isinstance(a.value, str) and set(a.value) <= set("rwxabt+U")]
        binary = any("b" in m for m in modes)
        if name in ("read_text", "write_text") or name in TEXT_WRAPPERS:
            found.append((node.lineno, name))
        elif (name == "fdopen" or name == "open" and owner not in ARCHIVES) and not binary:
            if not (owner in BINARY_BY_DEFAULT and not modes):
                found.append((node.lineno, f"{owner + '.' if owner else ''}{name}"))
        elif name in TEMPFILES and modes and not binary:
            found.append((node.lineno, name))
        elif name in SUBPROCESS and owner == "subprocess" and any(
                isinstance(keywords.get(k), ast.Constant) and keywords[k].value for k in ("text", "universal_newlines")):
            found.append((node.lineno, f"subprocess.{name}(text=True)"))
    return found


def test_the_encoding_check_flags_text_opens_and_lets_binary_and_explicit_utf8_through():
    flagged = ['open(p)', 'open(p, "w")', 'open(p, mode="a", buffering=1)', 'Path(p).read_text()', 'p.write_text(s)',
               'p.open("w")', '(gzip.open if z else open)(p, "rt")', 'gzip.open(p, "wt")', 'io.TextIOWrapper(b)',
               'tempfile.NamedTemporaryFile("w")', 'subprocess.run(["git"], text=True)', 'os.fdopen(fd, "w")']
    passed = ['open(p, "rb")', 'open(p, "wb")', 'open(p, encoding="utf-8")', 'p.write_text(s, encoding="utf-8")',
              '(gzip.open if z else open)(p, "rt", encoding="utf-8")', 'gzip.open(p)', 'p.open("rb")',
              'tempfile.NamedTemporaryFile()', 'os.open(p, os.O_RDONLY)', 'p.read_bytes()', 'p.write_bytes(b)',
              'subprocess.run(["git"], capture_output=True)', 'subprocess.run(["git"], text=True, encoding="utf-8")',
              'urllib.request.urlopen(u)', 'tarfile.open(p)']
    assert [code for code in flagged if not text_io_without_encoding(code)] == []
    assert [code for code in passed if text_io_without_encoding(code)] == []


def test_every_text_file_the_project_reads_or_writes_names_its_encoding():
    bad = [f"{p.name}:{line} {call}" for p in project_modules()
           for line, call in text_io_without_encoding(p.read_text(encoding="utf-8"))]
    assert not bad, f"name the encoding (encoding=\"utf-8\"): {bad}"


# ---------------------------------------------------------------------------------------------- Apple's GPU (mps)

def test_auto_picks_apple_s_gpu_when_torch_sees_mps_and_no_cuda(monkeypatch):
    for cuda, mps, expected in [(False, True, "mps"), (True, True, "cuda"), (False, False, "cpu")]:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
        assert cram.pick_device("auto").type == expected  # cram.py, finetune_glue.py, bench.py: --device auto
    assert cram.parse_config([]).preset == "tiny"  # the paper's 24-hour recipe is for a CUDA GPU


def torch_2_4_autocast(device_type, *args, **kw):
    """torch.autocast as torch 2.4 (requirements.txt's oldest) made it: no "mps" at all, even when disabled."""
    if device_type == "mps":
        raise RuntimeError("User specified an unsupported autocast device_type 'mps'")
    return REAL_AUTOCAST(device_type, *args, **kw)


REAL_AUTOCAST = torch.autocast


def test_mps_computes_in_fp32_with_no_autocast_context_which_torch_2_4_would_refuse(monkeypatch):
    monkeypatch.setattr(torch, "autocast", torch_2_4_autocast)
    assert hardware.amp_dtype(MPS) is None
    with hardware.autocast(MPS, hardware.amp_dtype(MPS)), hardware.autocast(CPU, None):
        assert not torch.is_autocast_enabled("cpu")
    with hardware.autocast(CPU, torch.bfloat16):  # what a GPU from Ampere on gets, here on the CPU
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_mps_gets_the_unfused_adamw_and_the_cpu_and_cuda_the_fused_one():
    model, cfg = cram.CrammedBERT(cram.Config(n_layer=1, n_embd=32, n_head=2, ffn_hidden=64), 50, 16), cram.Config()
    fused = {d: bool(cram.make_optimizer(model, cfg, torch.device(d)).defaults["fused"]) for d in ("mps", "cpu", "cuda")}
    assert fused == {"mps": False, "cpu": True, "cuda": True}  # fused AdamW on MPS: not in every torch we allow


def test_an_mps_batch_is_a_plain_blocking_copy_never_pinned(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: calls.append("pin") or self)
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **kw: calls.append((a, kw)) or self)
    data = np.arange(40, dtype=np.uint16).reshape(10, 4)
    x = cram.get_batch(data, 8, 3, MPS)  # a non-blocking copy from unpinned memory can corrupt it on MPS
    assert calls == [((MPS,), {})] and x.dtype == torch.int64 and x[:, 0].tolist() == [32, 36, 0]
    calls.clear()
    cram.get_batch(data, 0, 2, torch.device("cuda"))
    assert calls == ["pin", ((torch.device("cuda"),), {"non_blocking": True})]


def test_compile_is_on_by_default_only_for_cuda_on_linux_not_on_mps_cpu_or_windows(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert [hardware.compile_by_default(torch.device(d)) for d in ("cuda", "mps", "cpu")] == [True, False, False]
    monkeypatch.setattr(sys, "platform", "win32")  # inductor needs Triton for CUDA, which Windows lacks
    assert not hardware.compile_by_default(torch.device("cuda"))


@pytest.mark.parametrize("given, advice", [(True, "leave out --compile"), ("true", "use --compile false")])
def test_compile_is_off_where_torch_cannot_and_asked_for_it_is_one_line(given, advice, monkeypatch):
    """A Kaggle P100 (6.0) or a GeForce 10 series (6.1): Triton needs 7.0. torch 2.5 on Python 3.13: no dynamo."""
    import torch._dynamo
    monkeypatch.setattr(sys, "platform", "linux")
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (6, 0))
    assert not hardware.compile_by_default(cuda) and hardware.wants_compile("auto", cuda) is False
    with pytest.raises(hardware.CramError, match=rf"^--compile: Triton, .* needs compute capability 7.0 .*: {advice}$"):
        hardware.wants_compile(given, cuda)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    assert hardware.wants_compile(None, cuda) is True and hardware.wants_compile(given, cuda) is True
    assert hardware.wants_compile("false", cuda) is False and hardware.wants_compile(False, cuda) is False
    monkeypatch.setattr(torch._dynamo, "is_dynamo_supported", lambda: False)
    assert not hardware.compile_by_default(cuda)
    with pytest.raises(hardware.CramError, match=rf"cannot compile on Python 3\.\d+: {advice}$"):
        hardware.wants_compile(given, torch.device("cpu"))


def test_several_gpus_talk_through_nccl_on_linux_and_gloo_on_windows_and_cpus(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    assert [hardware.dist_backend(torch.device(d)) for d in ("cuda", "cpu")] == ["nccl", "gloo"]
    monkeypatch.setattr(sys, "platform", "win32")  # torch ships no NCCL for Windows
    assert hardware.dist_backend(torch.device("cuda")) == "gloo"


def test_auto_compile_follows_the_platform_decision_in_train(tmp_path, monkeypatch):
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda model: compiled.append(model) or model)
    monkeypatch.setattr(hardware, "compile_by_default", lambda device: True)
    write_data(tmp_path / "data")
    cram.main(["--data_dir", str(tmp_path / "data"), "--out_dir", str(tmp_path / "out"), "--max_steps", "1",
               *TINY_FLAGS])
    assert len(compiled) == 1


def on_fake_mps(monkeypatch):
    """Tensors sent to "mps" stay on the CPU, and refuse float64 as MPS does; torch.autocast is torch 2.4's."""
    to = torch.Tensor.to

    def fake_to(self, *args, **kw):
        device = next((a for a in args if isinstance(a, (str, torch.device))), kw.get("device"))
        if device is not None and torch.device(device).type == "mps":
            if self.dtype == torch.float64:
                raise TypeError("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support "
                                "float64. Please use float32 instead.")
            args = tuple(CPU if a is device else a for a in args)
            kw = {**kw, "device": CPU} if "device" in kw else kw
        return to(self, *args, **kw)
    monkeypatch.setattr(torch.Tensor, "to", fake_to)
    monkeypatch.setattr(torch, "autocast", torch_2_4_autocast)


def test_fine_tuning_and_prediction_run_on_mps_sts_b_scores_included(monkeypatch):
    on_fake_mps(monkeypatch)
    torch.manual_seed(0)
    encoder = cram.CrammedBERT(cram.Config(n_layer=1, n_embd=32, n_head=2, ffn_hidden=64), 30, 16)
    model = finetune_glue.GlueModel(encoder, 32, 1, 16, 0.1, "cls", 3, False)  # one output: STS-B's regression
    ids = [[2, 5 + i % 7, 6, 3] for i in range(6)]
    scores = np.array([0.5, 1.25, 2.0, 3.5, 4.0, 4.75])  # float64, as read_tsv and the hub give them
    args = types.SimpleNamespace(epochs=1, batch_size=3, lr=1e-3, beta1=0.9, beta2=0.98, adam_eps=1e-6,
                                 weight_decay=0.0, warmup=0.1, pad_id=0, eval_batch_size=4)
    (loss,) = finetune_glue.finetune([model], ids, scores, args, [0], MPS, "stsb")
    preds = finetune_glue.decide(finetune_glue.predict(model, ids, args, MPS))
    assert np.isfinite(loss) and preds.shape == (6,) and np.isfinite(preds).all()


def test_bench_waits_for_apple_s_gpu_before_reading_the_clock(monkeypatch):
    waits = []
    monkeypatch.setattr(torch.mps, "synchronize", lambda: waits.append("mps"))
    bench.timed(lambda: None, 1, 2, MPS)
    assert waits == ["mps", "mps"]  # after the warm-up, after the timed calls: MPS runs queued work later


@pytest.mark.parametrize("platform, maxrss, gib", [("linux", 3 * 2**20, 3.0), ("darwin", 3 * 2**30, 3.0)])
def test_bench_reads_peak_memory_in_each_platform_s_unit_and_says_none_without_resource(platform, maxrss, gib,
                                                                                       monkeypatch):
    fake = types.SimpleNamespace(RUSAGE_SELF=0, getrusage=lambda who: types.SimpleNamespace(ru_maxrss=maxrss))
    monkeypatch.setitem(sys.modules, "resource", fake)
    monkeypatch.setattr(sys, "platform", platform)  # ru_maxrss: KiB on Linux, bytes on macOS
    assert bench.max_rss_gib() == gib
    monkeypatch.setitem(sys.modules, "resource", None)  # Windows
    assert bench.max_rss_gib() is None


# ---------------------------------------------------------------------------------------------- Windows: signals

def test_ctrl_break_on_windows_stops_a_run_as_ctrl_c_does_with_a_checkpoint(tmp_path):
    data = write_data(tmp_path / "data")
    runner = (f"import signal, sys\nsignal.SIGBREAK = signal.SIGUSR1  # Windows' Ctrl+Break, here a spare signal\n"
              f"sys.path.insert(0, {str(ROOT)!r})\nimport cram\ncram.main(sys.argv[1:])\n")
    proc = subprocess.Popen([sys.executable, "-c", runner, "--data_dir", str(data), "--out_dir", str(tmp_path / "out"),
                             "--max_steps", "100000", *TINY_FLAGS], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            encoding="utf-8", cwd=ROOT)
    for line in proc.stdout:
        if line.startswith("step      3"):
            proc.send_signal(signal.SIGUSR1)
            break
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert "stopped by SIGUSR1" in out and (tmp_path / "out" / "ckpt.pt").exists()


def test_a_run_started_from_another_thread_trains_without_signal_handlers(tmp_path):
    """An app's worker thread: only a main thread may set signal handlers (ValueError in any other)."""
    data, errors = write_data(tmp_path / "data"), []

    def train():
        try:
            cram.main(["--data_dir", str(data), "--out_dir", str(tmp_path / "out"), "--max_steps", "2", *TINY_FLAGS])
        except BaseException as e:  # SystemExit too: cram.main exits in one line on an error
            errors.append(e)
    worker = threading.Thread(target=train)
    worker.start()
    worker.join(timeout=120)
    assert not errors and (tmp_path / "out" / "ckpt.pt").exists()


# ---------------------------------------------------------------------------------------------- Windows: cp1252

@pytest.fixture(scope="module")
def cp1252(tmp_path_factory):
    """A folder holding the en_US.CP1252 locale, made by glibc's localedef; the tests skip where it cannot be made."""
    if not shutil.which("localedef"):
        pytest.skip("no localedef (glibc's locale compiler) to make a cp1252 locale")
    folder = tmp_path_factory.mktemp("locales")
    subprocess.run(["localedef", "-i", "en_US", "-f", "CP1252", str(folder / "en_US.CP1252")], capture_output=True,
                   timeout=120)  # exit 1 with a warning is common; the folder it writes is what counts
    if not (folder / "en_US.CP1252").is_dir():
        pytest.skip("localedef could not make en_US.CP1252 (no en_US source or CP1252 charmap here)")
    return folder


def as_on_windows(locales, code):
    """Run Python code as a Windows laptop runs a script whose output is redirected to a file: open(), read_text and
    write_text default to cp1252, stdout is cp1252 and strict, stderr cp1252 with backslash escapes. File names and
    arguments stay Unicode, as Windows' wide-character calls keep them (a cp1252 LC_ALL from the start would make them
    cp1252 on Linux, which Windows never does), so LC_CTYPE turns cp1252 only once Python has started."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "PYTHONUTF8", "LANG", "LC_CTYPE")}
    env.update(LOCPATH=str(locales), LC_ALL="C.UTF-8", PYTHONUTF8="0")
    prelude = ("import locale, sys\nlocale.setlocale(locale.LC_ALL, 'en_US.CP1252')\n"
               "assert locale.getpreferredencoding(False) == 'CP1252' and sys.getfilesystemencoding() == 'utf-8'\n"
               "sys.stdout.reconfigure(encoding='cp1252', errors='strict')\n"
               "sys.stderr.reconfigure(encoding='cp1252', errors='backslashreplace')\n"
               f"sys.path.insert(0, {str(ROOT)!r})\n")
    p = subprocess.run([sys.executable, "-c", prelude + code], env=env, cwd=ROOT, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode("cp1252", "replace")[-3000:]
    return p


def test_the_windows_simulation_really_defaults_to_cp1252(cp1252, tmp_path):
    p = as_on_windows(cp1252, f"from pathlib import Path\nPath({str(tmp_path / 'x.txt')!r}).write_text('\u00fc')\n"
                              "print('\u00fc')\n")
    assert (tmp_path / "x.txt").read_bytes() == b"\xfc" and p.stdout.strip() == b"\xfc"  # cp1252's ü, not UTF-8's


def test_a_run_in_folders_named_with_letters_cp1252_lacks_trains_and_logs_the_utf8_bytes(cp1252, tmp_path):
    data, out = write_data(tmp_path / "données_Ω"), tmp_path / "运行_ü"
    argv = ["--data_dir", str(data), "--out_dir", str(out), "--max_steps", "2", *TINY_FLAGS]
    p = as_on_windows(cp1252, f"import cram\ncram.main({argv!r})\n")
    log = (out / "log.txt").read_bytes()
    assert f"\ndata: {data} | ".encode("utf-8") in log  # the bytes a UTF-8 machine writes
    assert log.decode("utf-8").count("\nstep ") == 2
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()] == \
        [1, 1, 2, 2]  # a step, the evaluation at half the budget, a step, the final evaluation
    assert b"donn\xe9es_\\u03a9" in p.stdout  # the console got é in cp1252 and an escape for the Omega: no crash


WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "good", "bad", "ω", "日"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A random 1 x 32 model in cram.py's checkpoint layout, its WordPiece vocabulary with words cp1252 lacks."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    folder = tmp_path_factory.mktemp("ckpt")
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = normalizers.Lowercase(), pre_tokenizers.BertPreTokenizer()
    tok.save(str(folder / "tokenizer.json"))
    meta = {"version": 1, "tokenizer": "wordpiece", "tokenizer_file": "tokenizer.json", "vocab_size": len(vocab),
            "special_ids": {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}, "seq_len": 32,
            "num_sequences": {"train": 1, "val": 1}}
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    cfg = cram.Config(n_layer=1, n_embd=32, n_head=2, ffn_hidden=64)
    torch.manual_seed(0)
    torch.save({"model": cram.CrammedBERT(cfg, len(vocab), 32).state_dict(), "config": dataclasses.asdict(cfg),
                "vocab_size": len(vocab), "seq_len": 32, "meta": meta, "step": 0}, folder / "ckpt.pt")
    return folder / "ckpt.pt"


def test_fill_mask_prints_a_sentence_and_tokens_cp1252_lacks_to_a_redirected_file(cp1252, ckpt):
    argv = [str(ckpt), "Ω ran on the [MASK] .", "--top_k", str(5 + len(WORDS)), "--device", "cpu"]  # all: ω, 日 too
    p = as_on_windows(cp1252, f"import fill_mask\nfill_mask.main({argv!r})\n")
    assert b"\\u03a9 ran on the [MASK] ." in p.stdout and b"\\u03c9 " in p.stdout and b"\\u65e5 " in p.stdout


def test_glue_tables_name_a_checkpoint_folder_cp1252_lacks_in_utf8(cp1252, ckpt, tmp_path):
    folder = tmp_path / "模型_Ω"
    shutil.copytree(ckpt.parent, folder)
    for name, n in (("train.tsv", 8), ("dev.tsv", 4)):
        (tmp_path / "glue" / "RTE").mkdir(parents=True, exist_ok=True)
        rows = [f"{i}\tthe cat sat\tthe dog ran\t{['entailment', 'not_entailment'][i % 2]}\n" for i in range(n)]
        (tmp_path / "glue" / "RTE" / name).write_text("index\tsentence1\tsentence2\tlabel\n" + "".join(rows),
                                                      encoding="utf-8")
    argv = [str(folder / "ckpt.pt"), "--glue_dir", str(tmp_path / "glue"), "--tasks", "rte", "--epochs", "1",
            "--seeds", "1", "--max_len", "32", "--device", "cpu"]
    p = as_on_windows(cp1252, f"import finetune_glue\nfinetune_glue.main({argv!r})\n")
    assert f"| {folder / 'ckpt.pt'} |".encode("utf-8") in (folder / "glue.md").read_bytes()
    assert json.loads((folder / "glue.json").read_text(encoding="utf-8"))["checkpoint"] == str(folder / "ckpt.pt")
    assert b"\\u03a9" in p.stdout


@pytest.mark.parametrize("value", ["1", "true", "ON", "yes", "0", "false", "off", "no", ""])
def test_hf_hub_offline_is_read_as_huggingface_hub_reads_it(value, monkeypatch):
    """HF_HUB_OFFLINE=false is online for the hub client: a quick check that the hub answers must not be skipped."""
    constants = pytest.importorskip("huggingface_hub.constants")
    import errors
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert errors.hub_offline() == (value.upper() in constants.ENV_VARS_TRUE_VALUES)
    assert errors.hub_offline() == (value in ("1", "true", "ON", "yes"))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", value)  # the hub client's older name, read when the first is unset
    assert errors.hub_offline() == (value in ("1", "true", "ON", "yes"))
