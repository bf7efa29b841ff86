"""The pipeline: the sequence of calls (tracekit.structure.calls), the loop that repeats them,
its steps, and the stages as network x role.

The **loop** is the tandem repeat of the call sequence that covers the most calls. Its period
is read from the calls' signatures (a call and the host work after it: under guidance as two
calls, the unconditional call is followed by nothing and the conditional one by the guidance
and the sampler's update, so a step is two calls), then stretched over the calls' networks
alone (a KV cache that fills over the first chunks changes their shapes, not their networks);
where no signature repeats (a decode whose cache grows every token), the networks alone give
it. A **step** is one period of the loop; it runs from its first call's entry to the next
step's (the last: to the end of its last call's work).

The **stages** are each call's role, found from the places the networks take:
- the body: the network called most in a period (the denoiser, the decoder, the draft);
  among its calls, those doing the same work as most of them are the repeated body, one that
  does other work after them is the same weights once more after the repeats (a streaming
  pipeline's KV recompute), one before them the same weights once before;
- a network after the body: a conv decoder (mostly convolutions: a VAE), or another network
  (a reward model scoring what a policy wrote); a small network whose calls come before a
  larger one's single call that reads the same token table is a draft, the large one verifies;
- a network before: an encoder (text, image or audio, by its entry), run once before the loop.
A body followed by a conv decoder, its calls all alike, is a denoiser. Names come from the
role and the network's size ("text encoder (2 layers, d=32)"); the user's own names (frames,
ranges) label them where the trace has them (tracekit.structure.stage_names).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit.structure.accepted import accepted_tokens
from tracekit.structure.beams import beam_width
from tracekit.structure.calls import Calls, Network, find_calls
from tracekit.structure.repeats import Repeat, outermost_repeat
from tracekit.structure.role_names import decodes, stage_name
from tracekit.structure.weights import main_thread, weight_reads
from tracekit.trace.autograd import op_states

CONV_NETWORK = 0.5  # a network whose reads are mostly convolutions is a conv network (a VAE, a UNet's decoder)
DRAFT_SIZE = 0.5
SIMILAR_WORK = 0.6  # share of the distinct op names two calls' after-work share to be alike  # a draft reads at most this share of the weight elements its verifier reads


@dataclass(frozen=True)
class Stage:
    """One call's part in the pipeline: [start, end) on the host (to the next call's entry)."""
    start: int
    end: int
    name: str
    kind: str  # body | same_weights_after | same_weights_before | conv_decoder | encoder | draft | verify | network_after | network_before
    network: int
    call: int


@dataclass(frozen=True)
class Pipeline:
    calls: Calls
    loop: Repeat | None  # over the calls
    stages: list[Stage]  # one per call, in call order

    @property
    def networks(self) -> list[Network]:
        return self.calls.networks

    def step_windows(self) -> list[tuple[int, int]]:
        """(start, end) host ns of each period of the loop. A period starts with the host work
        that prepares its first call, where it can be told: the ops every period runs just
        before its first call (the longest run of them that ends each gap between periods, and
        the gap before the first), else at its first call's entry."""
        if self.loop is None:
            return []
        c, ops = self.calls, self.calls.ops
        firsts = [self.loop.start + j * self.loop.period for j in range(self.loop.count)]
        gaps = [ops.code[int(ops.own_end[a - 1]) if a > 0 else 0:int(ops.first[a])] for a in firsts]
        lead = min((_common_suffix(gaps[0], g) for g in gaps[1:]), default=0)
        starts = [int(ops.start[int(ops.first[a]) - lead]) if lead else int(c.start[a]) for a in firsts]
        last = self.loop.start + self.loop.covered - 1
        return [(lo, starts[j + 1] if j + 1 < len(starts) else int(c.span_end[last])) for j, lo in enumerate(starts)]

    def evidence(self) -> str:
        """What the loop is, in one line: its periods, the calls of one period by stage, and the
        calls around it (the report's and summary.json's step evidence)."""
        if self.loop is None:
            return f"{len(self.calls)} calls of {len(self.networks)} network(s), no loop"
        period = self.stages[self.loop.start:self.loop.start + self.loop.period]
        counts: dict[str, int] = {}
        for s in period:
            counts[s.name] = counts.get(s.name, 0) + 1
        inside = ", ".join(f"{n} \u00d7{c}" for n, c in counts.items())
        around = len(self.calls) - self.loop.covered
        tail = f"; {around} call(s) around the loop" if around else ""
        return (f"weight reads: {self.loop.count} periods of {self.loop.period} call(s) of {len(set(self.calls.network[self.loop.start:self.loop.start + self.loop.covered].tolist()))} "
                f"network(s) ({inside}){tail}")

    def output_tokens(self, ops) -> tuple[int | None, str]:
        """(tokens, how) the loop's token model generated: one per sequence per forward of the
        body (a prefill's forward emits the first token), the batch from its embedding's ids
        [B, T]; beams counted once per sequence (tracekit.structure.beams); where the loop drafts
        and verifies, the target's cache growth (tracekit.structure.accepted). None where its
        body is no token model."""
        verifies = [j for j, s in enumerate(self.stages) if s.kind == "verify"]
        if verifies:
            return accepted_tokens(ops, self.calls, verifies)
        body = self.body()
        if self.loop is None or body is None or not body.embedding:
            return None, "no token model generates in the loop"
        c, dims = self.calls, ops["input_dims"].to_numpy()
        total, decodes, vocab = 0, 0, None
        for j in range(self.loop.start, self.loop.start + self.loop.covered):
            if self.stages[j].kind != "body":
                continue
            entry = dims[c.reads.rows[c.first[j]]]  # embedding(weight [V, d], indices [B, T])
            ids = entry[1] if isinstance(entry, (list, tuple)) and len(entry) > 1 else None
            if not (isinstance(ids, (list, tuple)) and len(ids) == 2):
                return None, "a forward's token ids have no [B, T] shape"
            if isinstance(entry[0], (list, tuple)) and len(entry[0]) == 2:
                vocab = int(entry[0][0])
            total += int(ids[0])
            decodes += int(ids[1]) == 1
        if not decodes:
            return None, "no forward decodes one token (not a generation)"
        how = f"one token per sequence per forward of the loop's token model ({body.describe()})"
        beams = beam_width(ops, c, self.step_windows(), vocab)
        if beams > 1 and total % beams == 0:
            return total // beams, (f"{how}; beam search: {beams} beams per sequence (a topk over [sequences, {beams} x "
                                    f"vocabulary {vocab}] keeps them), so each forward's rows are {beams} per sequence")
        return total, how

    def body(self) -> Network | None:
        kinds = [s for s in self.stages if s.kind == "body"]
        return self.networks[kinds[0].network] if kinds else None

    def outside_loop(self) -> bool:
        """Calls before or after the loop (an encoder, a decoder run once)."""
        return self.loop is not None and (self.loop.start > 0 or self.loop.start + self.loop.covered < len(self.calls))


def _common_suffix(a: np.ndarray, b: np.ndarray) -> int:
    """How many codes the two sequences end with in common."""
    n = min(len(a), len(b))
    if not n:
        return 0
    same = a[len(a) - n:][::-1] == b[len(b) - n:][::-1]
    return int(n if same.all() else np.argmin(same))


_CACHE: dict[int, tuple[object, Pipeline | None]] = {}


def find_pipeline(ops, states: np.ndarray | None = None) -> Pipeline | None:
    """The pipeline of a trace's ops table (see the module docstring); None where its weight
    reads show no two calls. Found once per ops table."""
    key = id(ops)
    if key in _CACHE and _CACHE[key][0] is ops:
        return _CACHE[key][1]
    found = None
    if len(ops) and "input_dims" in ops:
        states = op_states(ops) if states is None else states
        reads = weight_reads(ops, states)
        thread = main_thread(reads)
        calls = find_calls(reads.on(*thread), ops, states) if thread is not None else None
        if calls is not None and len(calls) >= 2:
            loop = find_loop(calls)
            found = Pipeline(calls, loop, roles(calls, loop, ops))
    if len(_CACHE) > 4:
        _CACHE.clear()
    _CACHE[key] = (ops, found)
    return found


def find_loop(calls: Calls) -> Repeat | None:
    """The loop over the calls (see the module docstring); None where nothing repeats."""
    by_signature = outermost_repeat(calls.signature, min_period=1)
    if by_signature is not None:
        by_signature = _stretched(by_signature, calls.network)
    by_network = outermost_repeat(calls.network, min_period=1)
    if by_signature is None:
        found = by_network
    elif by_network is None or by_signature.covered >= by_network.covered:
        found = by_signature
    else:
        found = by_network
    return _ending_with_the_closer(found, calls.network) if found is not None else None


def _ending_with_the_closer(repeat: Repeat, network: np.ndarray) -> Repeat:
    """The repeat's periods shifted to end with a call of the network the period calls least
    (a round of speculative decoding ends with its one verify, a chunk with its one decode):
    a tandem repeat's first period starts wherever the pattern does (a draft's and a target's
    prefill before the first round read as drafting and verifying too)."""
    p = repeat.period
    unit = network[repeat.start:repeat.start + p]
    counts = {int(n): int((unit == n).sum()) for n in np.unique(unit)}
    if len(set(counts.values())) < 2:
        return repeat
    least = {n for n, c in counts.items() if c == min(counts.values())}
    shift = next(r for r in range(p) if int(network[repeat.start + r + p - 1 if repeat.start + r + p - 1 < len(network) else repeat.start + r - 1]) in least)
    if not shift:
        return repeat
    return _stretched(Repeat(repeat.start + shift, p, repeat.count - 1), network)


def _stretched(repeat: Repeat, network: np.ndarray) -> Repeat:
    """The repeat extended over the periods before and after it whose calls are of the same
    networks in the same order."""
    p = repeat.period
    unit = network[repeat.start:repeat.start + p]
    start, count = repeat.start, repeat.count
    while start - p >= 0 and np.array_equal(network[start - p:start], unit):
        start -= p
        count += 1
    end = start + count * p
    while end + p <= len(network) and np.array_equal(network[end:end + p], unit):
        end += p
        count += 1
    return Repeat(start, p, count)


def roles(calls: Calls, loop: Repeat | None, ops=None) -> list[Stage]:
    """Each call's stage (see the module docstring); `ops`: the trace's ops, whose token ids
    tell a generating body (tracekit.structure.samples)."""
    n = len(calls)
    kind = np.array(["network_before"] * n, dtype=object)
    if loop is None:
        lo, hi, period = 0, n, n
    else:
        lo, hi, period = loop.start, loop.start + loop.covered, loop.period
    unit = np.arange(lo, lo + period)
    nets = calls.network[unit]
    counts = np.bincount(nets, minlength=len(calls.networks))
    duration = np.bincount(nets, weights=(calls.end - calls.start)[unit].astype(np.float64), minlength=len(calls.networks))
    body = int(np.lexsort((-duration, -counts))[0])
    unit_kind = _unit_roles(calls, unit, body)
    for j in range(lo, hi):
        kind[j] = unit_kind[(j - lo) % period]
    after_body = {int(calls.network[j]) for j in range(lo, hi) if kind[j] == "body"}
    for j in range(hi, n):
        kind[j] = _other_role(calls.networks[int(calls.network[j])], after=True) if int(calls.network[j]) not in after_body else "same_weights_after"
    in_loop = {int(calls.network[j]) for j in range(lo, hi)}
    for j in range(0, lo):
        # a network of the loop run before it is its first call (a prompt's prefill); another is an encoder
        kind[j] = "same_weights_before" if int(calls.network[j]) in in_loop else _other_role(calls.networks[int(calls.network[j])], after=False)
    denoiser = _is_denoiser(calls, kind, body)
    generator = not denoiser and ops is not None and decodes(calls, kind, body, ops)
    out = []
    for j in range(n):
        net = calls.networks[int(calls.network[j])]
        end = int(calls.start[j + 1]) if j + 1 < n else int(calls.span_end[j])
        out.append(Stage(int(calls.start[j]), end, stage_name(str(kind[j]), net, denoiser, generator), str(kind[j]), net.id, j))
    return out


def _unit_roles(calls: Calls, unit: np.ndarray, body: int) -> list[str]:
    """The roles of one period's calls: the body's calls that do the work most of them do (their
    own ops, and the host work after them: a sampler's update) are the body; one that differs
    is the same weights once more after the repeats (or once before them)."""
    nets, own = calls.network[unit], calls.own[unit]
    mine = np.flatnonzero(nets == body)
    values, counts = np.unique(own[mine], return_counts=True)
    usual = values[np.argmax(counts)] if counts.max() >= 2 else None
    after = [calls.after[int(unit[i])] for i in mine]
    usual_after = _usual(after)
    alike = {int(i) for i, a in zip(mine, after) if (usual is None or own[i] == usual) and (usual_after is None or _similar(a, usual_after))}
    first_usual = min(alike) if alike else int(mine[0])
    out = []
    for i in range(len(unit)):
        if nets[i] == body:
            out.append("body" if i in alike else ("same_weights_after" if i > first_usual else "same_weights_before"))
            continue
        role = _other_role(calls.networks[int(nets[i])], i > mine[0])
        if i > mine[0] and i == len(unit) - 1 and _drafts_for(calls.networks[body], calls.networks[int(nets[i])], calls, unit, body, int(nets[i])):
            role = "verify"
        out.append(role)
    if "verify" in out:
        out = ["draft" if r == "body" else r for r in out]
    return out


def _similar(a: frozenset, b: frozenset) -> bool:
    """Two calls' host work after them is alike: most of the op names agree."""
    if not a and not b:
        return True
    return len(a & b) >= SIMILAR_WORK * len(a | b)


def _usual(works: list) -> frozenset | None:
    """The host work after a call that most of the calls share (alike with it), where two or
    more share it; None else."""
    best, best_count = None, 1
    for w in works:
        count = sum(_similar(w, v) for v in works)
        if count > best_count:
            best, best_count = w, count
    return best


def _drafts_for(small: Network, big: Network, calls: Calls, unit: np.ndarray, body: int, other: int) -> bool:
    """A small network whose calls feed a big one's single call at the period's end, both token
    models over one token table: drafting, then verifying."""
    if not (small.embedding and big.embedding) or int((calls.network[unit] == other).sum()) != 1:
        return False
    if small.read_elements > DRAFT_SIZE * big.read_elements:
        return False
    reads = calls.reads
    table = lambda net: {int(reads.code[calls.first[j]]) for j in np.flatnonzero(calls.network == net)}
    return bool(table(body) & table(other))


def _other_role(net: Network, after: bool) -> str:
    if after:
        return "conv_decoder" if net.conv_share >= CONV_NETWORK else "network_after"
    return "encoder"


def _is_denoiser(calls: Calls, kind: np.ndarray, body: int) -> bool:
    """The body is a denoiser where a conv decoder runs in the pipeline and the body is no token
    model (a token model before a VAE is a text encoder, not the loop's body)."""
    return "conv_decoder" in set(kind.tolist()) and not calls.networks[body].embedding


def loop_steps(pipeline: Pipeline) -> list[tuple[str, int, int, int, int]]:
    """The loop's periods as step windows (name, start, end, pid, tid), named by what a period
    holds: a chunk (a period that decodes its frames), a round (drafting and verifying, or a
    network scoring the body's work), a denoise step, else a step."""
    kinds = {s.kind for s in pipeline.stages[pipeline.loop.start:pipeline.loop.start + pipeline.loop.period]}
    if "conv_decoder" in kinds:
        label = "chunk"
    elif kinds & {"verify", "network_after"}:
        label = "round"
    elif any(s.name.startswith("denoise") for s in pipeline.stages):
        label = "denoise step"
    else:
        label = "step"
    calls = pipeline.calls
    return [(f"{label}#{j}", lo, hi, calls.pid, calls.tid) for j, (lo, hi) in enumerate(pipeline.step_windows())]


def steps_from_loop(pipeline: Pipeline | None) -> bool:
    """Whether the loop, not a token model's forwards, gives the steps: a loop of two or more
    periods whose period holds several calls (a guidance pair, a speculative round, a chunk)
    or whose body is not a token model (a denoiser between a text encoder and a VAE)."""
    if pipeline is None or pipeline.loop is None or pipeline.loop.count < 2:
        return False
    body = pipeline.body()
    return pipeline.loop.period >= 2 or (body is not None and not body.embedding)


def window_stages(pipeline: Pipeline, lo: float, hi: float) -> list[Stage]:
    """The stages that start inside [lo, hi], clipped to it, neighbours of one name joined; the
    first reaches back to lo (the host work that prepares a step's first call is the step's)."""
    out: list[Stage] = []
    steps = pipeline.step_windows()
    loop_lo = steps[0][0] if steps else np.inf
    loop_hi = steps[-1][1] if steps else -np.inf
    inside = range(pipeline.loop.start, pipeline.loop.start + pipeline.loop.covered) if pipeline.loop is not None else range(0)
    for s in pipeline.stages:
        if not lo <= s.start < hi:
            continue
        start, end = max(s.start, lo), min(s.end, hi)
        if s.call not in inside:  # a call around the loop ends where the loop's first step starts, starts after its last
            end = min(end, loop_lo) if s.call < pipeline.loop.start else end
            start = max(start, loop_hi) if s.call >= pipeline.loop.start + pipeline.loop.covered else start
            if end <= start:
                continue
        elif (s.call - pipeline.loop.start) % pipeline.loop.period == 0:  # a period's first call: from the period's start
            start = max(min(start, steps[(s.call - pipeline.loop.start) // pipeline.loop.period][0]), lo)
        if out and out[-1].name == s.name:
            out[-1] = Stage(out[-1].start, int(end), s.name, s.kind, s.network, out[-1].call)
        else:
            out.append(Stage(int(start), int(end), s.name, s.kind, s.network, s.call))
    if out and np.isfinite(lo):
        first = out[0]
        out[0] = Stage(int(lo), first.end, first.name, first.kind, first.network, first.call)
    return out
