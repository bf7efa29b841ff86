"""Kernel names a person can read:

    demangle(name)   _ZN5aiter24add_rmsnorm_quant_kernelIDF16b...Evv
                     -> void aiter::add_rmsnorm_quant_kernel<std::bfloat16_t, ..., 256, 16, ...>(...)
    readable(name)   demangled, nsys casts dropped ((int)128 -> 128, (bool)0 -> false),
                     no return type (`std::enable_if<...>::type f<...>(...)` -> `f<...>`), no
                     parameter list: what the kernel is, not how it is called

Demangling uses `cpp_demangle` (Python bindings of the gimli-rs cpp_demangle crate, abi3
wheels for every Python >= 3.8). Where it cannot (newer manglings, such as C++20's `Tn`
template parameter declarations, or a name cut short), the qualified name is decoded from
the mangling's nested-name prefix, so no name is ever left a raw `_ZN...`.
"""

from __future__ import annotations

import re
from functools import lru_cache

from tracekit.common.format import MAX_NAME_CHARS
from tracekit.trace.cpp_text import closing_bracket

# Names are bounded before any work: the longest real kernel name we have seen is ~3 kB.
MAX_CHARS = MAX_NAME_CHARS

_CAST = re.compile(r"(?<![\w)])\(([A-Za-z_][\w: ]*)\)(-?\d+)")
_CAST_END = re.compile(r"\)-?\d")  # what every cast has: found with a literal search, where _CAST tries every position
_LAMBDA_GNU = re.compile(r"\{lambda\(([^(){}]*)\)#(\d+)\}")  # {lambda(float)#1}
_LAMBDA_NSYS = re.compile(r"\[lambda\(([^()\[\]]*)\) \(instance (\d+)\)\]")  # [lambda(int) (instance 1)]
_OPERATOR_CALL = re.compile(r"::operator ?\(\)\s*\([^()]*\)(?: const)?")
# `void elementwise_kernel<float, 4>(float*, int)`: a (scoped) template with no bracket inside
# its arguments or parameters, which no rewrite below changes: what is kept is group 1.
_PLAIN_TEMPLATE = re.compile(r"(?:void )?([A-Za-z_]\w*(?:::[A-Za-z_]\w*)*<[^<>()\[\]{}]*>)\([^<>()\[\]{}]*\)")


@lru_cache(maxsize=1)
def _demangler():
    try:
        from cpp_demangle import demangle as fn
    except ImportError:  # the label still reads: the nested-name decoder below takes over
        return None
    return fn


def demangle(name: str) -> str:
    """The C++ name behind an Itanium-mangled symbol (`_Z...`); other names unchanged."""
    name = str(name)[:MAX_CHARS]
    if not name.startswith("_Z"):
        return name
    fn = _demangler()
    if fn is not None:
        try:
            return fn(name)
        except Exception:  # a mangling the demangler does not know, or a name cut short
            pass
    return _nested_name(name) or name


def _nested_name(mangled: str) -> str | None:
    """`_ZN7sgl_hip10activation18act_and_mul_kernelI...` -> `sgl_hip::activation::act_and_mul_kernel<…>`:
    the <length><identifier> run of a nested name, for manglings no demangler reads."""
    m = re.match(r"_Z(?:L|N(?:[rVK]*))?", mangled)
    pos = m.end() if m else 2
    parts = []
    while pos < len(mangled):
        num = re.match(r"\d+", mangled[pos:])
        if not num:
            break
        n = int(num.group())
        start = pos + len(num.group())
        if n <= 0 or start + n > len(mangled):
            break
        parts.append(mangled[start : start + n].replace("_GLOBAL__N_1", "(anonymous namespace)"))
        pos = start + n
    if not parts:
        return None
    return "::".join(parts) + ("<…>" if mangled[pos : pos + 1] == "I" else "")


_SIGNATURE_TOKENS = re.compile(r"[<(\[{)\]} ]")  # what _strip_signature looks at; other characters are kept as they are


def _strip_signature(text: str) -> str:
    """Drop the return type (`void `, `std::enable_if<...>::type `) and the parameter list.
    What is kept is always a prefix of the text: the scan jumps from one bracket or space to
    the next (a Python loop over every character cost seconds on 100k distinct names)."""
    paren, last_space, end, pos = 0, -1, len(text), 0
    while (m := _SIGNATURE_TOKENS.search(text, pos)) is not None:
        i = m.start()
        ch = text[i]
        pos = i + 1
        if ch == "<":
            if paren == 0:
                close = closing_bracket(text, i)
                if close < 0:  # unbalanced (a name cut short): keep the rest as is
                    break
                pos = close + 1
        elif ch in "([{":
            if ch == "(" and paren == 0 and text[:i].strip() and not text[:i].endswith("operator"):
                end = i  # the parameter list of the function itself
                break
            paren += 1
        elif ch in ")]}":
            paren -= 1
        elif paren == 0:  # a space at the top level
            last_space = i
    kept = text[:end]
    return kept[last_space + 1 :].strip() if last_space >= 0 else kept.strip()


@lru_cache(maxsize=65536)
def readable(name: str) -> str:
    """The demangled name without return type, parameter list and nsys casts."""
    text = demangle(name)
    if "::" not in text and "<" not in text:  # C, or not code (Memcpy HtoD (Pinned -> Device), Triton names)
        plain = re.fullmatch(r"(?:void )?([A-Za-z_]\w*)\(.*\)", text)
        return plain.group(1) if plain else text
    simple = _PLAIN_TEMPLATE.fullmatch(text)
    if simple and "anonymous namespace" not in text and "unnamed" not in text:
        return simple.group(1)
    if _CAST_END.search(text):
        text = _CAST.sub(lambda m: {"0": "false", "1": "true"}.get(m.group(2), m.group(2)) if m.group(1) == "bool" else m.group(2), text)
    text = text.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon")
    text = _OPERATOR_CALL.sub("", text)
    text = _LAMBDA_GNU.sub(lambda m: f"λ{m.group(2)}", text)
    text = _LAMBDA_NSYS.sub(lambda m: f"λ{m.group(2)}", text)
    return _strip_signature(text)
