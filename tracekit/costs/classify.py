"""What a kernel is, from its name alone: so that a kernel without an op that has shapes
still lands in the right block, even though its cost stays unknown."""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pandas as pd

from tracekit.common.text_match import first_matches, shared_search
from tracekit.trace.column_text import category_text

# Work per name is bounded: only a name's first MAX_MATCHED_CHARS characters are classified.
# The patterns below are stdlib regexes, some with `.*`, whose time can grow with the
# square of the text; real kernel names (templates included) run to a few kB, and what
# identifies a kernel (its function and first template arguments) comes first.
MAX_MATCHED_CHARS = 4096

# Checked in order; the first match wins (an attention kernel may contain "gemm").
_RULES: list[tuple[str, re.Pattern]] = [
    # DeepEP's dispatch / combine and pplx all-to-all kernels move tokens between GPUs: collectives.
    ("collective", re.compile(r"nccl|rccl|multimem|all_?reduce|allgather|all_gather|reduce_?scatter|alltoall|all2all|sendrecv|"
                              r"cross_device_reduce|custom_ar|deep_?ep|internode(_ll)?::|intranode::|nvshmem|pplx", re.I)),
    # Mixture-of-experts routing: top-k gating, token sorting / alignment per expert, and the
    # scatter / combine of expert outputs (vLLM csrc/moe, triton_kernels routing and
    # matmul_ogs_details, TRT-LLM routing kernels). Block ffn, class routing.
    ("routing", re.compile(r"topkGating|moeSoftmax|moeTopK|moe_align_block_size|count_and_sort_expert_tokens|moe_sum_kernel|"
                           r"grouped_topk|noaux_tc|(^|[^\w])_(combined_)?routing_|_expt_data_|_filter_expt_data|_topk_forward|"
                           r"_sum_bitmatrix_rows|_finalize_matmul|_reduce_grouped|^routing(Main|Indices)\w*Kernel", re.I)),
    # The second pass of split-KV attention merges the partial results of the KV segments:
    # vLLM's and aiter's triton unified attention (`kernel_unified_attention_3d` then
    # `reduce_segments`), FlashInfer's cascade merge kernels (`MergeStatesKernel`, ...).
    ("attention", re.compile(r"flash|fmha|attn|attention|paged|mha_|sdpa|fused_multi_head|xformers|"
                             r"^reduce_segments$|MergeStates?(InPlace)?Kernel", re.I)),
    # torch.compile (Inductor) names a fused kernel after its origin ops, sorted: an RMSNorm
    # decomposes to pow, mean, rsqrt, mul (`triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0`,
    # with the residual add and a bias add of the GEMM before it), a LayerNorm to var_mean and
    # rsqrt (`..._add_rsqrt_sub_var_mean_0`). The fused kernel is the norm; the GEMM itself
    # runs as its own (extern) kernel. After attention: a fused kernel whose origins include
    # the attention op (`..._fmha_v3_fwd_mean_mul_neg_pow_rsqrt_...`) is the attention's prologue.
    ("norm", re.compile(r"^triton_(red|per)_fused_(?=\w*_rsqrt)(?=\w*mean)", re.I)),
    # MoE grouped GEMMs first by name (vLLM's Triton fused_moe_kernel, Marlin MoE), then every GEMM.
    ("gemm", re.compile(r"(^|[^\w])fused_moe_kernel|marlin|m_grouped|MGrouped|GroupProblemShape|"
                        r"gemm|cutlass|nvjet|xmma|cublas|Cijk_|wgmma|matmul|_mm_|sm\d+_.*tensorop|ampere_.*_tn|hgemm|sgemm|bmm|igemm|conv|implicit_convolve|cudnn::.*conv|winograd|dgrad|wgrad|fprop", re.I)),
    ("norm", re.compile(r"layer_?norm|rms_?norm|batch_?norm|group_?norm|bn_fw|bn_bw|instance_?norm", re.I)),
    ("softmax", re.compile(r"softmax", re.I)),
    ("reduction", re.compile(r"reduce|sum_kernel|argmax|argmin|cumsum|scan|topk|sort", re.I)),
    ("copy", re.compile(r"^Memcpy|^Memset|copy|cat_|CatArray|fill|transpose|permute|index|gather|scatter|embedding", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|pointwise|triton_poi|Functor|activation|silu|gelu|relu", re.I)),
    ("triton", re.compile(r"^triton_|triton", re.I)),
]


def without_parameters(name: str) -> str:
    """The kernel's name and template arguments, without its parameter list: parameter
    types (`flashinfer::QuantizationSFLayout`, `cudnnTensorStruct`) say nothing of what it does."""
    text = name.replace("(anonymous namespace)", "anonymous_namespace")
    # The template depth at a bracket is the '<' before it less the '>' before it: counted
    # in C for the first few brackets (a Python walk over the characters was 40 µs a name).
    i, tries = text.find("(", 1), 0
    while i >= 0 and tries < 8:
        if text.count("<", 0, i) == text.count(">", 0, i):
            return text[:i]
        i, tries = text.find("(", i + 1), tries + 1
    if i < 0:
        return text
    depth = 0
    for m in _BRACKETS.finditer(text):  # many brackets inside templates: one walk over the brackets
        ch, i = m.group(), m.start()
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0 and i > 0:
            return text[:i]
    return text


_BRACKETS = re.compile(r"[<>(]")


# Kernels that convolution / GEMM libraries launch around the computation: layout
# transforms, tensor scaling and workspace fills. They move data; they compute nothing of the op.
AUXILIARY = re.compile(r"transpose|nchwToNhwc|nhwcToNchw|NCHW2|2NCHW|NHWC2|2NHWC|SubTensorOp|scalePackedTensor|"
                       r"fill|zero_|Memset|copy|permute", re.I)


# Setup kernels a GEMM library launches before a grouped GEMM: they write the per-group
# pointer and shape arrays the GEMM reads (ATen's prepare_grouped_gemm_data). Named "gemm",
# they compute nothing of it.
GEMM_SETUP = re.compile(r"prepare_grouped_gemm_data|prepare_grouped_mm|grouped_gemm_setup", re.I)


def is_auxiliary_name(name: str) -> bool:
    """A layout / workspace / setup kernel. A GEMM kernel is never one, whatever its
    template arguments spell: a mangled CUTLASS name carries them inline (`...Copy_Atom...`,
    cuDNN's `...PermuteLayout...`), and it is the kernel that does the op's work."""
    base = without_parameters(name[:MAX_MATCHED_CHARS])
    if GEMM_SETUP.search(base):
        return True
    return bool(AUXILIARY.search(base)) and classify_name(name) != "gemm"


def is_auxiliary(names: pd.Series) -> np.ndarray:
    """Per kernel: is it a layout / workspace / setup kernel (matched once per distinct name)."""
    cat = names.astype("category")
    bases = _bases(cat.cat.categories)
    search = shared_search(bases)  # (one Arrow array of the names for both patterns, and classify's)
    aux = search.searches(AUXILIARY)
    for i in np.flatnonzero(aux):  # a GEMM kernel is never a layout one (few names get here)
        aux[i] = classify_name(bases[i]) != "gemm"
    flags = np.r_[aux | search.searches(GEMM_SETUP), False]
    return flags[cat.cat.codes.to_numpy()]


def _bases(categories) -> list[str]:
    return list(_bases_of(tuple(category_text(categories))))


@lru_cache(maxsize=4)  # classify and is_auxiliary ask for the same trace's names, one after the other
def _bases_of(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(without_parameters(n[:MAX_MATCHED_CHARS]) for n in names)


def classify_name(name: str) -> str:
    base = without_parameters(name[:MAX_MATCHED_CHARS])
    for label, pattern in _RULES:
        if pattern.search(base):
            return label
    return "other"


def classify(names: pd.Series) -> pd.Categorical:
    """Class of every kernel name; each distinct name is matched once."""
    cat = names.astype("category")
    rule = first_matches(_bases(cat.cat.categories), [pattern for _, pattern in _RULES])  # as classify_name, all names at once
    labels = np.array([label for label, _ in _RULES] + ["other"], dtype=object)[np.r_[rule, -1]]
    return pd.Categorical(labels[cat.cat.codes.to_numpy()])
