"""For the project's developers, on a lent GPU (.ci/gpu_lease probes): bench.py's training step with one change that
might raise MFU, each variant in a process (and a compile) of its own, timed beside the unchanged base the same way.
A variant becomes the project's code only once a GPU has measured that it pays (docs/notes.md).

    python .ci/mfu_probe.py VARIANT [bench.py's flags]    # VARIANT: base, autotune, qkv3, math_attention, tuned

- base: cram.py as it is.
- autotune: inductor's max-autotune for the matmuls (as `torch.compile(mode="max-autotune-no-cudagraphs")`): each
  GEMM shape timed among cuBLAS and Triton's templates, and a Triton GEMM can take the pointwise work after it into
  its own kernel (the GLU's `gelu(gate) * x` after the gate's matmul, the residual add after `out` and `down`):
  fewer passes over memory, the kernels outside the matmuls being ~25% of the step (notes, 2026-11-26). A compile of
  minutes. The same function, to the rounding of another GEMM's order of sums.
- qkv3: q, k and v from three matmuls (the GLU's up-projection split in two paid +7%, notes 2026-11-26): each is a
  view of its own (B, T, C) output, so the backward needs no copy of their three gradients into one (B, T, 3C)
  tensor (`add_clone_permute_select_backward`: 3.1% of the step on an H100, 2026-11-27). The same function.
- math_attention: SDPA's math path, not cuDNN's flash kernel (attention 9.3% of the step on an H100, 2026-11-27): at
  128 tokens a head's scores are 128 x 128, small enough that plain batched matmuls and a softmax inductor fuses
  may beat a kernel made for long sequences. SDPA's own reference path: the same function, to rounding.
- tuned: inductor's coordinate descent tuning of its own kernels (the GLU's backward, the LayerNorms: a quarter of
  the step), a longer compile. The same code.
"""
import sys
from pathlib import Path

import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench  # noqa: E402
import cram  # noqa: E402


def qkv_as_three_matmuls(self, x, attn_mask=None):                                # x (B, T, C)
    B, T, C = x.shape
    q, k, v = [F.linear(x, w).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, H, T, D) each
               for w in self.qkv.weight.chunk(3)]  # the rows of q, k, v: as the fused view(B, T, 3, H, D) splits them
    return self.attend(q, k, v, attn_mask)


def tune():
    import torch._inductor.config as inductor
    inductor.coordinate_descent_tuning = True


def autotune():
    import torch._inductor.config as inductor
    inductor.max_autotune = True  # a key torch does not know raises here, on the CPU too (the test runs each variant)


def math_attention():
    import torch
    for kernel in ("flash", "mem_efficient", "cudnn"):  # what SDPA may pick on a GPU; left: the math path
        getattr(torch.backends.cuda, f"enable_{kernel}_sdp")(False)


VARIANTS = {"base": lambda: None, "qkv3": lambda: setattr(cram.Attention, "forward", qkv_as_three_matmuls),
            "tuned": tune, "autotune": autotune, "math_attention": math_attention}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in VARIANTS:
        sys.exit(f"usage: python .ci/mfu_probe.py {{{','.join(VARIANTS)}}} [bench.py's flags]")
    VARIANTS[sys.argv[1]]()
    print(f"variant: {sys.argv[1]}", flush=True)
    bench.main(sys.argv[2:])
