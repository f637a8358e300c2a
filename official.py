"""The paper's own 24-hour model: the released Hugging Face folder JonasGeiping/crammed-bert as a cram.py model.

    git clone https://huggingface.co/JonasGeiping/crammed-bert    # or: hf download JonasGeiping/crammed-bert ...
    python fill_mask.py crammed-bert "the capital of france is [MASK] ."
    python finetune_glue.py crammed-bert --tasks rte                  # the paper's recipe, RTE from the hub

The folder holds config.json ("model_type": "crammedBERT", the architecture under "arch"), model.safetensors (the
official module names; older uploads: pytorch_model.bin), tokenizer.json, tokenizer_config.json and
special_tokens_map.json. It is the paper preset's architecture, so it loads into CrammedBERT weight for weight:
one name map (name_map) and two layout transforms (qkv_to_ours, scale_to_ours); to_release is the inverse. An option
in config.json that CrammedBERT does not compute is refused, named, in one line: never a silently different function.

The other way: export writes a cram.py checkpoint as such a folder, to share it (docs/share_and_reproduce.md):
    python official.py export out/ckpt.pt my-crammed-bert     # then: hf upload <you>/my-crammed-bert my-crammed-bert
A checkpoint the release cannot hold (the tiny preset's local attention bias, an option the official architecture
lacks, a GPT-2 tokenizer) is refused in one line; the folder is written whole (built beside it, then renamed) or not
at all, into a new or empty folder only.
"""
import argparse
import dataclasses
import json
import math
import os
import re
import shutil
import socket
import sys
from pathlib import Path

import torch

from cram import Config, CramError, CrammedBERT, check_config, load_model
from errors import hub_offline, text_of
from hardware import built_for
from tokenizer import HF_TOKENIZER_FILES, hf_special_names, load_tokenizer

# Every option of the release's "arch" (the official cramming/config/arch/crammed-bert.yaml), dotted for the nested
# "attention" and "embedding" groups, in three kinds:
SHAPE = {"num_transformer_layers": "n_layer", "hidden_size": "n_embd", "intermed_size": "ffn_hidden",  # -> Config
         "attention.num_attention_heads": "n_head", "norm_eps": "norm_eps"}  # and vocab_size, max_seq_length below
REQUIRED = {  # the only value CrammedBERT computes (cram.py's docstring): another one is refused
    "norm": "LayerNorm", "norm_scheme": "pre", "nonlin": "GELUglu", "final_norm": True, "use_bias": False,
    "ffn_layer_frequency": 1, "tie_weights": True, "decoder_bias": False, "skip_head_transform": True,
    "objective_layout": "MLM", "embedding.pos_embedding": "scaled-sinusoidal", "embedding.normalization": True,
    "attention.type": "self-attention", "attention.causal_attention": False, "attention.qkv_bias": False,
    "attention.rotary_embedding": False, "attention.skip_output_projection": False,
    "attention.sequence_op": "torch-softmax"}
# No effect on the function the weights compute, so any value: dropout (fine-tuning sets its own), the init, casts for
# low precision, the pretraining loss and masked fraction, the embedding row kept at zero gradient (padding_idx), and
# the fine-tuning head (finetune_glue.py builds the paper's GLUE-sane head: first token, 1024 wide, Tanh).
IRRELEVANT = {"architectures", "hidden_dropout_prob", "embedding.dropout_prob", "attention.dropout_prob",
              "attention.seq_op_in_fp32", "embedding.stable_low_precision", "embedding.pad_token_id", "init", "loss",
              "sparse_prediction", "num_labels", "classification_head"}
SIZES = ("embedding.vocab_size", "embedding.max_seq_length", "embedding.embedding_dim")  # the last = hidden_size
HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # owner/name, as JonasGeiping/crammed-bert


def flat(arch, prefix=""):
    """{"attention": {"type": ...}} -> {"attention.type": ...}; a whole "init" or "classification_head" is one key."""
    out = {}
    for key, value in arch.items():
        if isinstance(value, dict) and key in ("attention", "embedding"):
            out |= flat(value, f"{prefix}{key}.")
        else:
            out[prefix + key] = value
    return out


def read_config(folder):
    """config.json -> (Config with preset "paper", vocab_size, seq_len); any option we do not compute is refused."""
    path = folder / "config.json"
    try:
        spec = json.loads(text_of(path))
        model_type, arch = spec.get("model_type"), flat(spec["arch"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:  # JSON nested 10^5 deep
        if (folder / "ckpt.pt").is_file():
            raise CramError(f"{folder} is a cram.py run: pass its checkpoint, {folder / 'ckpt.pt'}") from None
        what = f"'s config.json is not a crammedBERT config ({type(e).__name__}: {e})" if path.is_file() else \
            " has no config.json"
        raise CramError(f"{folder}{what}: give a cram.py checkpoint (ckpt.pt) or the paper's released model "
                        "folder") from None
    if model_type != "crammedBERT":
        raise CramError(f"{path} says model_type {model_type!r}: only the paper's crammedBERT folders load here")
    for key in sorted(arch):
        if key not in SHAPE and key not in REQUIRED and key not in SIZES and key not in IRRELEVANT:
            raise CramError(f"{path}: unknown arch option {key!r}: this loader cannot tell what it changes, refused")
    for key, want in REQUIRED.items():
        if key not in arch or type(arch[key]) is not type(want) or arch[key] != want:
            got = repr(arch[key]) if key in arch else "missing"
            raise CramError(f"{path}: arch option {key} = {got} is not what this model computes ({key} = "
                            f"{want!r}): refused, the weights would compute another function")
    sizes = {key: arch.get(key) for key in [*SHAPE, *SIZES]}
    if not all(type(v) is int and v >= 1 for k, v in sizes.items() if k != "norm_eps") or \
            type(sizes["norm_eps"]) is not float:
        raise CramError(f"{path}: the sizes {sizes} must be whole numbers >= 1 (norm_eps a number)")
    if sizes["embedding.embedding_dim"] != sizes["hidden_size"]:
        raise CramError(f"{path}: embedding_dim {sizes['embedding.embedding_dim']} differs from hidden_size "
                        f"{sizes['hidden_size']} (an ALBERT-style projection): refused, CrammedBERT has none")
    cfg = Config(preset="paper", **{ours: arch[key] for key, ours in SHAPE.items()})  # paper preset: its recipe
    check_config(cfg)
    return cfg, arch["embedding.vocab_size"], arch["embedding.max_seq_length"]


# What crammed-bert.yaml sets that computes nothing here (IRRELEVANT), at the values of the official code: the yaml's
# own, and sparse_prediction its MLM rate (${train.objective.mlm_probability}); config.json of official_tiny as made.
RELEASE_DEFAULTS = {"architectures": ["ScriptableCrammedBERT"], "hidden_dropout_prob": 0.1,
                    "embedding.dropout_prob": 0.1, "attention.dropout_prob": 0.1, "attention.seq_op_in_fp32": False,
                    "embedding.stable_low_precision": False, "init": {"type": "normal", "std": 0.02},
                    "loss": "cross-entropy", "num_labels": None,
                    "classification_head": {"pooler": "avg", "include_ff_layer": True, "head_dim": 1024,
                                            "nonlin": "Tanh", "classifier_dropout": 0.1}}


def release_config(cfg, vocab_size, seq_len, pad_id=0):
    """The inverse of read_config: config.json for our model as the official code writes it, every option of the yaml
    (its model class reads them all: a missing one fails there) and the top-level keys its save_pretrained wrote."""
    arch = {**RELEASE_DEFAULTS, **{key: getattr(cfg, ours) for key, ours in SHAPE.items()}, **REQUIRED,
            **dict(zip(SIZES, (vocab_size, seq_len, cfg.n_embd))), "sparse_prediction": cfg.mask_rate,
            "embedding.pad_token_id": pad_id}  # padding_idx: only which embedding row gets no gradient
    nested = {}
    for key, value in sorted(arch.items()):
        *group, name = key.split(".")
        (nested.setdefault(group[0], {}) if group else nested)[name] = value
    return {"_name_or_path": "", "architectures": ["ScriptableLMForPreTraining"], "model_type": "crammedBERT",
            "arch": nested, "torch_dtype": "float32"}


# The weights: the official names -> ours, and the two layouts that differ.
LAYER = {"norm1.weight": "norm1.weight", "norm1.bias": "norm1.bias", "attn.dense.weight": "attn.out.weight",
         "attn.self_attention.query_key_value.weight": "attn.qkv.weight", "norm2.weight": "norm2.weight",
         "norm2.bias": "norm2.bias", "ffn.dense_in.weight": "ffn.up.weight", "ffn.dense_out.weight": "ffn.down.weight"}
WORDS, DECODER = "encoder.embedding.word_embedding.weight", "decoder.weight"  # tied: one tensor, maybe stored twice


def name_map(n_layer):
    """Each release tensor name -> our parameter name, one for one. Besides these the release stores the tied
    decoder.weight (the word embedding again) and each layer's attention scale norm_factor: from_release checks both."""
    names = {WORDS: "embed.tok.weight", "encoder.embedding.pos_embedding.scale_factor": "embed.pos_scale",
             "encoder.embedding.norm.weight": "embed.norm.weight", "encoder.embedding.norm.bias": "embed.norm.bias",
             "encoder.final_norm.weight": "final_norm.weight", "encoder.final_norm.bias": "final_norm.bias"}
    for i in range(n_layer):
        names |= {f"encoder.layers.{i}.{theirs}": f"blocks.{i}.{ours}" for theirs, ours in LAYER.items()}
    return names


def qkv_to_ours(w, n_head):
    """The release's fused QKV rows are grouped per head, [h][q,k,v][d] (its attention views the output (H, 3D) and
    splits each head's 3D); ours per projection, [q,k,v][h][d] (Attention views it (3, H, D)). w: (3C, C)."""
    return w.reshape(n_head, 3, -1, w.shape[1]).transpose(0, 1).reshape(w.shape)


def qkv_to_release(w, n_head):
    return w.reshape(3, n_head, -1, w.shape[1]).transpose(0, 1).reshape(w.shape)


def scale_to_ours(s):  # the position scale: stored with shape (1,), ours is a 0-d scalar
    return s.reshape(())


def to_release(state, cfg):
    """Our state dict -> the release's names and layouts, with the tied decoder and the attention scales it stores."""
    names = name_map(cfg.n_layer)
    if extra := sorted(set(state) - set(names.values())):  # an edited cram.py's weight: the format has no place for it
        raise CramError(f"this cram.py's model has weights that the release's format has no place for "
                        f"({', '.join(extra[:3])}): it was edited from the paper's model; use the unchanged cram.py")
    out = {theirs: state[ours] for theirs, ours in names.items()}
    for name, w in out.items():
        out[name] = (qkv_to_release(w, cfg.n_head) if name.endswith("query_key_value.weight") else
                     w.reshape(1) if name.endswith("scale_factor") else w.clone())
    out[DECODER] = out[WORDS].clone()
    for i in range(cfg.n_layer):  # the official code keeps 1/sqrt(head dim) as a buffer: SDPA's default scale
        out[f"encoder.layers.{i}.attn.self_attention.norm_factor"] = torch.tensor(cfg.n_embd / cfg.n_head).rsqrt()
    return out


def from_release(state, cfg, where):
    """The release's tensors -> our state dict. Each stored tensor is used once and each of ours set, else refused."""
    state, head_dim = dict(state), cfg.n_embd // cfg.n_head
    if DECODER in state and WORDS in state and not torch.equal(state[DECODER], state[WORDS]):
        raise CramError(f"{where}: {DECODER} differs from {WORDS}, but the model ties them (one matrix): refused")
    if DECODER in state:  # the tied pair may be stored once, under either name (as the official loader allows)
        state[WORDS] = state.pop(DECODER)
    for i in range(cfg.n_layer):  # each layer's attention scale: ours is SDPA's 1/sqrt(head dim), so it must be that
        key = f"encoder.layers.{i}.attn.self_attention.norm_factor"
        factor = state.pop(key, None)
        if factor is None or factor.numel() != 1 or not math.isclose(float(factor), head_dim ** -0.5, rel_tol=1e-6):
            raise CramError(f"{where}: {key} is {'missing' if factor is None else factor.tolist()}, but this model "
                            f"scales attention by 1/sqrt({head_dim}) = {head_dim ** -0.5:g} (config.json's "
                            f"{cfg.n_embd} wide, {cfg.n_head} heads): config.json and the weights disagree, refused")
    names = name_map(cfg.n_layer)
    if extra := sorted(set(state) - set(names)):
        raise CramError(f"{where}: unexpected tensor {extra[0]} ({len(extra)} in all): not this architecture, refused")
    if missing := sorted(set(names) - set(state)):
        raise CramError(f"{where}: no tensor {missing[0]} ({len(missing)} missing): the file is incomplete")
    return {ours: qkv_to_ours(state[theirs], cfg.n_head) if ours.endswith("attn.qkv.weight") else
            scale_to_ours(state[theirs]) if ours == "embed.pos_scale" else state[theirs]
            for theirs, ours in names.items()}


def read_weights(folder):
    """model.safetensors (safetensors: data only, it cannot run code), else the older pytorch_model.bin, a pickle
    read with weights_only=True: tensors and plain containers only, so a crafted file runs nothing and is refused."""
    path = next((p for p in (folder / "model.safetensors", folder / "pytorch_model.bin") if p.is_file()), None)
    if path is None:
        raise CramError(f"no model.safetensors or pytorch_model.bin in {folder}: download the whole model folder")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file
            return load_file(path)
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise TypeError(f"a {type(state).__name__}, not a dict of tensors")
        return state
    except Exception as e:  # a crafted pickle, a file cut short, not weights at all
        raise CramError(f"{path} refused: damaged or not plain weights ({type(e).__name__}: "
                        f"{' '.join(str(e).split())[:150]}): download the model folder again") from None


def find_folder(path):
    """A local folder, or a hub name (owner/name, not a local path) downloaded into huggingface_hub's cache."""
    if os.path.isdir(path):
        return Path(path)
    local = os.path.exists(path) or path.endswith(".pt") or os.path.isdir(path.split("/")[0])  # a path, not a name
    if local or not HUB_NAME.fullmatch(path):
        raise CramError(f"no checkpoint at {path}: check the path, or train one first (or give the paper's model "
                        "folder, e.g. a clone of https://huggingface.co/JonasGeiping/crammed-bert)")
    by_hand = (f"git clone https://huggingface.co/{path} (with git-lfs), or hf download {path} --local-dir "
               f"{path.split('/')[1]} (huggingface_hub's command; older: huggingface-cli), then pass that folder")
    try:
        if not hub_offline():  # fail in seconds, not after the hub client's retries
            socket.create_connection(("huggingface.co", 443), timeout=5).close()
        from huggingface_hub import snapshot_download  # offline, it still finds a copy downloaded before
        folder = Path(snapshot_download(path, allow_patterns=["*.json", "model.safetensors"]))
        if not (folder / "model.safetensors").is_file():  # a release of pytorch_model.bin only: that, not both
            folder = Path(snapshot_download(path, allow_patterns=["*.json", "pytorch_model.bin"]))
        return folder
    except Exception as e:
        raise CramError(f"cannot get {path} from the Hugging Face hub ({type(e).__name__}); download it by hand: "
                        f"{by_hand}") from None


def load_pretrained(path, device="cpu"):
    """What every tool loads: a cram.py checkpoint (a file), else the paper's released folder or its hub name
    (JonasGeiping/crammed-bert). Returns (model, cfg, meta); a release's meta["folder"] says where it is."""
    return load_model(path, device) if os.path.isfile(path) else load_release(path, device)


def load_release(path, device="cpu"):
    """cram.load_model for the paper's released folder (or its hub name): (model, cfg with preset "paper", meta)."""
    folder = find_folder(str(path))
    cfg, vocab_size, seq_len = read_config(folder)
    state = read_weights(folder)
    try:  # no random init, nothing allocated for the weights before they load: a crafted config.json is one line
        model = built_for(state, cfg.n_layer, seq_len, lambda: CrammedBERT(cfg, vocab_size, seq_len))
    except (ValueError, RuntimeError, TypeError, OverflowError) as e:  # and sizes past what torch can count
        raise CramError(f"{folder}: {e}: a damaged or altered release, refused") from None
    shapes = {name: w.to("meta") for name, w in model.state_dict().items()}  # no values: untouched memory stays so
    expected = {name: w.shape for name, w in to_release(shapes, cfg).items()}
    for name, w in state.items():  # named before any layout transform, in the release's own terms
        if name in expected and w.shape != expected[name] and not name.endswith("norm_factor"):
            raise CramError(f"{folder}: {name} has shape {tuple(w.shape)}, config.json implies "
                            f"{tuple(expected[name])}: the weights and config.json do not belong together")
    model.load_state_dict(from_release(state, cfg, folder))
    return model.to(device), cfg, {"folder": str(folder), "format": "crammedBERT", "vocab_size": vocab_size,
                                   "seq_len": seq_len}


# ----------------------------------------------------------------------------------------------------------------
# Export: a cram.py checkpoint (or a release folder) -> a new folder of the release's format.

# Config fields that change nothing the weights compute: the run, the recipe, the init (pos_scale_init), dropout
# (fine-tuning sets its own). SHAPE's fields are written to config.json; local_bias and narrow are checked; a field
# not named here (one added to cram.py later) is refused unless it has its default, the paper's.
NOT_THE_FUNCTION = {"preset", "data_dir", "out_dir", "pos_scale_init", "dropout", "mask_rate", "mask_from", "mask_to",
                    "lr", "beta1", "beta2", "adam_eps", "weight_decay", "grad_clip", "batch_size", "micro_batch",
                    "ramp_until", "budget_hours", "max_steps", "eval_every", "eval_seqs", "ckpt_every_min", "resume",
                    "device", "compile", "shard", "offload", "seed"}


def check_exportable(cfg, where):
    """One line naming what the release's architecture cannot compute, or nothing."""
    if cfg.local_bias != 0:
        raise CramError(f"{where} has local_bias = {cfg.local_bias} (the tiny preset's local attention bias): the "
                        "official attention has none, so the release format cannot hold it; train with --local_bias 0")
    if cfg.narrow > 1:  # one narrow block attends to its own input, as a wide block does: the same function
        raise CramError(f"{where} has narrow = {cfg.narrow}: its last blocks attend to an earlier block's output, "
                        "the official blocks to their own input; the release format cannot hold it")
    for f in dataclasses.fields(Config):
        known = f.name in NOT_THE_FUNCTION or f.name in SHAPE.values() or f.name in ("local_bias", "narrow")
        if not known and getattr(cfg, f.name) != f.default:
            raise CramError(f"{where} has {f.name} = {getattr(cfg, f.name)!r}, an option the official architecture "
                            "lacks: the release format cannot hold it")


def write_tokenizer(tok, folder, seq_len, source=None):
    """tok as a Hugging Face tokenizer folder. Its special tokens marked special; a tokenizer with our framing of a
    single text (not single_as_pair) gets the template [CLS] A [SEP] / [CLS] A [SEP] B [SEP], so that Hugging Face's
    tokenizer(text) gives what finetune_glue.py feeds, and hf_tokenizer reads the framing back."""
    from tokenizers import Tokenizer, processors
    backend = Tokenizer.from_str(tok.backend.to_str())
    names = {**(hf_special_names(source) if source else {}),
             **{kind: backend.id_to_token(i) for kind, i in tok.special.items()}}
    backend.add_special_tokens(sorted({names[k] for k in tok.special}))  # in the vocabulary already: ids unchanged
    if not tok.single_as_pair:
        cls, sep = names["cls"], names["sep"]
        backend.post_processor = processors.TemplateProcessing(
            single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B {sep}",
            special_tokens=[(cls, tok.special["cls"]), (sep, tok.special["sep"])])
    backend.save(str(folder / "tokenizer.json"))
    tokens = {f"{kind}_token": name for kind, name in sorted(names.items())}
    (folder / HF_TOKENIZER_FILES[0]).write_text(json.dumps(tokens, indent=2), encoding="utf-8")
    (folder / HF_TOKENIZER_FILES[1]).write_text(json.dumps({**tokens, "clean_up_tokenization_spaces": True,
                                                            "model_max_length": seq_len,
                                                            "tokenizer_class": "PreTrainedTokenizerFast"}, indent=2),
                                                encoding="utf-8")


def export(src, dst):
    """src (a cram.py checkpoint, or a release folder) -> the folder dst: config.json, model.safetensors, tokenizer."""
    from safetensors.torch import save_file
    dst = Path(dst)
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise CramError(f"{dst} exists and is not an empty folder: export writes a new or empty folder only, give "
                        "another path")
    model, cfg, meta = load_pretrained(str(src))
    check_exportable(cfg, src)
    vocab_size, seq_len = model.embed.tok.weight.shape[0], model.embed.pos_table.shape[0]
    source = Path(meta["folder"]) if "folder" in meta else None
    if meta.get("tokenizer") == "gpt2":
        raise CramError(f"{src} uses GPT-2's tokenizer (tiktoken): export writes a Hugging Face tokenizer.json, which "
                        "this project does not convert tiktoken's files into; pretrain on a WordPiece set to export")
    tok = load_tokenizer(source or Path(src).resolve().parent, vocab_size)
    stage = dst.parent / f".{dst.name}.export-tmp-{os.getpid()}"  # beside dst: renamed into place when complete
    try:
        stage.mkdir(parents=True)
        config = release_config(cfg, vocab_size, seq_len, tok.special["pad"])
        (stage / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        state = to_release(model.state_dict(), cfg)
        save_file({k: w.float().contiguous() for k, w in state.items()}, stage / "model.safetensors",
                  metadata={"format": "pt"})
        shutil.copymode(stage / "config.json", stage / "model.safetensors")  # safetensors writes it owner-only
        write_tokenizer(tok, stage, seq_len, source)
        if dst.exists():
            dst.rmdir()  # empty, checked above
        os.replace(stage, dst)
    except OSError as e:  # a full disk, no permission
        raise CramError(f"cannot write {dst} ({e}): check the path and the disk; nothing was written") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return dst


def main(argv=None):
    p = argparse.ArgumentParser(description="The paper's release format (JonasGeiping/crammed-bert): export to it.",
                                allow_abbrev=False)
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="a cram.py checkpoint (or a release folder) -> a new release folder",
                       allow_abbrev=False)
    e.add_argument("ckpt", help="ckpt.pt written by cram.py (its tokenizer beside it), or a release folder")
    e.add_argument("out", help="a new or empty folder")
    args = p.parse_args(argv)
    try:
        folder = export(args.ckpt, args.out)
    except CramError as err:
        sys.exit(f"official.py: error: {err}")
    print(f"wrote {folder}: {', '.join(sorted(f.name for f in folder.iterdir()))}\n"
          f"check: python fill_mask.py {folder} \"the capital of france is [MASK] .\"\n"
          f"share: hf upload <you>/{folder.name} {folder}   (docs/share_and_reproduce.md)")
    return folder


if __name__ == "__main__":
    main()
