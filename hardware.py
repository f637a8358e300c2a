"""The machine: which precision a GPU computes natively, its peak for MFU, and what every log records about it.

Plain functions of what torch reports (device capability, device name), so tests can give them a T4's, an A100's
or an H100's answers on a CPU (tests/test_gpu_paths.py), or a Mac's and a Windows laptop's (tests/test_platforms.py).
cram.py, finetune_glue.py and bench.py share them; every script's main() calls safe_console() first. Fine-tuning's
small steps on a GPU: Replay (a step as CUDA graphs) and together (a task's seeds trained as one model, attention
then in PlainAttention's form). fit_micro_batch: the paper's micro-batch from the GPU's memory. built_for: the
model a saved file's weights load into, the file checked first.
"""
import contextlib
import copy
import datetime
import hashlib
import inspect
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from errors import LONGEST_ROW, MOST_BLOCKS, CramError


def amp_dtype(device):
    """Autocast precision, what the GPU computes natively: bf16 from Ampere (capability 8.0) on; fp16 with a GradScaler
    on the T4 (7.5) and V100 (7.0), whose bf16 is emulated (is_bf16_supported() says yes, but there are no flash
    attention or compiled kernels for it), and on the P100 (6.0); None (fp32) on the CPU, MPS and the GeForce 10
    series (6.1: fp16 at 1/64 of its fp32 speed)."""
    if device.type != "cuda":
        return None
    capability = torch.cuda.get_device_capability(device)
    if capability >= (8, 0):
        return torch.bfloat16
    if capability >= (7, 0) or capability == (6, 0):
        return torch.float16
    return None  # a GeForce 10 series


def autocast(device, dtype):
    """Autocast to dtype (amp_dtype's pick), or no context at all for None (fp32): older torch (2.4, the oldest that
    requirements.txt allows) refuses an autocast on "mps" even when it is disabled. No cache of cast weights: no
    weight is cast twice in a step, and a CUDA graph (Replay) must not keep casts from the step it recorded."""
    return torch.autocast(device.type, dtype=dtype, cache_enabled=False) if dtype is not None else \
        contextlib.nullcontext()


def cannot_compile(device):
    """Why torch.compile cannot run here, or None: this torch on this Python (torch 2.5 on Python 3.13), or a GPU older
    than Triton, which writes the compiled GPU kernels, supports (compute capability 7.0: the V100; a P100 is 6.0)."""
    import torch._dynamo  # imported where asked: it costs a second
    if not torch._dynamo.is_dynamo_supported():
        return f"torch {torch.__version__} cannot compile on Python {sys.version_info[0]}.{sys.version_info[1]}"
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (7, 0):
        return "Triton, which compiles the GPU's kernels, needs compute capability 7.0 (V100, T4) or newer"
    return None


def compile_by_default(device):
    """--compile auto: torch.compile on CUDA, except on Windows, where its GPU kernels need Triton, which torch does not
    ship there, and where it cannot (cannot_compile). Off on the CPU, and on Apple's GPU (mps), whose compiler backend
    torch calls a prototype."""
    return device.type == "cuda" and sys.platform != "win32" and cannot_compile(device) is None


def wants_compile(given, device):
    """--compile: True or "true" compiles (one line where it cannot: cannot_compile), None or "auto" as
    compile_by_default, else not."""
    if given in (True, "true") and (why := cannot_compile(device)):  # cram.py's flag takes a word; the others none
        raise CramError(f"--compile: {why}: " + ("use --compile false" if given == "true" else "leave out --compile"))
    return compile_by_default(device) if given in (None, "auto") else given in (True, "true")


def pick_device(name):
    """--device: auto (CUDA, else Apple's GPU, else the CPU), cuda, cpu or mps; one line if it is not there."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if name not in ("cuda", "cpu", "mps"):
        raise CramError(f"unknown --device {name!r}: use auto, cuda, cpu or mps")
    if name != "cpu" and not (torch.cuda if name == "cuda" else torch.backends.mps).is_available():
        raise CramError(f"--device {name} was asked for but no {name.upper()} device is visible: use --device cpu")
    return torch.device(name)


def dist_backend(device, offload=False):
    """torchrun's collective library: NCCL between CUDA GPUs, gloo on CPUs and on Windows, which has no NCCL build.
    offload (--offload): the shards and their gradients live in CPU memory, and the gradient clip and GradScaler's
    overflow check reduce them there; NCCL has no CPU tensors, so gloo serves the CPU beside it."""
    if device.type != "cuda" or sys.platform == "win32":
        return "gloo"
    return "cpu:gloo,cuda:nccl" if offload else "nccl"


def safe_console():
    """What a script prints never raises: a character the console's encoding lacks (cp1252 on Windows, also for output
    redirected to a file) is written as an escape, e.g. \\u03a9. Every script's main() calls this first."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # None under pythonw.exe; some embedders' streams cannot be reconfigured
            stream.reconfigure(errors="backslashreplace")


def stop_on_signals():
    """Ctrl+C, kill, Windows' Ctrl+Break: noted; the loop finishes its step, saves and exits. Only a main thread may
    set handlers: a run started from another thread (an app's worker) trains without them."""
    stop = {}
    if threading.current_thread() is not threading.main_thread():
        return stop
    for sig in {signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGBREAK", signal.SIGINT)}:
        signal.signal(sig, lambda signum, frame: stop.setdefault("signal", signal.Signals(signum).name))
    return stop


@contextlib.contextmanager
def sigterm_as_ctrl_c():
    """While it lasts, SIGTERM (kill, `timeout`, a cluster's time limit) stops the script as Ctrl-C does: a
    KeyboardInterrupt where it is, so its cleanup runs (finetune_glue.py keeps its finished tasks, gpu_check.py stops
    the step it started). Python's default ends the process at once. Only a main thread may set handlers."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler) if main_thread else None
    try:
        yield
    finally:
        if main_thread:  # None: a handler not set from Python, which Python cannot set back
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


class Replay:
    """A training step replayed as one CUDA graph per input shape: its thousands of kernel launches become one, which
    a small batch needs (fine-tuning, batch 16 of 64 tokens, the data already on the GPU: 23.3 ms a step as it is,
    6.7 ms in a graph; H200, notes 2026-11-26).
    step(*tensors) may only use tensors that outlive it (the model, an optimizer with capturable=True and its lr a
    tensor) and must not read a value back to the host (.item()). A shape's first step runs as it is, on a side stream
    (the warm-up a capture needs: the optimizer's state, the matmul library's); when the shape comes back, the step
    runs once more and is then recorded (recording runs nothing); from its third time on, the inputs are copied into
    the graph's own tensors and the graph replays. Dropout draws new numbers at every replay. A replay returns the
    same output tensor each time (read it before the next step). The graphs share one memory pool: each is a whole
    step, nothing of one is alive while another replays, so a shape's activations and gradients are not kept twice."""

    def __init__(self, step):
        self.step, self.graphs, self.seen, self.side = step, {}, set(), torch.cuda.Stream()
        self.pool = torch.cuda.graph_pool_handle()

    def __call__(self, *inputs):
        key = tuple((x.shape, x.dtype) for x in inputs)
        if key in self.graphs:
            graph, static, out = self.graphs[key]
            for buffer, x in zip(static, inputs):
                buffer.copy_(x)
            graph.replay()
            return out
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            out = self.step(*inputs)
        torch.cuda.current_stream().wait_stream(self.side)
        if key in self.seen:  # a shape that came back: record it (a shape seen only once never is)
            static, graph = [x.clone() for x in inputs], torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                recorded = self.step(*static)
            self.graphs[key] = graph, static, recorded
        self.seen.add(key)
        return out


def use_cuda_graphs(device):
    """Fine-tuning's step replayed as CUDA graphs (Replay): on a CUDA GPU in bf16. Not yet in fp16 (T4, V100): not
    tried there (its GradScaler with the fused AdamW stays on the GPU, so a graph may work: a T4's test first)."""
    return device.type == "cuda" and amp_dtype(device) == torch.bfloat16


def fit_micro_batch(device, model, cfg, seq_len, world=1, compiled=True, most=512):
    """--micro_batch 0 (the default): as many sequences as the GPU allows, as the paper runs (96 on a 2080 Ti, 512 on
    an A6000): the largest power of two up to `most` whose training state (16 bytes a parameter: weights, gradients,
    two Adam moments) and activations (30 bytes x n_embd per token and layer: the paper model compiled, 12.8 GiB at
    256 and 23.9 at 512 on an H100; uncompiled twice that, a margin, not measured; in fp32 twice again) fill at most
    70% of the GPU's memory, or what is free of it. At most 512: +2.4% tokens/s over 256 there, larger not yet
    measured; at most an eighth of the batch target over `world` GPUs, so the batch still ramps. Off CUDA 128, the
    paper's default."""
    most = max(1, min(most, cfg.batch_size // (8 * world)))
    if device.type != "cuda":
        return min(128, most)
    free, total = torch.cuda.mem_get_info(device)
    room = min(0.7 * total, free) - 16 * sum(p.numel() for p in model.parameters())
    fp32 = amp_dtype(device) is None  # a GeForce 10 series: activations of 4 bytes, not 2
    per_sequence = (30 if compiled else 60) * (2 if fp32 else 1) * cfg.n_embd * seq_len * cfg.n_layer
    return max([2 ** k for k in range(most.bit_length()) if 2 ** k * per_sequence <= room], default=1)


def seeds_at_once(device, seeds, n_params):
    """finetune_glue.py --seeds_together 0: how many of a task's seeds train as one model (together). Where the step
    is a CUDA graph, all the seeds that fit in half the GPU's memory at 16 bytes a parameter (fp32 weights, gradients,
    AdamW's two moments). They pay compiled (fine_tuning_plan): uncompiled, 5 as one took 4.8-4.9x one seed's step
    on an H100 (notes, 2026-11-26 21:00); compiled, 3.5x one compiled seed's on an H200 (15.2 ms, 4.3; 23:35).
    Elsewhere 1: a CPU's step is its arithmetic (3 together: 3-16% slower, notes), and in fp16 one GradScaler would
    skip every seed's step when one overflows."""
    if not use_cuda_graphs(device):
        return 1
    half = torch.cuda.get_device_properties(device).total_memory / 2
    return max(1, min(seeds, int(half // (16 * n_params))))


COMPILE_PAYS = 100_000  # fine-tuning batches (every seed's) a head shape from which torch.compile earns its warm-up


def compile_pays(device, batches, heads=1):
    """fine_tuning_plan's rule for compiling (below): a GPU where it works and was measured, a run long enough."""
    return use_cuda_graphs(device) and torch.__version__ >= (2, 11) and batches >= COMPILE_PAYS * heads and \
        compile_by_default(device)


def fine_tuning_plan(device, batches, seeds, n_params, compile=None, together=None, heads=1):
    """finetune_glue.py's defaults for --compile and --seeds_together (None: not given): (compile?, seeds in a step).

    A compile costs minutes and saves milliseconds a batch, so it pays only in a long run. Measured in the loop (one
    H200, CoLA's first 3,000 rows, 5 seeds; notes 2026-11-26 23:35): 5 seeds compiled as one model took 3.04 ms a
    batch of one run, after 95 s of compiling its 2 graphs (CoLA's padded widths); uncompiled, one seed took 5.2
    (BBC News) to 6.9 ms (RTE). That is ~2 ms saved a batch against ~45 s a graph, and each head shape (2 classes, 3,
    a regression) compiles up to 4 graphs, one a padded width: ~3 minutes, earned back in ~100,000 batches
    (arithmetic).

    So: compiled, with the seeds as one model, where steps are CUDA graphs (bf16), torch.compile works (not on
    Windows), torch is 2.11 or later (compiled vmap is measured there, on a GPU; older, not tried) and the run (its
    tasks, seeds and epochs) has COMPILE_PAYS batches for each of its `heads` shapes; else uncompiled, one seed after
    another. GLUE's protocol (1,483,075 batches, 3 head shapes) compiles; CoLA alone (13,375 for its 5 seeds) does
    not. Seeds as one model are refused in fp16: one loss scale for all of them."""
    compile = compile_pays(device, batches, heads) if compile is None else wants_compile(compile, device)
    if together is None:
        together = 0 if compile else 1  # 0: all the seeds that fit (seeds_at_once)
    together = min(seeds, together or seeds_at_once(device, seeds, n_params))
    if together > 1 and amp_dtype(device) == torch.float16:
        raise CramError(f"--seeds_together {together} needs bf16 (an Ampere GPU or newer): in fp16 one loss scale "
                        "would skip every seed's step when one seed's gradients overflow: use 1")
    return compile, together


class PlainAttention(torch.overrides.TorchFunctionMode):
    """Inside `with PlainAttention():`, F.scaled_dot_product_attention is computed as its definition reads: scores
    q k^T / sqrt(D) and their softmax in fp32 (as the fused kernels accumulate), the mask, dropout, times v: plain ops
    with plain vmap rules. SDPA's own forms fail under vmap: the fused kernels' rule mishandled a mask with a vmap
    dimension (pytorch#161310, fixed 2026-07; the CPU's has none, torch loops and warns), and its MATH form's softmax
    meets CUDA's autocast inside vmap and comes back fp32 where autograd recorded bf16 (backward then fails)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is not torch.nn.functional.scaled_dot_product_attention:
            return func(*args, **(kwargs or {}))
        return self.attention(*args, **(kwargs or {}))

    @staticmethod
    def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if is_causal or enable_gqa:
            raise NotImplementedError("PlainAttention computes SDPA with a mask, not is_causal or enable_gqa")
        with torch.autocast(q.device.type, enabled=False):  # scores in fp32, as the fused kernels accumulate them
            scores = (q.float() @ k.float().transpose(-2, -1)) * (q.shape[-1] ** -0.5 if scale is None else scale)
        if attn_mask is not None and attn_mask.dtype == torch.bool:  # False: not attended. A large negative, not
            scores = scores.masked_fill(~attn_mask, torch.finfo(scores.dtype).min)  # -inf: finite if all are masked
        elif attn_mask is not None:
            scores = scores + attn_mask                                             # an additive bias
        weights = torch.nn.functional.dropout(scores.softmax(-1), dropout_p)
        return weights.to(v.dtype) @ v


def compile_forward(forward):
    """torch.compile(forward) for fine-tuning (finetune_glue.py --compile), with room for a graph a head shape and
    width. Seeds trained as one model (vmap) compile a graph for each (head shape, padded width): torch's automatic
    dynamic shapes do not reach through vmap, and marking the width dynamic fails there (notes, 2026-11-26 21:00).
    GLUE's 3 head shapes (2 classes, 3, a regression) x 4 widths (32 to 128) are 12 graphs, past torch's default of 8
    recompiles a function, after which it runs the function uncompiled, silently: so the limit is at least 64."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # its older name
    setattr(config, name, max(getattr(config, name), 64))
    return torch.compile(forward)


def together(models, device):
    """S models of one architecture (a task's seeds) trained as one. stack_module_state turns them into one dict of
    (S, ...) tensors, and vmap runs the one-model forward on each slice 0..S-1, as a loop would, but in batched
    kernels: forward(ids, pad_mask) on (S, B, T) -> (S, B, n_out), dropout drawing other numbers for each model. Each
    kernel of the step is S times larger, their count the same. Returns (parameters, forward, done); done() writes
    the trained weights back into the models. One model: itself, no vmap."""
    if len(models) == 1:
        model = models[0].to(device).train()
        return list(model.parameters()), lambda ids, pad_mask: model(ids[0], pad_mask[0])[None], lambda: None
    params, buffers = torch.func.stack_module_state(models)  # {name: (S, ...)}, copies
    params = {k: v.detach().to(device).requires_grad_() for k, v in params.items()}
    buffers = {k: v.to(device) for k, v in buffers.items()}
    skeleton = copy.deepcopy(models[0]).to("meta").train()  # the structure, no data ("meta"): functional_call
    # runs its forward with the stacked weights' slices in place of its own
    one = lambda p, b, ids, pad_mask: torch.func.functional_call(skeleton, (p, b), (ids, pad_mask))  # noqa: E731
    batched = torch.func.vmap(one, randomness="different")

    def forward(ids, pad_mask):  # attention in plain ops, whose vmap rules hold on every device (PlainAttention)
        with PlainAttention():
            return batched(params, buffers, ids, pad_mask)

    def done():
        for i, model in enumerate(models):
            model.load_state_dict({k: v[i] for k, v in params.items()}, strict=False)  # the buffers never change
    return list(params.values()), forward, done


# Dense tensor-core peak FLOP/s in the precision amp_dtype picks (bf16; fp16 before Ampere), for MFU. The whole
# name of torch.cuda.get_device_name() must match: "H100 PCIe" is not an H100 SXM, "RTX A1000" no A100; else n/a.
GPU_PEAK_FLOPS = {r"NVIDIA H100 80GB HBM3|NVIDIA H100 SXM.*|NVIDIA H200": 989e12, r"NVIDIA H100 PCIe": 756e12,
                  r"NVIDIA A100[- ](SXM4|PCIE|80GB).*": 312e12, r"NVIDIA L40S": 362e12, r"NVIDIA RTX A6000": 155e12,
                  r"NVIDIA GeForce RTX 4090": 165e12, r"NVIDIA GeForce RTX 3090": 71e12, r"NVIDIA RTX A4000": 77e12,
                  r"NVIDIA A10G": 70e12, r"NVIDIA L4": 121e12, r"Tesla V100-SXM2.*": 125e12,
                  r"Tesla V100-PCIE.*": 112e12, r"Tesla T4": 65e12}


def safe_globals(*types):
    """torch.load(weights_only=True) that also accepts these (harmless) types: torch.serialization.safe_globals from
    torch 2.5; torch 2.4, the oldest requirements.txt allows, has only add_safe_globals, for the whole process."""
    if hasattr(torch.serialization, "safe_globals"):
        return torch.serialization.safe_globals(list(types))
    torch.serialization.add_safe_globals(list(types))
    return contextlib.nullcontext()


class SkipInit(TorchFunctionMode):
    """Inside it, torch.nn.init's functions leave a parameter as it is: a model built only to receive saved weights
    skips their random init (the meta device would too, but its first float arange imports sympy and dynamo: 1.2 s,
    notes). A buffer is still drawn: load_state_dict (strict) then replaces every parameter, none left unset."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        tensor = args[0] if args else (kwargs or {}).get("tensor")
        if getattr(func, "__module__", None) == "torch.nn.init" and isinstance(tensor, torch.nn.Parameter):
            return tensor
        return func(*args, **(kwargs or {}))


def finite(state):
    """state, a file's weights, if each is a plain float tensor (fp8 or complex would be cast, or fail later) and
    finite, else ValueError: a NaN (a run that diverged, a damaged file) would answer NaN silently, or stop a resumed
    run at its first step."""
    plain = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    if odd := next((name for name, w in state.items() if torch.is_tensor(w) and w.dtype not in plain), None):
        raise ValueError(f"its weight {odd} is {str(state[odd].dtype)[6:]}, not a float of 16 to 64 bits")
    if nan := next((name for name, w in state.items() if torch.is_tensor(w)
                    and not torch.isfinite(w.sum(dtype=torch.float32))  # a NaN or inf makes the sum one: 5x faster
                    and not torch.isfinite(w).all()), None):  # (else a sum past float32's range: each value)
        raise ValueError(f"its weight {nan} holds NaN or infinity, as a run that diverged leaves it")
    return state


def built_for(state, n_layer, seq_len, build):
    """build()'s model, to receive a file's weights `state` (a checkpoint, a saved classifier, a release): a file that
    is damaged, or crafted, is one line (ValueError), not a kill. Its random init is skipped (SkipInit), so weights a
    config declares cost no memory until loaded: sizes its tensors do not have are refused by load_state_dict, not
    after gigabytes of init. The position tables are computed, so seq_len, and n_layer, are held to errors.py's limits
    (100,000 blocks, or rows of 30,000 tokens, took minutes or gigabytes); each block holds a weight, so n_layer is at
    most the file's count of them too. Every weight finite (finite)."""
    if not (1 <= n_layer <= min(MOST_BLOCKS, len(state)) and 1 <= seq_len <= LONGEST_ROW):
        raise ValueError(f"it declares {n_layer} blocks (its weights: {len(state)}; at most {MOST_BLOCKS}) and rows of "
                         f"{seq_len} tokens (at most {LONGEST_ROW})")
    finite(state)
    try:
        with SkipInit():
            return build()
    except RuntimeError as e:  # a declared size past what the machine can allocate (the CPU allocator's words)
        if "allocate" not in str(e):
            raise
        raise ValueError("its config declares a model larger than this machine's memory") from None


def optimizer_state_for(optimizer, saved):
    """saved, an optimizer's state_dict, made ready for this run's optimizer. Each Adam moment must have its weight's
    size, or ValueError: load_state_dict does not check, and fused AdamW then writes past a short one (a crash with
    no message, seen on the CPU; --shard: a traceback at the first step). Each group takes this run's betas, eps and
    weight decay (the flags'; the learning rate stays the file's, the schedule sets it each step): a flag changed on
    --resume counts, and a crafted beta (5, or text) cannot reach the step."""
    if [len(g["params"]) for g in saved["param_groups"]] != [len(g["params"]) for g in optimizer.param_groups]:
        raise ValueError("loaded state dict has a different number of parameter groups or of parameters in a group")
    weights = [p for group in optimizer.param_groups for p in group["params"]]  # --shard: DTensors, their whole size
    for i, p in zip((i for group in saved["param_groups"] for i in group["params"]), weights):
        for name, value in saved["state"].get(i, {}).items():  # a scalar weight's moment: () or (1,), as saved
            if name != "step" and (not torch.is_tensor(value) or value.numel() != p.numel()
                                   or value.dim() > 1 and value.shape != p.shape):
                raise ValueError(f"the optimizer's {name} of a weight {tuple(p.shape)} is "
                                 f"{tuple(value.shape) if torch.is_tensor(value) else type(value).__name__}")
    return {**saved, "param_groups": [{**old, **{k: v for k, v in new.items() if k not in ("params", "lr")}}
                                      for old, new in zip(saved["param_groups"], optimizer.param_groups)]}


def out_of_memory(e, cfg, save, ranks, ckpt_path, step):
    """cram.py's step ran out of memory: keep the work done (--shard: the others wait in a gather; the last
    checkpoint stays), name the knob."""
    if not cfg.shard:
        save()
    where = f"saved at step {step}" if ranks.master and not cfg.shard else f"rank {ranks.rank}"
    return CramError(f"out of memory with --micro_batch {cfg.micro_batch} ({str(e).split('. Including')[0]}; "
                     f"{where}): continue {ckpt_path} with --resume --micro_batch {max(1, cfg.micro_batch // 2)} "
                     "(the batch target stays)")


def device_peak_flops(device):
    if device.type != "cuda":  # no MFU on a CPU or MPS
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for pattern, v in GPU_PEAK_FLOPS.items() if re.fullmatch(pattern, name)), None)


def run_info(device, script=None):
    """Versions, device and git commit: every log and checkpoint records where its numbers came from. script: the
    file whose code ran (code_hash)."""
    git = lambda *a: subprocess.run(["git", *a], capture_output=True, encoding="utf-8", errors="replace",  # noqa: E731
                                    timeout=5, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    try:  # "-dirty": the code that ran differs from the commit
        commit = git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain", "--", "*.py") else "")
    except (OSError, subprocess.SubprocessError):
        commit = ""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    return {"python": platform.python_version(), "torch": str(torch.__version__), "numpy": np.__version__,
            "device": f"{device.type}: {name}", "threads": torch.get_num_threads(), "git": commit or "unknown",
            "code": code_hash(script=script), "host": platform.node(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}


def code_hash(modules=("cram", "hardware", "prepare", "errors", "tokenizer", "hub"), script=None):
    """12 hex digits of a sha256 of what training runs: the script (cram.train passes its own file, an edited copy of
    cram.py too; else the one run) and the project's modules it loaded, their text with Windows' line ends as Unix's.
    plot.py tells a rerun from a run of changed code by it, and --resume notes it, git or not; the same whatever else
    the process imported (a notebook imports more) and however cram.train was called (a script of your own)."""
    main = script or getattr(sys.modules.get("__main__"), "__file__", None)  # a notebook's kernel: none
    here = os.path.normcase(os.path.dirname(os.path.realpath(__file__)))
    files = [getattr(sys.modules.get(name), "__file__", None) for name in modules]
    if isinstance(main, str) and os.path.normcase(os.path.dirname(os.path.realpath(main))) == here:
        files.append(main)
    digests = set()  # of each file's text: the order, the names and a file loaded twice do not count
    for path in {os.path.realpath(f) for f in files if isinstance(f, str) and os.path.isfile(f)}:
        with open(path, "rb") as f:
            digests.add(hashlib.sha256(f.read().replace(b"\r\n", b"\n")).hexdigest())
    return hashlib.sha256("".join(sorted(digests)).encode()).hexdigest()[:12]


# ----------------------------------------------------------------------------------------------------------------
# Several processes (torchrun): cram.py's "Scaling out" section, read last. In one process Ranks is rank 0 of 1 and
# its methods do nothing; under torchrun DDP by default, FSDP2 (ZeRO-3) with --shard, shards in CPU memory with
# --offload.

class Ranks:
    """The processes of a torchrun launch and what the loop needs of them; one process: rank 0 of 1, no-ops."""

    def __init__(self, rank=0, world=1, shard=False):
        self.rank, self.world, self.shard, self.master = rank, world, shard, rank == 0

    def wrap(self, model, device):  # DDP without --shard: gradients averaged during the step's last backward
        self.model = model
        if self.world == 1 or self.shard:
            return model
        ddp = torch.nn.parallel.DistributedDataParallel
        # no buffer to sync at each forward (pos_table, attn_bias are the same everywhere): torch 2.13's name for it,
        # forward_sync_buffers (it still syncs them once, at the start), else the older one, which 2.13 warns about
        new = "forward_sync_buffers" in inspect.signature(ddp).parameters
        no_sync = {"forward_sync_buffers": False} if new else {"broadcast_buffers": False}
        return ddp(model, device_ids=[device] if device.type == "cuda" else None, gradient_as_bucket_view=True,
                   **no_sync)  # the gradients in DDP's buckets: no second copy (with cram.clip_and_step's ddp)

    def no_sync_until(self, last, train_model):  # until the last micro-batch each rank sums its own gradients
        if self.shard:  # FSDP2's way: until then each rank holds whole gradients (4 bytes a parameter)
            self.model.set_requires_gradient_sync(last)
        return contextlib.nullcontext() if self.world == 1 or last or self.shard else train_model.no_sync()

    def mean(self, loss):  # every rank judges the mean loss: a NaN on one stops all, together
        if self.world > 1:
            torch.distributed.all_reduce(loss)
            loss /= self.world
        return loss

    def least(self, n):  # the smallest of every rank's n: a micro-batch that each GPU holds
        if self.world == 1:
            return n
        n = torch.tensor([n], device=self.device)
        torch.distributed.all_reduce(n, op=torch.distributed.ReduceOp.MIN)
        return int(n.item())

    def agree(self, train_time, stopping):  # the slowest rank's clock (lr, batch, evaluations, the end), any signal
        if self.world == 1:
            return train_time, stopping
        both = torch.tensor([train_time, float(stopping)], dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(both, op=torch.distributed.ReduceOp.MAX)
        return both.tolist()

    def wait(self):
        if self.world > 1:
            torch.distributed.barrier()

    def finish(self):
        self.wait()
        if self.world > 1:
            torch.distributed.destroy_process_group()


def start_processes(device, cfg):
    """(Ranks, device): torchrun sets RANK and WORLD_SIZE; each process takes its GPU and joins the group. First the
    settings that only several processes need, each refused in one line."""
    ranks = Ranks(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), cfg.shard)
    rules = [
        (not cfg.offload or cfg.shard and device.type == "cuda",
         "--offload moves the GPU shards of --shard to CPU memory: it needs --shard and a CUDA device"),
        (not cfg.shard or ranks.world > 1, "--shard splits the training state over the processes of torchrun: "
         "launch `torchrun --nproc_per_node N cram.py --shard ...` (N >= 2), or drop --shard"),
        (not cfg.shard or fsdp2(), f"--shard needs torch >= 2.6 (FSDP2's fully_shard); this is torch "
         f"{torch.__version__}: upgrade it (pip install -U torch), or drop --shard"),
        (cfg.micro_batch * ranks.world <= cfg.batch_size, f"--micro_batch {cfg.micro_batch} on {ranks.world} devices "
         f"is {cfg.micro_batch * ranks.world} sequences a step, more than --batch_size {cfg.batch_size}: lower "
         "--micro_batch (the ramp needs several)"),
    ]
    if message := next((message for ok, message in rules if not ok), None):
        raise CramError(message)
    if ranks.world > 1:
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(device)
        torch.distributed.init_process_group(backend=dist_backend(device, cfg.offload),
                                             device_id=device if device.type == "cuda" else None,
                                             timeout=datetime.timedelta(minutes=30))  # a checkpoint to slow disks
    ranks.device = device
    return ranks, device


def fsdp2():
    """FSDP2 (torch >= 2.6): fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy, OffloadPolicy; None before it."""
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
    except ImportError:
        return None
    return fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy, OffloadPolicy


def shard_policy(device):
    """On CUDA each block's weights are gathered in the autocast dtype (bf16; fp16 before Ampere) and the gradients
    reduced in fp32 into the fp32 shards AdamW updates. Autocast stays on: its casts of the gathered weights are now
    no-ops, and it still runs softmax, LayerNorm and the loss in fp32. The blocks' inputs are not cast: the residual
    stream stays as CrammedBERT.encode leaves it (bf16 under autocast). fp32 throughout on the CPU."""
    dtype, policy = amp_dtype(device), fsdp2()[1]
    return policy(param_dtype=dtype, reduce_dtype=torch.float32, cast_forward_inputs=False) if dtype else policy()


def shard_model(model, device, world, offload):
    """FSDP2, in place: each block's weights gathered just before it runs, then the rest's (embeddings, norm)."""
    fully_shard, _, CPUOffloadPolicy, OffloadPolicy = fsdp2()
    model.embed.pos_scale = torch.nn.Parameter(model.embed.pos_scale.detach().reshape(1))  # it shards no 0-dim tensor
    mesh = torch.distributed.init_device_mesh(device.type, (world,))
    for module in [*model.blocks, model]:  # --offload: the shards in CPU memory, Adam's step there too
        fully_shard(module, mesh=mesh, mp_policy=shard_policy(device),
                    offload_policy=CPUOffloadPolicy() if offload else OffloadPolicy())
