"""exercises.py as a specification: the reference cram.py passes every check, and each check catches a typical
wrong version of its idea with a message that says what differs."""
import ast
import re
import subprocess
import sys
import textwrap
import types
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
    "glu": ("x, gate = [F.linear(x, w) for w in self.up.weight.chunk(2)]",
            "gate, x = [F.linear(x, w) for w in self.up.weight.chunk(2)]", "first_half * GELU"),
    "sparse_head": ("h = self.encode(ids, positions=positions)", "h = self.encode(ids)[:, : positions.shape[1]]",
                    "dense logits at the masked positions"),
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
    # encode's rows at the masked positions are local_bias's to write (sparse_head's check runs the reference's)
    ("local_bias", "x = x.gather(1, positions[..., None].expand(-1, -1, x.shape[-1]))",
     "x = x[:, : positions.shape[1]]", "encode(ids, positions=...) vs the same rows of encode(ids)"),
]


# slips a student trial wrote that passed every check (2026-12-07): values the checks never sampled, a test shape that
# hid them, a GPU's device, eval mode, the backward, the masks and the narrow path (docs/notes.md)
MORE_MISTAKES += [
    ("masking", "scores = torch.rand(B, T, generator=generator, device=ids.device)",
     "scores = torch.rand(B, T, generator=generator)", "on a GPU returns a tensor on the CPU"),
    ("masking", "random_ids = torch.randint(0, vocab_size, (B, n_rand), generator=generator, device=ids.device)",
     "random_ids = (scores[:, :n_rand] * vocab_size).long()", "depend on which positions were picked"),
    ("lr_schedule", "return peak * max(0.0, min(0.25 + t, 4.0 * (1.0 - t)))",
     "return peak * (0.25 + t if t < 0.8 else max(0.0, 4.0 * (1.0 - t)))", "at every hundredth of t"),
    ("batch_ramp", "frac = min(max(t, 0.0) / ramp_until, 1.0) if ramp_until > 0 else 1.0",
     "frac = min(max(t, 0.0) / 0.6, 1.0) if ramp_until > 0 else 1.0", "ramp_until=0.3) should be"),
    ("positions", 'self.register_buffer("pos_table", sinusoidal_table(seq_len, cfg.n_embd), persistent=False)',
     "self.pos_table = sinusoidal_table(seq_len, cfg.n_embd)", "Embeddings on a GPU fails"),
    ("positions", "self.norm = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)\n        self.drop = nn.Dropout(cfg.dropout)"
                  "\n\n    def forward(self, ids):",
     "self.norm = nn.LayerNorm(cfg.n_embd)\n        self.drop = nn.Dropout(cfg.dropout)\n\n    def forward(self, ids):",
     "not nn.LayerNorm's default 1e-5"),
    ("positions", "return self.drop(self.norm(x))", "return F.dropout(self.norm(x), self.drop.p)", "in eval mode"),
    ("glu", "self.down = nn.Linear(cfg.ffn_hidden // 2, cfg.n_embd, bias=False)",
     "self.down = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)", "ffn_hidden / 2 -> d"),
    ("sparse_head", "logits = h @ self.embed.tok.weight.T", "logits = h @ self.embed.tok.weight.detach().T",
     "the gradient of the loss for embed.tok.weight"),
    ("prenorm", "x = x + self.drop(self.attn(self.norm1(x), attn_mask))\n        return",
     "x = x + self.drop(self.attn(self.norm1(x)))\n        return", "hand attn_mask on to self.attn"),
    ("attention", "return self.out(y.transpose(1, 2).flatten(2))",
     "return self.out(y.reshape(y.shape[0], y.shape[2], -1))", "merge the heads back with transpose(1, 2)"),
    ("local_bias", 'self.register_buffer("attn_bias", bias, persistent=False)', "self.attn_bias = bias",
     "attn_bias stays on the CPU"),
    ("local_bias", "if isinstance(m, (nn.Linear, nn.Embedding)):\n                nn.init.normal_(m.weight, mean=0.0, std=0.02)",
     "if isinstance(m, (nn.Linear, nn.Embedding, Embeddings)):\n"
     "                [nn.init.normal_(w, mean=0.0, std=0.02) for n, w in m.named_parameters(recurse=False)]",
     "embed.pos_scale keeps the start"),
    ("batch_ramp", "return max(1, round((unit + frac * (target - unit)) / unit)) * unit",
     "return np.int64(max(1, round((unit + frac * (target - unit)) / unit)) * unit)", "int(...) a NumPy number"),
    ("local_bias", "attn_mask = None if pad_mask is None else pad_mask[:, None, None, :]",
     "attn_mask = None if pad_mask is None or self.attn_bias is None else pad_mask[:, None, None, :]",
     "with local_bias 0 (attn_bias None), padded keys must be ignored too"),
    ("local_bias", "for block in self.blocks[:self.wide]:", "for block in self.blocks:",
     "narrow_blocks gets x after the wide blocks only"),
    ("local_bias", "bias = self.attn_bias[None, :, :ids.shape[1], :ids.shape[1]]", "bias = self.attn_bias[None]",
     "failed (The size of tensor"),
    ("narrow", "x = x + self.drop(self.attn.attend(q, key, value, attn_mask))",
     "x = x + self.attn.attend(q, key, value, attn_mask)", "NarrowBlock's attention output goes through self.drop"),
    ("narrow", "x = x + self.drop(self.attn.attend(q, key, value, attn_mask))\n        return x + self.drop(self.ffn(self.norm2(x)))",
     "x = x + self.drop(self.attn.attend(q, key, value, attn_mask))\n        return x + self.drop(self.ffn(self.norm1(x)))",
     "the narrow blocks run by hand"),
]


@pytest.mark.parametrize("name, right, wrong, words", MORE_MISTAKES)
def test_slips_in_the_pretraining_path_are_caught_too(name, right, wrong, words, tmp_path, capsys):
    source = (ROOT / "cram.py").read_text(encoding="utf-8")
    assert source.count(right) == 1, f"the line {right!r} is no longer in cram.py: update MORE_MISTAKES"
    (tmp_path / "my_cram.py").write_text(source.replace(right, wrong), encoding="utf-8")
    assert exercises.main([name, "--file", str(tmp_path / "my_cram.py")]) == 1
    out = capsys.readouterr().out
    assert f"FAIL  {name}:" in out and words in out, out


def student_copy(tmp_path, name):
    """cram.py with the mistake of exercise `name` planted, as a student's my_cram.py."""
    right, wrong, _ = MISTAKES[name]
    source = (ROOT / "cram.py").read_text(encoding="utf-8")
    assert source.count(right) == 1, f"the line {right!r} is no longer in cram.py: update MISTAKES"
    path = tmp_path / "my_cram.py"
    path.write_text(source.replace(right, wrong), encoding="utf-8")
    return path


def test_there_are_at_least_five_exercises_each_with_an_assignment():
    assert len(exercises.EXERCISES) >= 5
    assert set(MISTAKES) == set(exercises.EXERCISES), "every exercise needs a planted mistake in this test"
    for name, ex in exercises.EXERCISES.items():
        assert ex.title and ex.paper and ex.minutes > 0 and ex.write, f"{name} needs a title, paper, minutes, code"
        assert len(ex.text.strip().splitlines()) >= 2, f"{name} needs an assignment"


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
    path.write_text((ROOT / "cram.py").read_text(encoding="utf-8").replace(
        '"""Paper\'s one-cycle on budget fraction t: 0.25*peak at t=0, peak at t=0.75, 0 at t=1."""',
        'raise NotImplementedError("write me")'), encoding="utf-8")
    assert exercises.main(["lr_schedule", "--file", str(path)]) == 1
    line = path.read_text(encoding="utf-8").splitlines().index('    raise NotImplementedError("write me")') + 1
    assert f"FAIL  lr_schedule: {path} line {line} in lr_at: NotImplementedError: write me" in capsys.readouterr().out


def test_unknown_exercise_and_missing_file_are_one_line_errors(tmp_path):
    with pytest.raises(SystemExit, match="unknown exercise 'maskin'; choose one of masking"):
        exercises.main(["maskin"])
    with pytest.raises(SystemExit, match="no file .*nope.py"):
        exercises.main(["masking", "--file", str(tmp_path / "nope.py")])
    with pytest.raises(SystemExit, match="'#' reached the script: your shell passed the comment on to it"):  # zsh, cmd
        exercises.main(["show", "masking", "#", "the", "assignment"])


# ---------------------------------------------------------------------------------------------------------------
# The classroom kit: show, stub, a student's file and line; slips named; right answers written differently pass.

def definition(tree, name):
    """The def or class `name` ("f", "Class", "Class.method") in a parsed module."""
    for part in name.split("."):
        tree = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part)
    return tree


def replaced(source, name, code):
    """`source` with the def or class `name` replaced by `code` (written at column 0): found by name, not by line,
    so the tests keep working while cram.py is rearranged."""
    node = definition(ast.parse(source), name)
    lines = source.splitlines(keepends=True)
    lines[node.lineno - 1:node.end_lineno] = [textwrap.indent(textwrap.dedent(code).strip("\n") + "\n",
                                                              " " * node.col_offset)]
    return "".join(lines)


def student_file(tmp_path, name, code, source=None):
    path = tmp_path / "my_cram.py"
    path.write_text(replaced(source or (ROOT / "cram.py").read_text(encoding="utf-8"), name, code), encoding="utf-8")
    return path


def check(name, path, capsys):
    """(exit code, output) of `python exercises.py check NAME --file PATH`."""
    code = exercises.main(["check", name, "--file", str(path)])
    return code, capsys.readouterr().out


# mask_tokens written plainly, with one piece to choose: the positions, and the random tokens
MASK_TOKENS = """
def mask_tokens(ids, mask_id, vocab_size, rate, generator):
    B, T = ids.shape
    k = round(rate * T)
    n_mask, n_rand = round(0.8 * k), round(0.1 * k)
    positions = torch.rand(B, T, generator=generator, device=ids.device).argsort(dim=1)[:, :k]{sort}
    targets = ids.gather(1, positions)
    random_ids = {random_ids}
    slots = torch.cat([torch.full((B, n_mask), mask_id, device=ids.device), random_ids, targets[:, n_mask + n_rand:]], dim=1)
    inputs = ids.clone()
    inputs.scatter_(1, positions, slots)
    return inputs, positions, targets
"""
ONE_PER_SLOT = "torch.randint(0, vocab_size, (B, n_rand), generator=generator, device=ids.device)"

IN_PLACE = """
def mask_tokens(ids, mask_id, vocab_size, rate, generator):
    B, T = ids.shape
    k = round(rate * T)
    n_mask, n_rand = round(0.8 * k), round(0.1 * k)
    positions = torch.rand(B, T, generator=generator, device=ids.device).topk(k, dim=1).indices
    targets = ids.gather(1, positions)
    ids.scatter_(1, positions[:, :n_mask], mask_id)
    ids.scatter_(1, positions[:, n_mask:n_mask + n_rand], torch.randint(0, vocab_size, (B, n_rand), generator=generator, device=ids.device))
    return ids, positions, targets
"""

# (exercise, what the student writes, their version, words the FAIL must contain): the slip is named
SLIPS = [
    ("masking", "mask_tokens", IN_PLACE, "the caller's ids tensor was changed: work on a copy"),
    ("masking", "mask_tokens", MASK_TOKENS.format(
        sort="", random_ids="torch.randint(0, vocab_size, (1, 1), generator=generator, device=ids.device).expand(B, n_rand)"),
     "the random slots all hold one token: draw one per slot"),
    ("masking", "mask_tokens", MASK_TOKENS.format(
        sort="", random_ids="torch.randint(0, vocab_size, (B, 1), generator=generator, device=ids.device).expand(B, n_rand)"),
     "draw one per slot"),
    ("masking", "mask_tokens", MASK_TOKENS.format(
        sort="", random_ids="torch.randint(0, 5, (B, n_rand), generator=generator, device=ids.device)"),
     "random tokens must come from the whole vocabulary, 0..vocab_size-1"),
    ("masking", "mask_tokens", MASK_TOKENS.format(
        sort="", random_ids="torch.randint(0, T, (B, n_rand), generator=generator, device=ids.device)"),
     "random tokens must come from the whole vocabulary"),
    ("masking", "mask_tokens", MASK_TOKENS.format(  # a teacher's trial, 11-27: the positions' scores reused
        sort="", random_ids="(scores.gather(1, positions[:, n_mask:n_mask + n_rand]) * vocab_size).long()").replace(
        "positions = torch.rand(B, T, generator=generator, device=ids.device)", "scores = torch.rand(B, T, generator=generator, device=ids.device)\n"
        "    positions = scores"), "not evenly: 0% in its upper half; use a fresh torch.randint(0, vocab_size, ...)"),
    ("masking", "mask_tokens", MASK_TOKENS.format(  # a learner's trial, 11-25: randint's high read as inclusive
        sort="", random_ids="torch.randint(0, vocab_size - 1, (B, n_rand), generator=generator, device=ids.device)"),
     "never drew id 7 of a vocabulary of 8"),
    ("masking", "mask_tokens", MASK_TOKENS.format(sort=".sort(dim=1).values", random_ids=ONE_PER_SLOT),
     "must not depend on where it is in the sequence"),
    ("masking", "mask_tokens", MASK_TOKENS.format(sort="", random_ids=ONE_PER_SLOT).replace(
        ", generator=generator, device=ids.device)", ")"), "use only the generator you are given"),
    ("masking", "mask_tokens", MASK_TOKENS.format(sort="", random_ids=ONE_PER_SLOT).replace(
        "    B, T = ids.shape", "    B, T = ids.shape\n    generator = torch.Generator().manual_seed(0)"),
     "don't seed one of your own"),
    ("masking", "mask_tokens", MASK_TOKENS.format(sort="", random_ids=ONE_PER_SLOT).replace(
        "k = round(rate * T)", "k = 32"), "k = round(rate * T)"),
    ("lr_schedule", "lr_at", "def lr_at(t, peak):\n    return max(0.0, min(0.25 + t, 4.0 * (1.0 - t)))\n",
     "not the learning rate: multiply by peak"),
    ("lr_schedule", "lr_at", "def lr_at(t, peak):\n    return torch.clamp(peak * torch.minimum(torch.tensor(0.25 + t), "
     "torch.tensor(4.0 * (1.0 - t))), min=0.0)\n", "lr_at must return a Python number (a tensor or a NumPy float32: "
     "float(...) it); it returned Tensor"),  # a learner's trial, 11-27: it passed, then training's JSON log failed
    ("lr_schedule", "lr_at", "def lr_at(t, peak):\n    return peak * min(0.25 + t, 4.0 * (1.0 - t))\n",
     "past the end: it stays 0"),
    ("batch_ramp", "batch_size_at", """
def batch_size_at(t, unit, target, ramp_until=0.6):
    frac = min(t / ramp_until, 1.0) if ramp_until > 0 else 1.0
    return unit + frac * (target - unit)
""", "must return an int"),
    ("batch_ramp", "batch_size_at", """
def batch_size_at(t, unit, target, ramp_until=0.6):
    frac = min(t / ramp_until, 1.0)
    return round((unit + frac * (target - unit)) / unit) * unit
""", "divided by zero: ramp_until 0 means no ramp"),
    ("batch_ramp", "batch_size_at", """
def batch_size_at(t, unit, target, ramp_until=0.6):
    if t >= ramp_until:
        return target
    return (1 + int(t / ramp_until * (target - unit) / unit)) * unit
""", "rounded to the nearest; got 384: rounded down"),
    ("batch_ramp", "batch_size_at", """
def batch_size_at(t, unit, target, ramp_until=0.6):
    frac = 1.0 if ramp_until == 0 else min(1.0, max(0.0, t) / ramp_until)
    return unit * math.ceil(1 + frac * (target // unit - 1) - 1e-9)
""", "should be 64: 2.05 micro-batches, rounded to the nearest; got 96"),
    ("positions", "sinusoidal_table", """
def sinusoidal_table(T, C):
    angle = torch.arange(T)[:, None] / 10000 ** (torch.arange(0, C, 2) / C)
    return torch.stack([angle.cos(), angle.sin()], -1).view(T, C)
""", "sin and cos are swapped"),
    ("positions", "sinusoidal_table", """
def sinusoidal_table(T, C):
    angle = torch.arange(T)[:, None] / 10000 ** (torch.arange(0, C, 2) / C)
    return torch.cat([angle.sin(), angle.cos()], -1)
""", "not a first half of sin and a second of cos"),
    ("positions", "sinusoidal_table", """
def sinusoidal_table(T, C):
    angle = torch.arange(T)[:, None] / 10000 ** (torch.arange(C // 2) / C)
    return torch.stack([angle.sin(), angle.cos()], -1).view(T, C)
""", "share the frequency 10000^(-2i/C)"),
    ("positions", "Embeddings.__init__", """
def __init__(self, cfg, vocab_size, seq_len):
    super().__init__()
    self.tok = nn.Embedding(vocab_size, cfg.n_embd)
    self.register_buffer("pos_table", sinusoidal_table(seq_len, cfg.n_embd), persistent=False)
    self.pos_scale = nn.Parameter(torch.tensor(1 / math.sqrt(cfg.n_embd)))
    self.norm = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)
    self.drop = nn.Dropout(cfg.dropout)
""", "cfg.pos_scale_init / sqrt(C)"),
    ("positions", "Embeddings.forward", """
def forward(self, ids):
    return self.drop(self.norm(self.tok(ids)) + self.pos_scale * self.pos_table[: ids.shape[1]])
""", "added before the LayerNorm"),
    ("glu", "GLUFeedForward.forward", """
def forward(self, x):
    x, gate = self.up(x).chunk(2, dim=-1)
    return self.down(F.silu(gate) * x)
""", "not SiLU"),
    ("prenorm", "Block.forward", """
def forward(self, x, attn_mask=None):
    x = x + self.attn(self.norm1(x), attn_mask)
    return x + self.ffn(self.norm1(x))
""", "norm1 feeds the attention, norm2 the feed-forward"),
    ("prenorm", "Block.forward", """
def forward(self, x, attn_mask=None):
    x = self.norm1(x)
    x = x + self.attn(x, attn_mask)
    return x + self.ffn(self.norm2(x))
""", "the residual stream carries x itself"),
    ("prenorm", "Block.forward", """
def forward(self, x, attn_mask=None):
    x = x + self.attn(self.norm1(x), attn_mask)
    return x + self.ffn(self.norm2(x))
""", "each sub-layer's output goes through self.drop before it is added, x + self.drop(self.attn(...))"),
    ("prenorm", "Block.forward", """
def forward(self, x, attn_mask=None):
    x = x + self.drop(self.attn(self.norm1(x), attn_mask))
    return self.drop(x + self.ffn(self.norm2(x)))
""", "x itself is never dropped, only each sub-layer's output goes through self.drop"),
    ("sparse_head", "CrammedBERT.forward", """
def forward(self, ids, positions, targets=None):
    logits = self.encode(ids, positions=positions) @ self.embed.tok.weight.T
    if targets is None:
        return logits
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")
""", "not their sum"),
    ("attention", "Attention.forward", """
def forward(self, x, attn_mask=None, kv=None):
    B, T, C = x.shape
    q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=self.dropout)
    return self.out(y.transpose(1, 2).reshape(B, T, C))
""", "in eval mode nothing is dropped"),
    ("attention", "Attention.forward", """
def forward(self, x, attn_mask=None, kv=None):
    B, T, C = x.shape
    q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=1 / math.sqrt(C))
    return self.out(y.transpose(1, 2).reshape(B, T, C))
""", "by 1/sqrt(d_head)"),
    ("attention", "Attention.forward", """
def forward(self, x, attn_mask=None, kv=None):
    B, T, C = x.shape
    q, k, v = (z.reshape(B, self.n_head, T, C // self.n_head) for z in self.qkv(x).chunk(3, dim=-1))
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    return self.out(y.transpose(1, 2).reshape(B, T, C))
""", "split the heads with view(B, T, H, D).transpose(1, 2)"),
    ("attention", "Attention.forward", """
def forward(self, x, attn_mask=None, kv=None):
    B, T, C = x.shape
    q, k, v = self.qkv(x).view(B, T, self.n_head, 3, C // self.n_head).permute(3, 0, 2, 1, 4)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    return self.out(y.transpose(1, 2).reshape(B, T, C))
""", "qkv's outputs are q, then k, then v (each all heads), not q, k, v per head"),
]


def local_bias_init(make_bias, persistent="False"):
    """CrammedBERT.__init__ with the attn_bias line written by `make_bias`."""
    return f"""
def __init__(self, cfg, vocab_size, seq_len):
    super().__init__()
    self.embed = Embeddings(cfg, vocab_size, seq_len)
    self.wide, self.narrow = cfg.n_layer - cfg.narrow, cfg.narrow
    self.blocks = nn.ModuleList([*(Block(cfg) for _ in range(self.wide)), *(NarrowBlock(cfg) for _ in range(self.narrow))])
    self.final_norm = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)
    bias = None
    if cfg.local_bias > 0:
        i = torch.arange(seq_len)
        {make_bias}
    self.register_buffer("attn_bias", bias, persistent={persistent})
    for m in self.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
"""


RIGHT_BIAS = ("slopes = torch.tensor([cfg.local_bias / 2 ** h for h in range(cfg.n_head - 1)] + [0.0]); "
              "bias = -slopes[:, None, None] * (i[:, None] - i[None, :]).abs()")
SLIPS += [
    ("local_bias", "CrammedBERT.__init__", local_bias_init(RIGHT_BIAS, persistent="True"), "persistent=False"),
    ("local_bias", "CrammedBERT.__init__", local_bias_init(RIGHT_BIAS.replace("bias = -", "bias = ")),
     "the bias is a penalty"),
    ("local_bias", "CrammedBERT.__init__", local_bias_init(RIGHT_BIAS.replace(" - 1)] + [0.0]", ")]")),
     "the last head adds nothing"),
]


@pytest.mark.parametrize("name, what, code, words", SLIPS, ids=[f"{s[0]}-{i}" for i, s in enumerate(SLIPS)])
def test_a_slip_fails_with_a_message_that_names_it(name, what, code, words, tmp_path, capsys):
    code, out = check(name, student_file(tmp_path, what, code), capsys)
    assert code == 1 and f"FAIL  {name}: " in out and words in out, out


# Right answers written differently from the reference: each must PASS.
RIGHT = [
    ("masking", "mask_tokens", """
def mask_tokens(ids, mask_id, vocab_size, rate, generator):
    B, T = ids.shape
    k = round(rate * T)
    n_mask, n_rand = round(0.8 * k), round(0.1 * k)
    positions = torch.stack([torch.randperm(T, generator=generator, device=ids.device)[:k] for _ in range(B)])
    rows = torch.arange(B)[:, None]
    targets = ids[rows, positions]
    inputs = ids.clone()
    inputs[rows, positions[:, :n_mask]] = mask_id
    inputs[rows, positions[:, n_mask:n_mask + n_rand]] = torch.randint(vocab_size, (B, n_rand), generator=generator, device=ids.device)
    return inputs, positions, targets
"""),
    ("masking", "mask_tokens", MASK_TOKENS.format(sort="", random_ids=ONE_PER_SLOT)),
    ("lr_schedule", "lr_at", """
def lr_at(t, peak):
    if t < 0.75:
        return peak * (0.25 + t)
    elif t < 1:
        return peak * 4 * (1 - t)
    else:
        return 0.0
"""),
    ("lr_schedule", "lr_at", """
def lr_at(t, peak):
    return float(np.interp(t, [0.0, 0.75, 1.0], [0.25 * peak, peak, 0.0]))
"""),
    ("batch_ramp", "batch_size_at", """
def batch_size_at(t, unit, target, ramp_until=0.6):
    if t >= ramp_until:
        return target
    return unit * math.floor(1 + t / ramp_until * (target - unit) / unit + 0.5)
"""),
    ("positions", "sinusoidal_table", """
def sinusoidal_table(T, C):
    table = torch.zeros(T, C)
    for p in range(T):
        for i in range(0, C, 2):
            table[p, i], table[p, i + 1] = math.sin(p / 10000 ** (i / C)), math.cos(p / 10000 ** (i / C))
    return table
"""),
    ("positions", "sinusoidal_table", """
def sinusoidal_table(T, C):
    div = torch.exp(torch.arange(0, C, 2).float() * (-math.log(10000.0) / C))
    pos = torch.arange(T).unsqueeze(1).float()
    return torch.stack([torch.sin(pos * div), torch.cos(pos * div)], dim=-1).flatten(1)
"""),
    ("positions", "Embeddings", """
class Embeddings(nn.Module):
    def __init__(self, cfg, vocab_size, seq_len):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, cfg.n_embd)
        self.pos_scale = nn.Parameter(torch.tensor(cfg.pos_scale_init) / cfg.n_embd ** 0.5)
        self.norm = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, ids):
        table = sinusoidal_table(ids.shape[1], self.tok.embedding_dim).to(self.tok.weight.device)
        return self.drop(self.norm(self.tok(ids) + self.pos_scale * table))
"""),
    ("glu", "GLUFeedForward", """
class GLUFeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.up = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)
        self.act = nn.GELU()
        self.down = nn.Linear(cfg.ffn_hidden // 2, cfg.n_embd, bias=False)

    def forward(self, x):
        h = self.up(x)
        half = h.shape[-1] // 2
        return self.down(h[..., :half] * self.act(h[..., half:]))
"""),
    ("glu", "GLUFeedForward.forward", """
def forward(self, x):
    x, gate = self.up(x).split(self.down.in_features, dim=-1)
    return self.down(x * F.gelu(gate, approximate="tanh"))
"""),
    ("sparse_head", "CrammedBERT.forward", """
def forward(self, ids, positions, targets=None):
    logits = F.linear(self.encode(ids, positions=positions), self.embed.tok.weight)
    if targets is not None:
        return F.nll_loss(logits.log_softmax(-1).view(-1, logits.shape[-1]), targets.view(-1))
    return logits
"""),
    ("prenorm", "Block.forward", """
def forward(self, x, attn_mask=None):
    h = self.norm1(x)
    x = x + self.drop(self.attn(h, attn_mask))
    h = self.norm2(x)
    return x + self.drop(self.ffn(h))
"""),
]
MANUAL_ATTENTION = """
def forward(self, x, attn_mask=None, kv=None):
    B, T, C = x.shape
    H = self.n_head
    q = F.linear(x, self.qkv.weight[:C])
    k, v = F.linear(x if kv is None else kv, self.qkv.weight[C:]).chunk(2, dim=-1)
    q, k, v = (z.reshape(B, -1, H, C // H).transpose(1, 2) for z in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(C // H)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        scores = scores + attn_mask
    weights = F.dropout(scores.softmax(-1), self.dropout, self.training)
    return self.out((weights @ v).transpose(1, 2).reshape(B, T, C))
"""
NARROW_BY_PARTS = """
def forward(self, x, attn_mask=None, context=None):
    B, T, C = x.shape
    H, w = self.attn.n_head, self.attn.qkv.weight
    kv = self.norm1(x if context is None else context)
    q = (self.norm1(x) @ w[:C].T).view(B, T, H, C // H).transpose(1, 2)
    k = (kv @ w[C:2 * C].T).view(B, -1, H, C // H).transpose(1, 2)
    v = (kv @ w[2 * C:].T).view(B, -1, H, C // H).transpose(1, 2)
    x = x + self.drop(self.attn.attend(q, k, v, attn_mask))
    return x + self.drop(self.ffn(self.norm2(x)))
"""
RIGHT += [("attention", "Attention.forward", MANUAL_ATTENTION), ("narrow", "NarrowBlock.forward", NARROW_BY_PARTS),
          ("local_bias", "CrammedBERT.__init__", local_bias_init(RIGHT_BIAS)),
          ("local_bias", "CrammedBERT.__init__", local_bias_init(
              "bias = torch.zeros(cfg.n_head, seq_len, seq_len)\n"
              "        for h in range(cfg.n_head - 1):\n"
              "            for q in range(seq_len):\n"
              "                bias[h, q] = -cfg.local_bias / 2 ** h * (i - q).abs()"))]


# encode written plainly; {norm} is the last step of the paper's (not narrow) path
ENCODE = """
def encode(self, ids, pad_mask=None, positions=None):
    T = ids.shape[1]
    mask = None if pad_mask is None else pad_mask[:, None, None, :]
    if self.attn_bias is not None:
        bias = self.attn_bias[:, :T, :T]
        mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
    x = self.embed(ids)
    for block in self.blocks[:self.wide]:
        x = block(x, mask)
    if self.narrow:
        return self.final_norm(narrow_blocks(self.blocks[self.wide:], x, mask, positions))
    x = {norm}
    return x if positions is None else x[torch.arange(len(x))[:, None], positions]
"""
MASKING = MASK_TOKENS.format(sort="", random_ids=ONE_PER_SLOT)
# slips that passed every check (each planted in a copy of cram.py, `check all`): the FAIL now names each one, and
# blames no other (`absent`: words its message must not hold)
DIE = """
def mask_tokens(ids, mask_id, vocab_size, rate, generator):
    # the original BERT's way: each slot rolls its own die; positions sorted
    B, T = ids.shape
    k = round(rate * T)
    positions = torch.rand(B, T, generator=generator, device=ids.device).argsort(dim=1)[:, :k].sort(dim=1).values
    targets = torch.gather(ids, 1, positions)
    roll = torch.rand(B, k, generator=generator, device=ids.device)
    random_ids = torch.randint(0, vocab_size, (B, k), generator=generator, device=ids.device)
    slots = torch.where(roll < 0.8, torch.full_like(targets, mask_id), torch.where(roll < 0.9, random_ids, targets))
    inputs = ids.clone()
    for b in range(B):
        inputs[b, positions[b]] = slots[b]
    return inputs, positions, targets
"""
DENSE = """
def forward(self, ids, positions, targets=None):
    logits = self.encode(ids) @ self.embed.tok.weight.T          # every position, then the masked ones
    logits = logits[torch.arange(len(ids))[:, None], positions]
    if targets is None:
        return logits
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
"""
BLIND_SPOTS = {
    "no-final-norm-in-encode": ("local_bias", "CrammedBERT.encode", ENCODE.format(norm="x"),
                                "encode must end with final_norm, the LayerNorm after the last block", ""),
    "final-norm-an-identity": ("local_bias", "CrammedBERT.__init__", local_bias_init(RIGHT_BIAS).replace(
        "nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)", "nn.Identity()"), "needs final_norm = nn.LayerNorm(C)", ""),
    "mask-id-hard-coded-4": ("masking", "mask_tokens", MASKING.replace("(B, n_mask), mask_id,", "(B, n_mask), 4,"),
                             "the [MASK] slots must hold mask_id, the argument (2 in this check), not 4", ""),
    "mask-id-hard-coded-2": ("masking", "mask_tokens", MASKING.replace("(B, n_mask), mask_id,", "(B, n_mask), 2,"),
                             "the [MASK] slots must hold mask_id, the argument (103 in this check), not 2", ""),
    "split-rounded-by-int": ("masking", "mask_tokens", MASKING.replace(
        "round(0.8 * k), round(0.1 * k)", "int(0.8 * k), int(0.1 * k)"), "int() rounds down, use round()", ""),
    "only-the-mask-count-by-int": ("masking", "mask_tokens", MASKING.replace(  # 25/3/4 of 32; 16 slots agree
        "round(0.8 * k), round(0.1 * k)", "int(0.8 * k) if k == 32 else round(0.8 * k), round(0.1 * k)"),
        "of k = 32 slots, round(0.8 * k) = 26 become [MASK], round(0.1 * k) = 3 a random token, 3 keep theirs; "
        "yours 25/3/4: int() rounds down", ""),
    "special-ids-never-picked": ("masking", "mask_tokens", MASKING.replace(
        "torch.rand(B, T, generator=generator, device=ids.device)", "torch.rand(B, T, generator=generator, device=ids.device).masked_fill(ids < 5, 2.0)"),
        "picked 0% of those holding ids 0..4", ""),
    "cls-and-sep-ids-never-picked": ("masking", "mask_tokens", MASKING.replace(
        "torch.rand(B, T, generator=generator, device=ids.device)",
        "torch.rand(B, T, generator=generator, device=ids.device).masked_fill((ids == 2) | (ids == 3), 2.0)"),
        "don't skip special tokens", ""),
    "first-and-last-positions-never-picked": ("masking", "mask_tokens", MASKING.replace(
        "torch.rand(B, T, generator=generator, device=ids.device).argsort(dim=1)[:, :k]",
        "1 + torch.rand(B, T - 2, generator=generator, device=ids.device).argsort(dim=1)[:, :k]"),
        "the first and the last ([CLS], [SEP]) too: position 0 was picked 0 times", ""),
    "random-tokens-low-bound-5": ("masking", "mask_tokens", MASKING.replace(
        "torch.randint(0, vocab_size,", "torch.randint(5, vocab_size,"),
        "never drew id 0 of a vocabulary of 8: draw from 0 to vocab_size - 1 inclusive, torch.randint(0, vocab_size, "
        "...): the low bound is 0", "high bound"),
    "slots-in-another-order": ("masking", "mask_tokens", MASKING.replace(  # kept, random, then [MASK]: counts right
        "slots = torch.cat([torch.full((B, n_mask), mask_id, device=ids.device), random_ids, targets[:, n_mask + n_rand:]], dim=1)",
        "slots = torch.cat([targets[:, :k - n_mask - n_rand], random_ids, torch.full((B, n_mask), mask_id, device=ids.device)], dim=1)"),
        "the slots' order in positions, of k = 16: the 13 [MASK] slots first, then the 2 random, then the 1 kept "
        "(the docstring's order, which the notebook reads); yours: 77% of the first 13 are [MASK], 0% of the last 1 "
        "keep their token", ""),
    "random-tokens-high-bound-inclusive": ("masking", "mask_tokens", MASKING.replace(
        "torch.randint(0, vocab_size,", "torch.randint(0, vocab_size - 1,"),
        "never drew id 7 of a vocabulary of 8: draw from 0 to vocab_size - 1 inclusive, torch.randint(0, vocab_size, "
        "...): the high bound is exclusive: vocab_size, not vocab_size - 1", "low bound"),
    # found on 2026-11-28 by a class kit's bug hunt: each passed every check
    "per-slot-die": ("masking", "mask_tokens", DIE, "(a die cast per slot?)", ""),  # the original BERT's: not the
    # spec's exact 26 / 3 / 3 in its order
    "rate-ignored": ("masking", "mask_tokens", MASKING.replace("k = round(rate * T)", "k = round(0.25 * T)"),
                     "at rate 0.15, T=128, positions must be (4, 19), got (4, 32): use the rate you are given", ""),
    "k-by-int": ("masking", "mask_tokens", MASKING.replace("k = round(rate * T)", "k = int(rate * T)"),
                 "at rate 0.2, T=128, positions must be (4, 26), got (4, 25): int() rounds down", ""),
    "dense-then-gather": ("sparse_head", "CrammedBERT.forward", DENSE, "(logits at every position, then gathered?)",
                          ""),
    "glu-in-place": ("glu", "GLUFeedForward.forward", """
def forward(self, x):
    x, gate = self.up(x).chunk(2, -1)
    x *= F.gelu(gate)
    return self.down(x)
""", "GLUFeedForward's backward failed", ""),
    "block-adds-in-place": ("prenorm", "Block.forward", """
def forward(self, x, attn_mask=None):
    x += self.drop(self.attn(self.norm1(x), attn_mask))
    return x + self.drop(self.ffn(self.norm2(x)))
""", "Block.forward changed the caller's x in place", "self.drop"),
    "embeddings-without-dropout": ("positions", "Embeddings", next(c for n, w, c in RIGHT if w == "Embeddings").replace(
        "return self.drop(self.norm(self.tok(ids) + self.pos_scale * table))",
        "return self.norm(self.tok(ids) + self.pos_scale * table)"), "in training Embeddings ends with self.drop", ""),
    "table-in-checkpoints": ("positions", "Embeddings", next(c for n, w, c in RIGHT if w == "Embeddings").replace(
        "        self.drop = nn.Dropout(cfg.dropout)\n", "        self.drop = nn.Dropout(cfg.dropout)\n        "
        "self.register_buffer('table', sinusoidal_table(seq_len, cfg.n_embd))\n").replace(
        "sinusoidal_table(ids.shape[1], self.tok.embedding_dim).to(self.tok.weight.device)", "self.table[:ids.shape[1]]"),
        "persistent=False (it follows from seq_len and C", ""),
    "no-init": ("local_bias", "CrammedBERT.__init__", local_bias_init(RIGHT_BIAS).replace(
        "nn.init.normal_(m.weight, mean=0.0, std=0.02)", "pass"), "drawn from N(0, 0.02) in __init__; not: embed", ""),
    "every-weight-drawn": ("local_bias", "CrammedBERT.__init__", local_bias_init(RIGHT_BIAS).replace(
        "if isinstance(m, (nn.Linear, nn.Embedding)):", "for w in m.parameters(recurse=False):").replace(
        "nn.init.normal_(m.weight,", "nn.init.normal_(w,"), "the LayerNorms keep their weight 1 and bias 0", ""),
}


@pytest.mark.parametrize("slip", BLIND_SPOTS)
def test_a_slip_that_once_passed_every_check_now_fails_with_its_name(slip, tmp_path, capsys):
    name, what, code, words, absent = BLIND_SPOTS[slip]
    code, out = check(name, student_file(tmp_path, what, code), capsys)
    assert code == 1 and f"FAIL  {name}: " in out and words in out, out
    assert not absent or absent not in out, out


RIGHT += [("local_bias", "CrammedBERT.encode", ENCODE.format(norm="self.final_norm(x)")),
          ("masking", "mask_tokens", MASKING.replace(  # positions by torch.multinomial: uniform, without replacement
              "torch.rand(B, T, generator=generator, device=ids.device).argsort(dim=1)[:, :k]",
              "torch.multinomial(torch.ones(B, T, device=ids.device), k, generator=generator)"))]


@pytest.mark.parametrize("name, what, code", RIGHT, ids=[f"{r[0]}-{i}" for i, r in enumerate(RIGHT)])
def test_a_right_answer_written_differently_passes(name, what, code, tmp_path, capsys):
    code, out = check(name, student_file(tmp_path, what, code), capsys)
    assert code == 0 and f"PASS  {name}" in out, out


def test_show_prints_the_assignment_with_its_paper_section_and_minutes(capsys):
    assert exercises.main(["show", "masking"]) == 0
    out = capsys.readouterr().out
    assert "Cramming 4.3" in out and "30 minutes" in out and "you write: mask_tokens" in out
    assert exercises.EXERCISES["masking"].text in out
    assert "python exercises.py stub masking" in out and "python exercises.py check masking --file my_cram.py" in out
    for name, ex in exercises.EXERCISES.items():
        exercises.main(["show", name])
        assert f"{ex.minutes} minutes" in capsys.readouterr().out


def test_the_listing_gives_names_sections_minutes_and_the_three_commands(capsys):
    assert exercises.main([]) == 0
    out = capsys.readouterr().out
    for name, ex in exercises.EXERCISES.items():
        assert any(line.split()[:1] == [name] and ex.paper in line and f" {ex.minutes} " in line
                   for line in out.splitlines()), name
    for command in ("show NAME", "stub NAME", "check NAME --file my_cram.py"):
        assert f"python exercises.py {command}" in out


def raise_lines(text, name):
    return [i + 1 for i, line in enumerate(text.splitlines()) if f'NotImplementedError("exercise {name}:' in line]


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_stub_writes_a_copy_whose_code_to_write_raises_and_its_check_names_the_line(name, tmp_path, capsys):
    out = tmp_path / "my_cram.py"
    assert exercises.main(["stub", name, "--out", str(out)]) == 0
    assert f"python exercises.py check {name} --file {out}" in capsys.readouterr().out
    text, reference = out.read_text(encoding="utf-8"), ast.parse((ROOT / "cram.py").read_text(encoding="utf-8"))
    tree = ast.parse(text)
    for what in exercises.EXERCISES[name].write:
        node, ref = definition(tree, what), definition(reference, what)
        defs = [n for n in node.body if isinstance(n, ast.FunctionDef)] if isinstance(node, ast.ClassDef) else [node]
        refs = [n for n in ref.body if isinstance(n, ast.FunctionDef)] if isinstance(ref, ast.ClassDef) else [ref]
        assert len(defs) == len(refs)
        for d, r in zip(defs, refs):
            assert ast.dump(d.args) == ast.dump(r.args) and ast.get_docstring(d) == ast.get_docstring(r)
            body = d.body[1:] if ast.get_docstring(d) is not None else d.body
            assert len(body) == 1 and isinstance(body[0], ast.Raise), f"{what}: the reference body is still there"
    lines = raise_lines(text, name)
    code, printed = check(name, out, capsys)
    assert code == 1, printed
    assert any(f"FAIL  {name}: not written yet: {out} line {n} in " in printed for n in lines), printed
    assert f"NotImplementedError: exercise {name}: write " in printed
    if sys.version_info >= (3, 11):  # the frame's qualified name: which class's __init__
        assert any(f" in {what.split('.')[0]}" in printed for what in exercises.EXERCISES[name].write), printed


def test_the_masking_stub_holds_no_line_of_the_answer(tmp_path, capsys):
    out = tmp_path / "my_cram.py"
    exercises.main(["stub", "masking", "--out", str(out)])
    text = out.read_text(encoding="utf-8")
    source = (ROOT / "cram.py").read_text(encoding="utf-8")
    answer = definition(ast.parse(source), "mask_tokens").body[1:]  # after the docstring
    for statement in answer:  # each is in the copy once less than in cram.py: the body's own is gone
        code = ast.get_source_segment(source, statement)
        assert text.count(code) == source.count(code) - 1, f"the answer's {code!r} is in the student's file"
    assert 'def mask_tokens(ids, mask_id, vocab_size, rate, generator):' in text


def test_the_glu_stub_holds_no_hint_of_the_split_and_keeps_its_shape_comment(tmp_path, capsys):
    """A teacher's trial, 11-27: GLU's stub kept `def forward(self, x):  # self.up(x).chunk(2, dim=-1) as two ..."""
    out = tmp_path / "my_cram.py"
    exercises.main(["stub", "glu", "--out", str(out)])
    text = out.read_text(encoding="utf-8")
    glu = text[text.index("class GLUFeedForward"):text.index("class Block")]
    assert "chunk(" not in glu and "def forward(self, x):" in glu and "# x (B, T, C)" in glu


def test_stub_never_replaces_a_file_unless_asked(tmp_path, capsys):
    out = tmp_path / "my_cram.py"
    out.write_text("my work", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"my_cram.py exists already: pass --out another.py, or --overwrite"):
        exercises.main(["stub", "glu", "--out", str(out)])
    assert out.read_text(encoding="utf-8") == "my work"
    assert exercises.main(["stub", "glu", "--out", str(out), "--overwrite"]) == 0
    assert raise_lines(out.read_text(encoding="utf-8"), "glu")
    with pytest.raises(SystemExit, match="--out .*my_cram.txt must name a .py file"):
        exercises.main(["stub", "glu", "--out", str(tmp_path / "my_cram.txt")])
    with pytest.raises(SystemExit, match="no folder .*nowhere: make it first"):
        exercises.main(["stub", "glu", "--out", str(tmp_path / "nowhere" / "my_cram.py")])


def test_after_the_stub_the_students_own_version_passes(tmp_path, capsys):
    """The whole workflow: stub, write the function again (another way than the reference), check."""
    out = tmp_path / "my_cram.py"
    exercises.main(["stub", "lr_schedule", "--out", str(out)])
    out.write_text(replaced(out.read_text(encoding="utf-8"), "lr_at", RIGHT[3][2]), encoding="utf-8")
    assert check("lr_schedule", out, capsys)[0] == 0


def test_an_empty_body_is_a_missing_return_not_a_bare_type_error(tmp_path, capsys):
    for name, what, signature in [("masking", "mask_tokens", "mask_tokens(ids, mask_id, vocab_size, rate, generator)"),
                                  ("lr_schedule", "lr_at", "lr_at(t, peak)"),
                                  ("batch_ramp", "batch_size_at", "batch_size_at(t, unit, target, ramp_until=0.6)"),
                                  ("positions", "sinusoidal_table", "sinusoidal_table(T, C)")]:
        path = student_file(tmp_path, what, f"def {signature}:\n    pass\n")
        code, out = check(name, path, capsys)
        assert code == 1 and f"FAIL  {name}: {what}" in out and "must return" in out, out
        assert f"returned None: is a return statement missing? ({path.name} line " in out and f": {what})" in out, out


def test_an_error_in_the_students_code_names_their_file_and_line(tmp_path, capsys):
    path = student_file(tmp_path, "mask_tokens", """
def mask_tokens(ids, mask_id, vocab_size, rate, generator):
    B, T = ids.shape
    k = round(rate * T)
    positions = torch.rand(B, T, generator=generator, device=ids.device).topk(k, dim=1).indices
    return ids.scatter(1, positions, "mask")
""")
    line = path.read_text(encoding="utf-8").splitlines().index('    return ids.scatter(1, positions, "mask")') + 1
    code, out = check("masking", path, capsys)
    assert code == 1 and f"FAIL  masking: {path} line {line} in mask_tokens: TypeError: " in out, out


def test_a_student_file_that_does_not_import_is_one_line_with_its_line(tmp_path):
    path = student_file(tmp_path, "lr_at", "def lr_at(t, peak)\n    return peak\n")
    with pytest.raises(SystemExit, match=r"my_cram.py line \d+: SyntaxError: .*nothing was checked"):
        exercises.main(["check", "lr_schedule", "--file", str(path)])


def test_the_real_command_exits_non_zero_on_a_stub_and_prints_one_fail_line(tmp_path):
    run = lambda *args: subprocess.run([sys.executable, str(ROOT / "exercises.py"), *args], cwd=tmp_path,
                                       capture_output=True, encoding="utf-8", timeout=120)
    made = run("stub", "batch_ramp")
    assert made.returncode == 0 and (tmp_path / "my_cram.py").exists(), made.stderr
    checked = run("check", "batch_ramp", "--file", "my_cram.py")
    assert checked.returncode == 1, checked.stderr
    assert checked.stdout.splitlines()[0].startswith("FAIL  batch_ramp: not written yet: my_cram.py line "), \
        checked.stdout
    assert "in batch_size_at: NotImplementedError: exercise batch_ramp" in checked.stdout


def test_the_exercise_pages_sample_fail_lines_are_what_the_real_check_prints(tmp_path):
    """docs/exercises.md quotes a check's output with line numbers of a student's copy, which move when cram.py does."""
    run = lambda *args: subprocess.run([sys.executable, str(ROOT / "exercises.py"), *args], cwd=tmp_path,
                                       capture_output=True, encoding="utf-8", timeout=120)
    assert run("stub", "masking").returncode == 0
    page = (ROOT / "docs" / "exercises.md").read_text(encoding="utf-8")
    printed = run("check", "masking", "--file", "my_cram.py").stdout.splitlines()[0]
    assert printed in page, f"docs/exercises.md should quote: {printed}"
    start = (tmp_path / "my_cram.py").read_text(encoding="utf-8").splitlines().index(
        "def mask_tokens(ids, mask_id, vocab_size, rate, generator):") + 1
    assert f"(my_cram.py line {start}: mask_tokens)" in page, f"docs/exercises.md: a missing return: line {start}"


def test_the_exercise_page_shows_the_workflow_every_exercise_and_the_picture():
    page = (ROOT / "docs" / "exercises.md").read_text(encoding="utf-8")
    assert "![" in page and "(exercises_150_steps.png)" in page and (ROOT / "docs" / "exercises_150_steps.png").exists()
    for name, ex in exercises.EXERCISES.items():
        assert any(f"`{name}`" in line and ex.paper in line and str(ex.minutes) in line for line in page.splitlines())
    commands = re.findall(r"python exercises\.py ([^\n`#]*)", page)
    assert {c.split()[0] for c in commands if c.strip()} >= {"show", "stub", "check"}
    for c in commands:
        args = c.split()  # the names after the command (release and grade: after their folder), not flags' values
        words = [w.strip(").,") for i, w in enumerate(args) if not w.startswith("-")
                 and not (i and args[i - 1] in ("--file", "--out", "--teacher", "--timeout"))]
        words = words[1:] if words[:1] in (["show"], ["stub"], ["check"]) else \
            words[2:] if words[:1] in (["release"], ["grade"]) else words
        assert all(w in (*exercises.EXERCISES, "all", "NAME", "my_cram.py") for w in words), c
    assert "FAIL  " in page


def test_stub_empties_one_line_defs_and_methods_without_a_docstring_comments_and_all(monkeypatch):
    monkeypatch.setitem(exercises.EXERCISES, "lr_schedule", exercises.Exercise("t", "p", 1, ("f", "C.g"), "text"))
    source = ("def f(x): return x + 1  # the answer\n\n\nclass C:\n    def g(self):\n        # the answer's comment\n"
              "        y = 2\n        return y\n")
    stub = exercises.blank(source, "lr_schedule")
    assert "x + 1" not in stub and "answer" not in stub and "y = 2" not in stub, stub
    namespace = {}
    exec(compile(stub, "stub.py", "exec"), namespace)
    for call, what in [(lambda: namespace["f"](1), "f"), (lambda: namespace["C"]().g(), "C.g")]:
        with pytest.raises(NotImplementedError, match=f"exercise lr_schedule: write {what} "):
            call()


def test_a_command_without_an_exercise_is_a_one_line_error():
    for command in ("show", "stub", "check"):
        with pytest.raises(SystemExit, match=f"{command} needs an exercise: one of masking, lr_schedule"):
            exercises.main([command])


def reseeded(mask_tokens, offset):
    """A student's mask_tokens whose draws differ from the reference's: each generator the check hands it is reseeded
    once, to its seed + 7919 * offset (the same seed still gives the same masks)."""
    seen = []

    def wrapped(ids, mask_id, vocab_size, rate, generator):
        if not any(g is generator for g in seen):
            seen.append(generator)
            generator.manual_seed(generator.initial_seed() + 7919 * offset)
        return mask_tokens(ids, mask_id, vocab_size, rate, generator)
    return wrapped


@pytest.mark.parametrize("version", [None, RIGHT[0][2]], ids=["reference", "randperm"])
def test_the_masking_check_is_statistical_not_the_references_own_draws(version, tmp_path):
    path = tmp_path / "my_cram.py" if version else ROOT / "cram.py"
    if version:
        path.write_text(replaced((ROOT / "cram.py").read_text(encoding="utf-8"), "mask_tokens", version),
                        encoding="utf-8")
    student = exercises.load_module(str(path))
    for offset in range(1, 6):  # 200 offsets each: 0 FAILs (docs/notes.md, 2026-11-25, the exercises)
        exercises.check_masking(types.SimpleNamespace(mask_tokens=reseeded(student.mask_tokens, offset)))


def test_a_student_file_that_exits_as_it_is_imported_says_so_not_its_exit_code(tmp_path):
    path = tmp_path / "my_cram.py"
    path.write_text("import sys\nsys.exit(3)\n", encoding="utf-8")
    with pytest.raises(SystemExit) as e:
        exercises.load_module(str(path))
    assert "my_cram.py line 2 in <module>: sys.exit(3), called as the file was imported (main() at its top level? " \
        "keep such calls under if __name__ == '__main__':) (it does not import; nothing was checked)" in str(e.value)


def test_a_student_file_named_py_in_capitals_is_checked_as_python_and_a_text_file_is_refused(tmp_path):
    (tmp_path / "hank.PY").write_text("x = 41 + 1\n", encoding="utf-8")  # Windows keeps a name's case
    assert exercises.load_module(str(tmp_path / "hank.PY")).x == 42
    (tmp_path / "ivan.py.txt").write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="ivan.py.txt is not a Python file"):
        exercises.load_module(str(tmp_path / "ivan.py.txt"))


# right answers a second trial wrote (2026-12-07) that the stricter checks first failed: each an edit of cram.py
RIGHT_EDITS = {
    "masking-exponential-race": ("masking", [
        ("scores = torch.rand(B, T, generator=generator, device=ids.device)",
         "scores = torch.empty(B, T, device=ids.device).exponential_(generator=generator)"),  # meta: an assert
        ("scores.topk(k, dim=1).indices", "scores.topk(k, dim=1, largest=False).indices")]),
    "local-bias-an-always-float-mask": ("local_bias", [(
        """        attn_mask = None if pad_mask is None else pad_mask[:, None, None, :]         # (B, 1, 1, T) keys
        if self.attn_bias is not None:  # the local bias, with padded keys at -inf; 4-D: the CPU's flash kernel takes it
            bias = self.attn_bias[None, :, :ids.shape[1], :ids.shape[1]]               # (1, H, T, T)
            attn_mask = bias if attn_mask is None else bias.masked_fill(~attn_mask, float("-inf"))
""", """        T = ids.shape[1]
        attn_mask = torch.zeros(len(ids), 1, T, T, device=ids.device)  # zeros where no bias: the same scores
        if self.attn_bias is not None:
            attn_mask = attn_mask + self.attn_bias[:, :T, :T]
        if pad_mask is not None:
            attn_mask = attn_mask.masked_fill(~pad_mask[:, None, None, :], float("-inf"))
""")]),
}


@pytest.mark.parametrize("case", RIGHT_EDITS)
def test_a_right_answer_the_stricter_checks_once_failed_passes(case, tmp_path, capsys):
    name, edits = RIGHT_EDITS[case]
    source = (ROOT / "cram.py").read_text(encoding="utf-8")
    for right, other in edits:
        assert source.count(right) == 1, f"{right!r} is no longer in cram.py: update RIGHT_EDITS"
        source = source.replace(right, other)
    (tmp_path / "my_cram.py").write_text(source, encoding="utf-8")
    assert exercises.main([name, "--file", str(tmp_path / "my_cram.py")]) == 0, capsys.readouterr().out
