"""A short label per kernel that still tells apart the kernels of one template:

    label(name)      `elementwise_kernel<128, 2, MulFunctor>`: the kernel, its numbers and what
                     its arguments do, at most MAX_LABEL characters
    labels(names)    {name: short label}: where two names share a label, a more detailed one,
                     then a numbered one
    trace_labels(names)  the labels of all of one trace's kernel names: what every report shows

Labels are built from the readable name (tracekit.trace.readable_names: demangled, without
return type and parameters).
"""

from __future__ import annotations

import re
from functools import lru_cache

from tracekit.common.format import cut
from tracekit.common.text_match import arrow_pays, arrow_text
from tracekit.trace.cpp_text import base_and_args, drop_scope_params, last_name, outside_templates, split_scope, split_template_args
from tracekit.trace.readable_names import MAX_CHARS, readable

_SCALARS = {"float", "double", "half", "int", "long", "short", "char", "bool", "unsigned", "signed", "void",
            "Half", "BFloat16", "__half", "__nv_bfloat16", "__hip_bfloat16", "bfloat16_t", "float16_t", "OpaqueType",
            "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "size_t",
            "Float8_e4m3fn", "Float8_e5m2", "__nv_fp8_e4m3", "__nv_fp8_e5m2", "ComplexFloat", "ComplexHalf"}
# Launch plumbing of torch's elementwise kernels: the same in every instantiation.
_PLUMBING = {"Array", "TrivialOffsetCalculator", "OffsetCalculator", "LoadWithCast", "StoreWithCast", "LoadWithoutCast",
             "StoreWithoutCast", "decltype"}
# Kernels that are a generic launcher of the type they are instantiated with.
_WRAPPERS = {"Kernel", "Kernel2", "kernel", "device_kernel", "GenericKernel"}


def _clean_type(arg: str) -> str:
    arg = _QUALIFIERS.sub("", arg)
    arg = _LEADING_VOID.sub("", arg)
    return drop_scope_params(arg.replace("&", "").replace("*", "")).strip()


def _is_scalar(name: str) -> bool:
    return name in _SCALARS or bool(_INTEGER_TYPE.fullmatch(name))


# Compiled once: these run per template argument of every distinct kernel name.
_QUALIFIERS = re.compile(r"\b(const|volatile|struct|class|enum|typename)\b")
_LEADING_VOID = re.compile(r"^\s*void\s+")
_LAMBDA = re.compile(r"λ\d+")
_INNERMOST_TEMPLATE = re.compile(r"<[^<>]*>")
_INTEGER_TYPE = re.compile(r"(?:unsigned |signed )?(?:char|short|int|long|long long)(?: int)?")
_LITERAL = re.compile(r"-?\d+[uUlL]*|true|false")


@lru_cache(maxsize=65536)  # pure; a label asks for the same arguments' leaves again and again (nested wrappers)
def _leaf(arg: str, detail: int) -> str | None:
    """What a template argument says about the kernel: a number, a dtype, or the most
    specific name inside it (the functor inside `BinaryFunctor<float, ..., MulFunctor<float>>`,
    the function around a lambda); with detail >= 1 also that name's own arguments and its
    lambda numbers. None for plumbing (std::array<char*, 3>)."""
    arg = _clean_type(arg)
    if not arg:
        return None
    if _LITERAL.fullmatch(arg):
        return arg
    base, args = base_and_args(arg)
    if base.startswith("std::") and base not in ("std::bfloat16_t", "std::float16_t"):
        return None
    name = last_name(base)
    if name in _PLUMBING:
        return None
    if _is_scalar(name):
        return name
    specific = [a for a in args if (x := _leaf(a, 0)) and not _is_scalar(x) and not _LITERAL.fullmatch(x)]
    if specific:  # a wrapper: what it wraps is what the kernel does
        inner = _leaf(specific[-1], min(detail, 1))
        return f"{name}<{inner}>" if detail >= 2 else inner
    if detail <= 0:
        return name
    lambdas = _LAMBDA.findall(outside_templates(arg))
    shown = name + "".join("::" + x for x in lambdas)
    leaves = [x for x in (_leaf(a, 0) for a in args) if x]
    return f"{shown}<{', '.join(leaves)}>" if leaves else shown


MAX_LABEL = 60  # characters: a label fits a table column and a headline line
# Scopes that say nothing of which library a kernel comes from: torch's own kernels keep
# their bare names (`elementwise_kernel<...>`), a library's keep its namespace (`flash::`, `aiter::`).
_GENERIC_SCOPES = {"at", "native", "c10", "std", "anon", "detail", "details", "impl", "internal", "cuda", "hip",
                   "kernel", "kernels", "device", "tensor_operation", "void", ""}
# AMD Tensile GEMM kernels: `Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x32x64_MI16x16x1_SN_..._WG64_4_1`
# (several hundred characters): the layouts and types, then the macro tile (MT) and matrix instruction (MI).
_TENSILE = re.compile(r"^Cijk_[A-Za-z]+_[A-Za-z]+_")


def _qualified(base: str) -> str:
    """The kernel's name with the outermost scope that identifies its library:
    `flash::FlashAttnBwdSm90`, `fp8_gemm::GemmKernel`; torch's `at::native::` is dropped."""
    if "::" not in base:  # no scope to keep
        return last_name(base)
    name = last_name(base)
    scopes = [p for p in split_scope(base)[:-1] if p and "(" not in p and "<" not in p and not p.startswith("λ")]
    scope = next((p for p in scopes if p not in _GENERIC_SCOPES), None)
    return f"{scope}::{name}" if scope else name


def _tensile(name: str, detail: int) -> str:
    parts = name.split("_")
    head = []
    for p in parts:  # Cijk, layouts, types: up to the first option (Bias, HA, UserArgs, MT...)
        if len(head) >= 5 or p.startswith(("MT", "MI")) or p in ("Bias", "HA", "HAS", "S", "SAV", "UserArgs"):
            break
        head.append(p)
    picked = [p for p in parts if p.startswith(("MT", "MI"))][:2]
    if detail >= 1:  # the workgroup shape and the tail tell apart kernels of one tile
        wg = next((i for i, p in enumerate(parts) if p.startswith("WG")), None)
        picked += parts[wg:] if wg is not None else parts[-2:]
    return "_".join(head + picked)


def _fit(text: str, limit: int = MAX_LABEL) -> str:
    """At most `limit` characters. The last argument that is not a number is what the
    kernel does (the functor of `vectorized_elementwise_kernel<4, MulFunctor>`), so it
    stays: the other arguments go first (`<…, X>`), then the type arguments inside it,
    innermost first (`AUnaryFunctor<MulFunctor<float>>` -> `AUnaryFunctor<MulFunctor>`),
    then its middle (`pow_tensor_sca…impl::λ1`: its head and its lambda number stay)."""
    if len(text) <= limit:
        return text
    base, args = base_and_args(text)
    if not args or len(base) + 4 >= limit:
        return cut(text, limit)
    at = max((i for i, a in enumerate(args) if not _LITERAL.fullmatch(a.strip())), default=len(args) - 1)
    key, after = args[at], args[at + 1:]
    if len(", ".join(after)) > 10:  # a run of flags after it (flash's <traits, false, true, ...>): leading args first
        return _leading(base, args, limit)

    def shown(key: str) -> str | None:
        for keep in range(at, -1, -1):
            candidate = f"{base}<{', '.join(args[:keep] + (['…'] if keep < at else []) + [key] + after)}>"
            if len(candidate) <= limit:
                return candidate
        return None

    while True:
        if (found := shown(key)) is not None:
            return found
        inner = _INNERMOST_TEMPLATE.sub("", key, count=1)
        if inner == key:
            break
        key = inner
    room = limit - len(f"{base}<…, >") - len(", ".join(after)) - (2 if after else 0)
    if room >= 12:
        return shown(cut(key, room)) or _leading(base, args, limit)
    return _leading(base, args, limit)


def _leading(base: str, args: list[str], limit: int) -> str:
    """`base<first args that fit, …>`."""
    kept: list[str] = []
    for a in args:
        if len(base) + len(", ".join(kept + [a])) + 5 > limit:
            break
        kept.append(a)
    return f"{base}<{', '.join(kept + ['…'])}>"


def label(name: str, detail: int = 0) -> str:
    """A short label (at most MAX_LABEL characters): detail 0 `elementwise_kernel<128, 2,
    MulFunctor>`; detail 1 adds the arguments of each argument (`MulFunctor<float>`) and
    lambda numbers; detail 2 the wrapper around it (`AUnaryFunctor<MulFunctor<float>>`).
    A library's namespace stays (`flash::FlashAttnBwdSm90<...>`), and a generic launcher
    (`cutlass::device_kernel<X>`) is labelled by the kernel class X it launches."""
    if _TENSILE.match(str(name)):
        return _fit(_tensile(str(name), detail))
    text = readable(name)
    if ("<" not in text and "::" not in text):
        return _fit(text)
    base, args = base_and_args(text)
    short = last_name(base) if base else text
    if not args:
        return _fit(_qualified(base) if base else text)
    if short in _WRAPPERS:
        wrapped = next((a for a in args if (x := _leaf(a, 0)) and not _is_scalar(x) and not _LITERAL.fullmatch(x)), None)
        if wrapped is not None:
            return label(_clean_type(wrapped), detail)
    leaves = [x for x in (_leaf(a, detail) for a in args) if x]
    return _fit(f"{_qualified(base)}<{', '.join(leaves)}>")


def labels(names) -> dict[str, str]:
    """A label for each distinct name, unique among them: detail grows only where labels
    collide, and names still equal after that are numbered in the order given."""
    names = list(dict.fromkeys(str(n) for n in names))
    out = {n: plain if plain is not None else label(n, 0) for n, plain in zip(names, _plain_labels(names))}
    if len(set(out.values())) == len(out):  # no two alike (most traces): nothing to tell apart
        return out
    for detail in (1, 2):
        groups: dict[str, list[str]] = {}
        for n in names:
            groups.setdefault(out[n], []).append(n)
        clashing = [n for group in groups.values() if len(group) > 1 for n in group]
        if not clashing:
            return out
        for n in clashing:
            out[n] = label(n, detail)
    seen: dict[str, int] = {}
    counts: dict[str, int] = {}
    for n in names:
        counts[out[n]] = counts.get(out[n], 0) + 1
    for n in names:
        key = out[n]
        if counts[key] > 1:
            seen[key] = seen.get(key, 0) + 1
            out[n] = f"{key} #{seen[key]}"
    return out


# A plain template kernel, `void elementwise_kernel_7<float, 4>(float*, int)`: (scoped) identifiers,
# no bracket inside its arguments or parameters. readable() keeps `scope::short<args>` of it
# as it is (its _PLAIN_TEMPLATE), so its detail-0 label is `qualified scope + short<leaves>`.
_PLAIN_NAME = r"^(?:void )?(?:[A-Za-z_]\w*::)*[A-Za-z_]\w*<[^<>()\[\]{}]*>\([^<>()\[\]{}]*\)$"  # scope::short<args>(params)


def _plain_labels(names: list[str]) -> list[str | None]:
    """label(name, 0) of every plain template name at once, None for the others (which
    label() reads one by one): a trace with 100k distinct kernel names spent seconds
    labelling them one at a time (issue 39). RE2 (Arrow) splits all the names in one pass;
    what label() would work out per name (the leaves of its arguments, the scope it keeps)
    is worked out once per distinct argument list and scope, with label()'s own functions.
    Left to label(): non-ASCII text and newlines (where RE2's and Python's classes differ),
    mangled and Tensile names, names cut by demangle's bound, anonymous / unnamed scopes
    (readable rewrites them), wrappers, empty argument lists and labels to be cut (_fit)."""
    if not arrow_pays(len(names)):  # (a few names, or no pandas loaded yet: text_match.ARROW_WITHOUT_PANDAS)
        return [None] * len(names)
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    text = arrow_text(names)
    # RE2 only says which names are plain (a match without captures runs in its DFA: ~10x
    # faster than extracting groups); a plain name has one `<`, `>(`, so splits take it apart.
    ok = pc.and_(pc.match_substring_regex(text, _PLAIN_NAME), pc.string_is_ascii(text))
    for odd in ("\n", "anonymous namespace", "unnamed"):
        ok = pc.and_(ok, pc.invert(pc.match_substring(text, odd)))
    for prefix in ("_Z", "Cijk_"):
        ok = pc.and_(ok, pc.invert(pc.starts_with(text, prefix)))
    ok = pc.and_(ok, pc.less_equal(pc.binary_length(text), MAX_CHARS))
    rows = np.flatnonzero(pc.fill_null(ok, False).to_numpy(zero_copy_only=False))
    out: list[str | None] = [None] * len(names)
    if not len(rows):
        return out
    plain = text.take(pa.array(rows))
    head_args = pc.split_pattern(plain, "<", max_splits=1)  # [`void scope::short`, `args>(params)`]
    head = pc.list_element(head_args, 0)
    head = pc.if_else(pc.starts_with(head, "void "), pc.utf8_slice_codeunits(head, 5), head)
    args = pc.list_element(pc.split_pattern(pc.list_element(head_args, 1), ">(", max_splits=1), 0)
    scoped = pc.split_pattern(head, "::", max_splits=1, reverse=True)  # [scope less its `::`, short] or [short]
    flat, ends = pc.list_flatten(scoped), scoped.offsets.to_numpy()[1:]
    short = flat.take(pa.array(ends - 1))
    colons = pa.scalar("::", pa.large_string())
    empty = pa.scalar("", pa.large_string())
    scope = pc.if_else(pc.greater(pc.list_value_length(scoped), 1),  # (a list of one: its element, unused)
                       pc.binary_join_element_wise(flat.take(pa.array(np.maximum(ends - 2, 0))), colons, empty), empty)
    ok = pc.invert(pc.is_in(short, value_set=pa.array(sorted(_WRAPPERS), type=pa.large_string())))

    def per_distinct(column, make):  # make(value) once per distinct value, spread back to the names
        distinct = pc.unique(column)
        made = pa.array([make(v) if v is not None else None for v in distinct.to_pylist()], type=pa.large_string())
        return pc.take(made, pc.index_in(column, value_set=distinct))

    def leaves(inside: str) -> str | None:
        args_ = split_template_args(inside)
        return ", ".join(x for x in (_leaf(a, 0) for a in args_) if x) if args_ else None  # none: label() says

    # the scope label() keeps: _qualified of a name in that scope, less the name
    kept_scope = per_distinct(scope, lambda s: _qualified(s + "x")[:-1] if s else "")
    mark = {c: pa.scalar(c, pa.large_string()) for c in ("<", ">", "")}
    built = pc.binary_join_element_wise(kept_scope, short, mark["<"], per_distinct(args, leaves), mark[">"], mark[""])
    ok = pc.and_(ok, pc.less_equal(pc.utf8_length(built), MAX_LABEL))  # longer: _fit cuts it, in label()
    made = pc.if_else(pc.fill_null(ok, False), built, pa.scalar(None, pa.large_string())).to_pylist()
    for row, text_ in zip(rows.tolist(), made):
        out[row] = text_
    return out


@lru_cache(maxsize=8)  # one trace asks for its map from every table, cause and the bundle
def _trace_labels(names: tuple[str, ...]) -> dict[str, str]:
    return labels(names)


def trace_labels(names) -> dict[str, str]:
    """The one label of each kernel of a trace, for every table, cause, headline, `info` and
    the bundle's `label` column: `labels` over all of the trace's distinct kernel names, in
    name order, so where a kernel is shown and in which order names come never change it."""
    return _trace_labels(tuple(sorted({str(n) for n in names})))


def kernel_label(name: str, width: int = 70) -> str:
    """A kernel's short label (`label`), cut to `width` at a boundary."""
    return cut(label(str(name)), width)
