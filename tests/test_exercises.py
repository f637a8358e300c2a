"""exercises.py as a specification: the reference cram.py passes every check, and each check catches a typical
wrong version of its idea with a message that says what differs."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import exercises  # noqa: E402

# exercise -> (a line of cram.py, a plausible student mistake in its place, words the failure message must contain)
MISTAKES = {
    "masking": ("n_mask, n_rand = round(0.8 * k), round(0.1 * k)", "n_mask, n_rand = k, 0", "80% of the masked"),
    "lr_schedule": ("min(0.25 + t, 4.0 * (1.0 - t))", "min(0.25 + t, 1.0)", "lr_at(0.8, 1e-3) should be 0.0008"),
    "batch_ramp": ("max(t, 0.0) / ramp_until", "max(t, 0.0)", "batch_size_at(0.6"),
    "positions": ("torch.pow(10000.0,", "torch.pow(1000.0,", "sinusoidal_table vs sin"),
    "glu": ("x, gate = self.up(x).chunk(2, dim=-1)", "gate, x = self.up(x).chunk(2, dim=-1)", "first_half * GELU"),
    "sparse_head": ("x = x.gather(1, positions[..., None].expand(-1, -1, x.shape[-1]))",
                    "x = x[:, : positions.shape[1]]", "dense logits at the masked positions"),
    "prenorm": ("x = x + self.drop(self.attn(self.norm1(x), attn_mask))",
                "x = self.norm1(x + self.drop(self.attn(x, attn_mask)))", "pre-LN block must return x unchanged"),
    "narrow": ("kv = self.norm1(x if context is None else context)", "kv = x if context is None else context",
               "narrow blocks run by hand"),
    "attention": ("attn_mask=attn_mask,\n", "attn_mask=None,\n", "with padding mask"),
    "local_bias": ("slopes = cfg.local_bias / 2.0 ** torch.arange(cfg.n_head)",
                   "slopes = cfg.local_bias * torch.ones(cfg.n_head)", "attn_bias vs -local_bias / 2^h"),
}


# slips that once passed every check (the checks now cover the path pretraining uses, not only fine-tuning's)
MORE_MISTAKES = [
    ("attention", "dropout_p=self.dropout if self.training else 0.0)",
     "dropout_p=self.dropout if self.training else 0.0, is_causal=attn_mask is None)", "no causal mask"),
    ("local_bias", "if self.attn_bias is not None:", "if self.attn_bias is not None and pad_mask is not None:",
     "(the bias in both)"),
    ("masking", "scores = torch.rand(B, T, generator=generator, device=ids.device)",
     "scores = torch.rand(1, T, generator=generator, device=ids.device).expand(B, T)", "its own random positions"),
]


@pytest.mark.parametrize("name, right, wrong, words", MORE_MISTAKES)
def test_slips_in_the_pretraining_path_are_caught_too(name, right, wrong, words, tmp_path, capsys):
    source = (ROOT / "cram.py").read_text()
    assert source.count(right) == 1, f"the line {right!r} is no longer in cram.py: update MORE_MISTAKES"
    (tmp_path / "my_cram.py").write_text(source.replace(right, wrong))
    assert exercises.main([name, "--file", str(tmp_path / "my_cram.py")]) == 1
    out = capsys.readouterr().out
    assert f"FAIL  {name}:" in out and words in out, out


def student_copy(tmp_path, name):
    """cram.py with the mistake of exercise `name` planted, as a student's my_cram.py."""
    right, wrong, _ = MISTAKES[name]
    source = (ROOT / "cram.py").read_text()
    assert source.count(right) == 1, f"the line {right!r} is no longer in cram.py: update MISTAKES"
    path = tmp_path / "my_cram.py"
    path.write_text(source.replace(right, wrong))
    return path


def test_there_are_at_least_five_exercises_each_with_an_assignment():
    assert len(exercises.EXERCISES) >= 5
    assert set(MISTAKES) == set(exercises.EXERCISES), "every exercise needs a planted mistake in this test"
    for fn in exercises.EXERCISES.values():
        assert len(fn.__doc__.strip().splitlines()) >= 3, f"{fn.__name__} needs a title and an assignment"


def test_the_reference_cram_py_passes_every_exercise(capsys):
    assert exercises.main(["all", "--file", str(ROOT / "cram.py")]) == 0
    assert "10 of 10 passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_each_check_catches_a_typical_mistake_and_says_what_differs(name, tmp_path, capsys):
    assert exercises.main([name, "--file", str(student_copy(tmp_path, name))]) == 1
    out = capsys.readouterr().out
    assert f"FAIL  {name}:" in out and MISTAKES[name][2] in out, out


def test_a_mistake_in_one_idea_does_not_fail_the_others(tmp_path, capsys):
    exercises.main(["all", "--file", str(student_copy(tmp_path, "glu"))])
    out = capsys.readouterr().out
    assert "FAIL  glu" in out and "9 of 10 passed" in out


def test_a_crash_in_the_student_code_is_a_failure_with_its_reason(tmp_path, capsys):
    path = tmp_path / "my_cram.py"
    path.write_text((ROOT / "cram.py").read_text().replace(
        '"""Paper\'s one-cycle on budget fraction t: 0.25*peak at t=0, peak at t=0.75, 0 at t=1."""',
        'raise NotImplementedError("write me")'))
    assert exercises.main(["lr_schedule", "--file", str(path)]) == 1
    assert "FAIL  lr_schedule: your code raised NotImplementedError: write me" in capsys.readouterr().out


def test_unknown_exercise_and_missing_file_are_one_line_errors(tmp_path):
    with pytest.raises(SystemExit, match="unknown exercise 'maskin'; choose one of masking"):
        exercises.main(["maskin"])
    with pytest.raises(SystemExit, match="no file .*nope.py"):
        exercises.main(["masking", "--file", str(tmp_path / "nope.py")])
