"""Stored weight formats of quantised checkpoints, and which modules each one covers.

A matrix of N output rows and K inputs stored in a format costs (WeightFormat.matrix_bytes)

    N·K·value + N·ceil(K/group)·group_bytes + ceil(N/bn)·ceil(K/bk)·block_bytes
      + N·row_bytes + K·col_bytes + tensor_bytes

Formats, as the engines' loaders create their tensors (vLLM create_weights):
- NVFP4 (ModelOpt `quant_algo: NVFP4`, compressed-tensors `nvfp4-pack-quantized`): two 4-bit
  values per byte, one FP8 (E4M3) scale per 16 along K, and two fp32 per tensor (global
  weight scale, input scale): 0.5 + 1/16 = 0.5625 B per weight + 8 B per matrix.
- MXFP4 (gpt-oss `quant_method: mxfp4`): 4-bit values, one E8M0 (1 B) scale per 32: 0.53125 B.
- FP8 per tensor: 1 B + one fp32 scale per matrix (+ the input scale when activations are
  static); block (`weight_block_size` [bn, bk], DeepSeek-V3): one fp32 scale per block.
- compressed-tensors `config_groups`: per group of target modules, the weights' num_bits,
  type, strategy (tensor, channel, group, block, tensor_group) and symmetry; scales in the
  model dtype (FP8 E4M3 for NVFP4's groups), packed zero points when asymmetric, an int32
  g_idx per input column with `actorder: group`.
- GPTQ (`bits`, `group_size`, -1: one group over K): packed values, an fp16 scale and a packed
  zero point per group and output column, and an int32 g_idx per input column.
- AWQ: packed values, an fp16 scale and (with `zero_point`) a packed zero per group.
- bitsandbytes: NF4/FP4 with an fp32 absmax per 64 (8-bit absmax + fp32 per 256 blocks with
  double quantisation); LLM.int8 with one fp32 scale per row.
The modules a config leaves unquantised (`modules_to_not_convert`, `ignore`,
`exclude_modules`, `ignored_layers`) are matched per layer by name: `re:` regular expressions
(RE2), `*` wildcards, or dotted names.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from tracekit.errors import TraceError
from tracekit.model.validate import MAX_SIZE, Fields

MAX_PATTERNS = 2000  # wildcard / regex entries of one list (exact names are looked up, not matched)


@dataclass(frozen=True)
class WeightFormat:
    dtype: str  # as stored: bf16, fp8, mxfp4, nvfp4, int4, ...
    value_bytes: float  # per stored weight
    group: int = 0  # weights per scale along the input dimension K (0: none)
    group_bytes: float = 0.0  # per group and output row: scale (+ packed zero point)
    block: tuple[int, int] | None = None  # (rows, columns) per block scale
    block_bytes: float = 0.0
    row_bytes: float = 0.0  # per output row (per-channel scale)
    col_bytes: float = 0.0  # per input column (GPTQ / act-order g_idx)
    tensor_bytes: float = 0.0  # per matrix (per-tensor and global scales)
    words: str = ""  # how it was read, for the architecture line

    @property
    def bytes_per_param(self) -> float:
        """Per weight of a large matrix: values plus group and block scales (row, column and
        tensor constants left out)."""
        extra = self.group_bytes / self.group if self.group else 0.0
        if self.block:
            extra += self.block_bytes / (self.block[0] * self.block[1])
        return self.value_bytes + extra

    @property
    def compute_dtype(self) -> str | None:
        """The matrix unit's dtype when the format computes natively (fp8); None: activations' dtype."""
        return "fp8" if self.dtype == "fp8" else None

    def matrix_bytes(self, n: float, k: float) -> float:
        """Bytes of one stored [n, k] matrix (n output rows, k inputs), scales included."""
        total = n * k * self.value_bytes + n * self.row_bytes + k * self.col_bytes + self.tensor_bytes
        if self.group:
            total += n * math.ceil(k / self.group - 1e-9) * self.group_bytes
        if self.block:
            total += math.ceil(n / self.block[0] - 1e-9) * math.ceil(k / self.block[1] - 1e-9) * self.block_bytes
        return total

    def matrices_bytes(self, shapes) -> float:
        return sum(self.matrix_bytes(n, k) for n, k in shapes)


_PLAIN = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}


def named_format(name: str, act: str) -> WeightFormat:
    """--weight-dtype NAME (and the activations' own dtype)."""
    if name in _PLAIN:
        return WeightFormat(name, _PLAIN[name])
    scale = _PLAIN.get(act, 2.0)
    return {
        "fp8": WeightFormat("fp8", 1.0, tensor_bytes=4.0, words="fp8 (per-tensor fp32 scale)"),
        "int8": WeightFormat("int8", 1.0, row_bytes=scale, words="int8 (per-channel scale)"),
        "int4": WeightFormat("int4", 0.5, group=128, group_bytes=scale, words="int4 (one scale per 128)"),
        "mxfp4": WeightFormat("mxfp4", 0.5, group=32, group_bytes=1.0, words="mxfp4 (E8M0 scale per 32)"),
        "nvfp4": WeightFormat("nvfp4", 0.5, group=16, group_bytes=1.0, tensor_bytes=8.0,
                              words="nvfp4 (FP8 scale per 16, fp32 global and input scales)"),
    }[name]


# headline bytes per weight of each --weight-dtype, scales included
WEIGHT_BYTES = {name: named_format(name, "bf16").bytes_per_param for name in ("fp32", "bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4")}
# bytes per cached key or value element (--kv-dtype); nvfp4: 4-bit values + FP8 scale per 16
KV_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0, "nvfp4": 0.5625}

# Per module kind: the representative module names, after each layer prefix
_MODULES = {
    "attention": ("self_attn.q_proj", "mixer.q_proj", "attention.q_proj"),
    "linear_attention": ("linear_attn.in_proj_qkv", "linear_attn.in_proj_qkvz"),
    "mamba": ("mixer.in_proj", "mamba.in_proj"),
    "ffn": ("mlp.down_proj", "feed_forward.down_proj", "mixer.down_proj", "mlp.fc2"),
    "experts": ("mlp.experts.0.down_proj", "block_sparse_moe.experts.0.w2", "feed_forward.experts.0.down_proj", "mixer.experts.0.down_proj"),
    "shared_experts": ("mlp.shared_expert.down_proj", "mlp.shared_experts.down_proj", "mixer.shared_experts.down_proj"),
}
_PREFIXES = ("model.layers.{}", "model.language_model.layers.{}", "backbone.layers.{}", "language_model.model.layers.{}", "model.model.layers.{}")


class Names:
    """A list of module names from a config: `re:` regexes (RE2, matched at the start),
    `*` wildcards, or dotted names (a name matches any run of whole dotted components)."""

    def __init__(self, fields: Fields, key: str, entries: list[str]):
        self.exact: set[str] = set()
        self.patterns = []
        for i, entry in enumerate(entries):
            if entry.startswith("re:") or "*" in entry:
                if len(self.patterns) >= MAX_PATTERNS:
                    raise fields.fail(key, f"has more than {MAX_PATTERNS:,} patterns")
                self.patterns.append(self._compile(fields, f"{key}[{i}]", entry))
            else:
                self.exact.add(entry)

    @staticmethod
    def _compile(fields: Fields, key: str, entry: str):
        if entry.startswith("re:"):
            from tracekit.attribution.rules import compile_pattern  # RE2: linear time, no backtracking

            try:
                return compile_pattern(f"^(?:{entry[3:]})")
            except Exception as exc:  # re2.error
                raise fields.fail(key, f"is not a regular expression RE2 accepts ({exc})") from None
        return re.compile("^" + ".*".join(re.escape(part) for part in entry.split("*")) + r"(\..*)?$")

    def __bool__(self) -> bool:
        return bool(self.exact or self.patterns)

    def match(self, name: str) -> bool:
        if self.exact:
            parts = name.split(".")
            for i in range(len(parts)):
                for j in range(i + 1, len(parts) + 1):
                    if ".".join(parts[i:j]) in self.exact:
                        return True
        return any(p.search(name) for p in self.patterns)


@dataclass
class Quantisation:
    """The stored format of each (module kind, layer): `default`, or a compressed-tensors
    group's, or plain (`plain`) where the config keeps the module unquantised."""

    plain: WeightFormat
    default: WeightFormat
    method: str
    kept: Names | None = None
    groups: list = field(default_factory=list)  # compressed-tensors: (targets Names or None for "Linear", format)
    layers: int = 0
    _cache: dict = field(default_factory=dict)

    def _names(self, module: str, layer: int) -> list[str]:
        return [f"{p.format(layer)}.{m}" for p in _PREFIXES for m in _MODULES[module]]

    def format(self, module: str, layer: int) -> WeightFormat:
        key = (module, layer)
        if key not in self._cache:
            names = self._names(module, layer)
            if self.kept and any(self.kept.match(n) for n in names):
                fmt = self.plain
            elif self.groups:
                fmt = next((f for targets, f in self.groups if targets is not None and any(targets.match(n) for n in names)),
                           next((f for targets, f in self.groups if targets is None), self.plain))
            else:
                fmt = self.default
            self._cache[key] = fmt
        return self._cache[key]

    def describe(self, uses) -> str:
        """`uses`: the (module kind, layer) pairs the model has. One clause per stored format."""
        by_format: dict[str, dict[str, int]] = {}
        for module, layer in uses:
            f = self.format(module, layer)
            modules = by_format.setdefault(f.words or f.dtype, {})
            modules[module] = modules.get(module, 0) + 1
        if list(by_format) in ([], [self.plain.dtype]):
            return f"weights {self.plain.dtype}"
        clauses = [f"{words}: " + ", ".join(f"{m.replace('_', ' ')} ({n} layers)" for m, n in modules.items())
                   for words, modules in by_format.items()]
        return f"weights ({self.method}) " + "; ".join(clauses) + f"; embeddings, router and lm_head {self.plain.dtype}"


def quantisation(c: Fields, top: Fields, act: str, override: str | None, layers: int, mixers) -> Quantisation:
    plain = named_format(act, act)
    q = top.obj("quantization_config") or c.obj("quantization_config")
    if q is not None and q.obj("quantization") is not None:  # ModelOpt's legacy hf_quant_config.json layout
        q = q.obj("quantization")
    kept = _kept(q) if q is not None else None
    if override:
        return Quantisation(plain, named_format(override, act), f"--weight-dtype {override}", kept, layers=layers)
    if q is None:
        return Quantisation(plain, plain, act, None, layers=layers)
    method = (q.text("quant_method", default="") or "").lower()
    if method.startswith("modelopt") or q.has("quant_algo"):
        return Quantisation(plain, _modelopt(q), "ModelOpt", kept, layers=layers)
    if method == "mxfp4":
        return Quantisation(plain, named_format("mxfp4", act), "mxfp4", kept, layers=layers)
    if method in ("fp8", "fbgemm_fp8"):
        return Quantisation(plain, _fp8(q, method), method, kept, layers=layers)
    if method == "compressed-tensors":
        return _compressed_tensors(q, plain, act, kept, layers)
    if method in ("gptq", "awq", "gptq_marlin", "awq_marlin") or (not method and q.has("bits")):
        return Quantisation(plain, _gptq_awq(q, method), method or "gptq", kept, layers=layers)
    if method == "bitsandbytes":
        return Quantisation(plain, _bitsandbytes(q), method, kept, layers=layers)
    raise TraceError(q.path, f"quantization method {method or '(none named)'!r} is not known; pass --weight-dtype "
                             f"({', '.join(WEIGHT_BYTES)})")


def _kept(q: Fields) -> Names | None:
    for key in ("modules_to_not_convert", "ignore", "exclude_modules", "ignored_layers"):
        entries = q.items(key)
        if entries:
            return Names(q, key, entries)
    return None


def _modelopt(q: Fields) -> WeightFormat:
    algo = (q.text("quant_algo", default="") or "").upper()
    if algo in ("NVFP4", "W4A16_NVFP4"):
        group = q.int("group_size", hi=MAX_SIZE, default=16)
        return WeightFormat("nvfp4", 0.5, group=group, group_bytes=1.0, tensor_bytes=8.0,
                            words=f"nvfp4 (FP8 scale per {group}, fp32 global and input scales)")
    if algo == "FP8":
        return WeightFormat("fp8", 1.0, tensor_bytes=8.0, words="fp8 (fp32 weight and input scales per tensor)")
    if algo == "FP8_PER_CHANNEL_PER_TOKEN":
        return WeightFormat("fp8", 1.0, row_bytes=4.0, words="fp8 (fp32 scale per channel)")
    if algo == "FP8_PB_WO":
        return WeightFormat("fp8", 1.0, block=(128, 128), block_bytes=4.0, words="fp8 (fp32 scale per 128x128 block)")
    if algo == "MXFP8":
        return WeightFormat("mxfp8", 1.0, group=32, group_bytes=1.0, words="mxfp8 (E8M0 scale per 32)")
    raise TraceError(q.path, f"model config `{q.prefix}quant_algo` {algo[:40]!r} is not known; pass --weight-dtype")


def _fp8(q: Fields, method: str) -> WeightFormat:
    if q.has("weight_block_size"):
        block = q.items("weight_block_size", kind=int)
        if len(block) != 2 or not all(1 <= b <= MAX_SIZE for b in block):
            raise q.fail("weight_block_size", f"must be two whole numbers from 1 to {MAX_SIZE:,} (rows, columns), not {block[:4]}")
        return WeightFormat("fp8", 1.0, block=(block[0], block[1]), block_bytes=4.0,
                            words=f"fp8 (fp32 scale per {block[0]}x{block[1]} block)")
    if method == "fbgemm_fp8":
        return WeightFormat("fp8", 1.0, row_bytes=4.0, words="fp8 (fp32 scale per channel)")
    static = (q.text("activation_scheme", default="dynamic") or "").lower() == "static"
    return WeightFormat("fp8", 1.0, tensor_bytes=8.0 if static else 4.0, words="fp8 (fp32 scale per tensor)")


def _compressed_tensors(q: Fields, plain: WeightFormat, act: str, kept: Names | None, layers: int) -> Quantisation:
    groups_obj = q.obj("config_groups")
    if groups_obj is None:
        raise q.fail("config_groups", "is missing: compressed-tensors names its schemes there")
    fmt_name = (q.text("format", default="") or "").lower()
    groups = []
    for i, name in enumerate(groups_obj.data):
        if i >= 1000:
            raise q.fail("config_groups", "has more than 1,000 groups")
        g = groups_obj.obj(name)
        targets = g.items("targets")
        w = g.obj("weights")
        fmt = plain if w is None else _ct_weights(w, (g.text("format", default="") or fmt_name).lower(), act)
        named = [t for t in targets if t != "Linear"]
        if "Linear" in targets or not targets:
            groups.append((None, fmt))
        if named:
            groups.insert(0, (Names(g, "targets", named), fmt))
    if not groups:
        raise q.fail("config_groups", "is empty")
    default = next((f for t, f in groups if t is None), groups[0][1])
    return Quantisation(plain, default, "compressed-tensors", kept, groups=groups, layers=layers)


def _ct_weights(w: Fields, fmt_name: str, act: str) -> WeightFormat:
    bits = w.int("num_bits", hi=16, default=8)
    kind = (w.text("type", default="int") or "int").lower()
    if kind not in ("int", "float"):
        raise w.fail("type", f"must be \"int\" or \"float\", not {kind[:20]!r}")
    group = w.int("group_size", hi=MAX_SIZE, default=None, allow=(-1,))
    strategy = (w.text("strategy", default="") or "").lower() or ("group" if group and group > 0 else "channel" if group == -1 else "tensor")
    scale = _PLAIN.get(act, 2.0)
    if kind == "float" and bits == 4:
        g = group if group and group > 0 else 16
        if "mxfp4" in fmt_name or g == 32:
            return WeightFormat("mxfp4", 0.5, group=g, group_bytes=1.0, words=f"mxfp4 (E8M0 scale per {g})")
        return WeightFormat("nvfp4", 0.5, group=g, group_bytes=1.0, tensor_bytes=8.0,
                            words=f"nvfp4 (FP8 scale per {g}, fp32 global and input scales)")
    value = bits / 8
    zero = 0.0 if w.flag("symmetric", True) else bits / 8
    dtype = ("fp" if kind == "float" else "int") + str(bits)
    actorder = w.data.get("actorder")
    col = 4.0 if actorder in ("group", True, "dynamic") else 0.0
    if strategy == "group" or strategy == "tensor_group":
        g = group if group and group > 0 else 128
        return WeightFormat(dtype, value, group=g, group_bytes=scale + zero, col_bytes=col,
                            tensor_bytes=4.0 if strategy == "tensor_group" else 0.0, words=f"{dtype} (scale per {g})")
    if strategy == "block":
        block = w.items("block_structure", kind=int)
        if len(block) != 2 or not all(1 <= b <= MAX_SIZE for b in block):
            raise w.fail("block_structure", f"must be two whole numbers from 1 to {MAX_SIZE:,}, not {block[:4]}")
        return WeightFormat(dtype, value, block=(block[0], block[1]), block_bytes=scale + zero, words=f"{dtype} (scale per {block[0]}x{block[1]} block)")
    if strategy == "channel":
        return WeightFormat(dtype, value, row_bytes=scale + zero, col_bytes=col, words=f"{dtype} (scale per channel)")
    return WeightFormat(dtype, value, tensor_bytes=scale + zero, words=f"{dtype} (scale per tensor)")


def _gptq_awq(q: Fields, method: str) -> WeightFormat:
    bits = q.int("bits", "w_bit", hi=16)
    group = q.int("group_size", "q_group_size", hi=MAX_SIZE, default=128, allow=(-1,))
    value = bits / 8
    if method.startswith("awq"):
        zero = bits / 8 if q.flag("zero_point", True) else 0.0
        extra = dict(group=group, group_bytes=2.0 + zero) if group > 0 else dict(row_bytes=2.0 + zero)
        return WeightFormat(f"int{bits}", value, **extra, words=f"int{bits} AWQ (fp16 scale{' + zero' if zero else ''} per {group if group > 0 else 'row'})")
    # GPTQ stores qzeros even when symmetric, and g_idx (int32 per input column)
    extra = dict(group=group, group_bytes=2.0 + bits / 8) if group > 0 else dict(row_bytes=2.0 + bits / 8)
    return WeightFormat(f"int{bits}", value, **extra, col_bytes=4.0,
                        words=f"int{bits} GPTQ (fp16 scale + zero per {group if group > 0 else 'row'}, g_idx)")


def _bitsandbytes(q: Fields) -> WeightFormat:
    if q.flag("load_in_4bit"):
        if q.flag("bnb_4bit_use_double_quant"):
            return WeightFormat("int4", 0.5, group=64, group_bytes=1.0 + 4.0 / 256, words="nf4 (8-bit absmax per 64, fp32 per 256 blocks)")
        return WeightFormat("int4", 0.5, group=64, group_bytes=4.0, words="nf4 (fp32 absmax per 64)")
    return WeightFormat("int8", 1.0, row_bytes=4.0, words="int8 LLM.int8 (fp32 scale per row)")


def kv_dtype_from(q: Fields) -> str | None:
    """The KV-cache format a checkpoint's quantisation config names, if any."""
    inner = q.obj("quantization") or q
    algo = (inner.text("kv_cache_quant_algo", default="") or "").upper()
    if algo in ("FP8", "NVFP4"):
        return algo.lower()
    scheme = q.obj("kv_cache_scheme")
    if scheme is not None:
        bits = scheme.int("num_bits", hi=16, default=8)
        kind = (scheme.text("type", default="float") or "float").lower()
        if bits == 8:
            return "fp8"
        if bits == 4 and kind == "float":
            return "nvfp4"
    return None
