"""How the scripts report a problem the user can fix (a bad flag, a missing or damaged file): in one line.

CramError is raised where the problem is found; each script's main() catches it, prints `cram.py: error: ...` and
exits 1. die() stops at once the same way. They live in this small module so that a module which needs only them
(tasks.py, tokenizer.py) does not import the model's code.
"""
import contextlib
import errno
import os
import re
import sys
import textwrap
from pathlib import Path


# The most a file may declare, checked before anything is built from it: past these a crafted file would take
# minutes and gigabytes (a block: ~34 KB and 0.5 ms of Python; a row's position tables and attention bias: ~28 T^2
# bytes with the local bias). A model or a data set of this code stays far below them.
MOST_BLOCKS, LONGEST_ROW = 1024, 8192


class CramError(Exception):
    """A user-facing problem: main() prints its one-line message and exits 1."""


def die(msg):
    """Stop at once with one line named after the script (prepare.py; cram.py or finetune_glue.py reading a set)."""
    raise SystemExit(f"{Path(sys.argv[0]).name}: error: {msg}")


def hub_offline():
    """HF_HUB_OFFLINE (else TRANSFORMERS_OFFLINE) as huggingface_hub reads it (1, ON, YES or TRUE, any case): a hub
    call then fails at once, or finds a copy downloaded before, so the callers skip their own quick check that the
    hub answers (which fails in seconds, not after its retries)."""
    flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return flag.upper() in ("1", "ON", "YES", "TRUE")


@contextlib.contextmanager
def written_whole(path, mode="wb", encoding=None, newline=None):
    """`with written_whole(path) as f:` writes path's twin path.tmp, then renames it over path: a full disk, a crash
    or Ctrl-C leave the old file as it was, and a failed write takes its twin away. torch.save's RuntimeError over a
    failed write (a full disk) is raised as the OSError under it, which the scripts print in one line. The twin is
    made new (O_EXCL): a link at its name, planted in a shared folder, is replaced, never followed."""
    tmp = f"{path}.tmp"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)  # a crash's leftover, or a link
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        with open(fd, mode, encoding=encoding, newline=newline) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        under = e.__context__ if isinstance(e, RuntimeError) and isinstance(e.__context__, OSError) else e
        if isinstance(under, OSError) and under.errno and not under.filename:  # torch's write: say which file
            raise OSError(under.errno, under.strerror, str(path)) from None
        if under is not e:
            raise under from None
        raise


def appended(path):
    """A log open to append lines, line-buffered (on disk at once). Not through a link: a folder from someone else
    could hold log.txt -> ~/.bashrc, and lines from its checkpoint would be appended there."""
    no_link(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    return open(os.open(path, flags, 0o666), "a", buffering=1, encoding="utf-8")  # a link made since: refused too


def no_link(path):
    """path, refused if it is a link: a file or folder we write into, in a folder from someone else, could be a link
    planted to send what we write elsewhere (log.txt -> ~/.bashrc, predictions -> a folder of yours)."""
    if os.path.islink(path):
        raise CramError(f"{path} is a link to {os.path.realpath(path)}: remove the link, or use another folder")
    return path


def plain_numbers(record, nan_ok=(), **kinds):
    """record[key] for each of kinds' keys, each a number of its kind (an int; a float: an int counts; never a bool)
    in [0, 2**53), or NaN for a key in nan_ok (not measured yet). A text, a list, 10**30 rows or an endless clock
    there is a damaged or crafted file: ValueError."""
    values = []
    for key, kind in kinds.items():
        value = record[key]
        if isinstance(value, bool) or not isinstance(value, (int, kind)) or not (
                0 <= value < 2**53 or (key in nan_ok and value != value)):
            raise ValueError(f"{key} is {value!r:.40}, not a number ({kind.__name__}) in [0, 2**53)")
        values.append(kind(value))
    return values


def same_kinds(record):
    """record, a dataclass read from a file, if each field holds a value of the kind its default holds (a float field
    takes an int; a number is never a bool), else ValueError: 4.0 heads or a text norm_eps would fail later, or
    compute something else."""
    for name, default in vars(type(record)()).items():
        value, kind = getattr(record, name), type(default)
        if isinstance(value, bool) != (kind is bool) or not isinstance(value, (int, float) if kind is float else kind):
            raise ValueError(f"its {name} is {value!r:.40} ({type(value).__name__}), not {kind.__name__}")
    return record


def text_of(path):
    """A file's text (UTF-8, a byte-order mark dropped), if it is a plain file: a link planted in a folder from someone
    else to /dev/zero, or a FIFO, would read forever. Else FileNotFoundError: the callers say a file is missing."""
    if not os.path.isfile(path):
        raise FileNotFoundError(errno.ENOENT, "not a plain file", str(path))
    with open(path, encoding="utf-8-sig") as f:
        return f.read()


def check_writable(path, flag):
    """Refuse, before any work, an output path whose folder cannot be written: the nearest folder of it that exists
    must be a folder, and take a file (tried, then removed)."""
    folder = Path(path).resolve().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise CramError(f"{flag} {path}: {folder} is a file, not a folder: name a path in a folder")
    probe = folder / f".write-test-{os.getpid()}"
    try:
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as e:
        why = f"{flag} {path}: cannot write in {folder} ({e.strerror})"
        raise CramError(f"{why}: name a folder you can write") from None


def is_file_name(name):
    """A name read from a file (meta.json's tokenizer_file, a checkpoint's meta) must be a bare file name: joined to
    a folder it stays in that folder ("../../x", "/etc/x", "C:x" would reach another). Refuse it otherwise."""
    return isinstance(name, str) and name not in ("", ".", "..") and not any(c in name for c in "/\\:\0")


def not_readable(path, e, what="a cram.py checkpoint", fix="train in a new --out_dir"):
    """A saved file that will not load, in one line. Whole, but load_state_dict refuses its weights: the model's code
    was edited since it was saved (a tweak to cram.py), so say which weight differs. Else: cut short, or not ours."""
    lines = str(e).splitlines() or [""]
    weights = lines[0].startswith("Error(s) in loading state_dict") and len(lines) > 1  # torch's wording, a line each
    if weights or lines[0].startswith("loaded state dict") and "parameter group" in lines[0]:  # the optimizer's groups
        first = (lines[1] if weights else lines[0]).strip()
        first = re.sub(r"copying a param with shape torch.Size\((.*?)\) from checkpoint, the shape in current model is "
                       r"torch.Size\((.*?)\)\.?", r"\1 in the file, \2 in this code", first)
        return CramError(f"{path} holds weights that this code does not build ({textwrap.shorten(first, 160)}): the "
                         "model's code changed since it was saved (or the file was edited): run it with the code that "
                         f"saved it (a run's log.txt names its git commit), or {fix}")
    return CramError(f"{path} is damaged or not {what} ({type(e).__name__}: "
                     f"{' '.join(str(e).split('. ')[0].split())[:150]}): check the path, or {fix}")
