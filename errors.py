"""How the scripts report a problem the user can fix (a bad flag, a missing or damaged file): in one line.

CramError is raised where the problem is found; each script's main() catches it, prints `cram.py: error: ...` and
exits 1. die() stops at once the same way. They live in this small module so that a module which needs only them
(tasks.py, tokenizer.py) does not import the model's code.
"""
import sys
from pathlib import Path


class CramError(Exception):
    """A user-facing problem: main() prints its one-line message and exits 1."""


def die(msg):
    """Stop at once with one line named after the script (prepare.py; cram.py or finetune_glue.py reading a set)."""
    raise SystemExit(f"{Path(sys.argv[0]).name}: error: {msg}")


def is_file_name(name):
    """A name read from a file (meta.json's tokenizer_file, a checkpoint's meta) must be a bare file name: joined to
    a folder it stays in that folder ("../../x", "/etc/x", "C:x" would reach another). Refuse it otherwise."""
    return isinstance(name, str) and name not in ("", ".", "..") and not any(c in name for c in "/\\:\0")
