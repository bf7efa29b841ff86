"""Attribution rules: ordered data (TOML), defaults shipped in default_rules.toml.

Patterns are compiled with RE2 (google-re2), an engine without backtracking: matching is
linear in the length of the name for any pattern, so a user rule such as `(a+)+$` or a
default rule with `.*` on a 1 MB range name cannot hang the analysis. RE2 has no
lookaround or backreferences; a rule using them is refused with a plain message.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import tomllib

import re2

from tracekit.errors import TraceError

FIELDS = ("range", "frame", "op", "kernel", "class", "kind")
DEFAULT_PHASE, DEFAULT_BLOCK, UNKNOWN_PHASE = "forward", "other", "unknown"
# lm_head, logits, conv and optimizer: placed by the trace's structure (structure.py) where no rule names them
BLOCKS = ("attention", "ffn", "collective", "norm", "embedding", "memory", "lm_head", "logits", "conv", "optimizer", "other")


def phased(phase: str, block: str) -> str:
    """`phase / block`, or the block alone where nothing says its phase: a program with no
    phases (a CUDA application) reads `advec_mom_kernel`, not `unknown / advec_mom_kernel`."""
    return block if phase == UNKNOWN_PHASE else f"{phase} / {block}"


@dataclass(frozen=True)
class Rule:
    label: str
    patterns: dict[str, "re2._Regexp"]  # field -> compiled RE2 regex (has .search and .pattern)


@dataclass(frozen=True)
class Rules:
    phase: tuple[Rule, ...]
    block: tuple[Rule, ...]


MAX_RULES = 10_000


def _parse(tables: dict, origin: str) -> Rules:
    from tracekit.userfile import Fields, kind_of

    top = Fields(origin, "", tables)
    top.unknown(("phase", "block", "replace_defaults"))
    top.boolean("replace_defaults")
    out = {}
    for kind in ("phase", "block"):
        rules = []
        entries = tables.get(kind, [])
        if not isinstance(entries, list):
            raise TraceError(origin, f"{kind}: must be a list of tables ([[{kind}]]), not {kind_of(entries)}")
        if len(entries) > MAX_RULES:
            raise TraceError(origin, f"{kind}: more than {MAX_RULES} rules")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise TraceError(origin, f"[[{kind}]] rule {i + 1}: must be a table, not {kind_of(entry)}")
            if not isinstance(entry.get("name"), str):
                raise TraceError(origin, f"[[{kind}]] rule {i + 1} has no name (name must be a string)")
            unknown = set(entry) - set(FIELDS) - {"name"}
            if unknown:
                raise TraceError(origin, f"[[{kind}]] rule {entry['name']!r} has unknown fields {sorted(unknown)}; allowed: {', '.join(FIELDS)}")
            if kind == "block" and entry["name"] not in BLOCKS:
                raise TraceError(origin, f"block {entry['name']!r} is not one of {', '.join(BLOCKS)}")
            try:
                patterns = {f: compile_pattern(entry[f]) for f in FIELDS if f in entry}
            except (re2.error, TypeError) as exc:
                reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
                raise TraceError(origin, f"[[{kind}]] rule {entry['name']!r}: bad regular expression for RE2 ({reason}); "
                                         "lookaround and backreferences are not supported") from None
            if not patterns:
                raise TraceError(origin, f"[[{kind}]] rule {entry['name']!r} matches nothing: give range, frame, op, kernel, class or kind")
            rules.append(Rule(entry["name"], patterns))
        out[kind] = tuple(rules)
    return Rules(out["phase"], out["block"])


def compile_pattern(pattern: str) -> "re2._Regexp":
    if not isinstance(pattern, str):
        raise TypeError(f"a pattern must be a string, not {type(pattern).__name__}")
    options = re2.Options()
    options.log_errors = False  # errors become one TraceError line, not log lines on stderr
    return re2.compile(pattern, options=options)


def default_rules() -> Rules:
    text = resources.files("tracekit.attribution").joinpath("default_rules.toml").read_text(encoding="utf-8")
    return _parse(tomllib.loads(text), "default_rules.toml")


def load_rules(path: str | None) -> Rules:
    """Defaults, with the user's rules (if any) in front of them, or instead of them."""
    defaults = default_rules()
    if not path:
        return defaults
    from tracekit.userfile import load_toml

    tables = load_toml(path, "rules file")
    user = _parse(tables, path)
    if tables.get("replace_defaults"):
        return user
    return Rules(user.phase + defaults.phase, user.block + defaults.block)
