"""Model-aware analysis: a model's config.json costs what the trace cannot shape, and
predicts every step (config -> batch per step -> block costs -> kernels; predict; calibrate).

Order inside tracekit.analysis.pipeline.build with a model: shape costs -> attribute -> steps ->
`run_model` fills the uncosted kernels -> roofline -> summarize -> `predict`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

# The model's modules are imported by run_model, when a model is given: `analyze` without
# --model reaches this package only for small helpers (batch_annotations, predict) and pays
# for none of the rest (issue 41: import only what the command uses).
if TYPE_CHECKING:
    from tracekit.hardware import Device
    from tracekit.model.architecture import Architecture
    from tracekit.model.batch import StepBatch
    from tracekit.model.blocks import Parallel, StepCosts
    from tracekit.trace import Trace

__all__ = ["ModelOptions", "ModelRun", "run_model", "load_config"]
_ON_USE = {"load_config": "tracekit.model.config", "infer_parallel": "tracekit.model.parallel"}


def __getattr__(name: str):
    """`from tracekit.model import load_config` (or infer_parallel): imported on first use."""
    if name in _ON_USE:
        import importlib

        return getattr(importlib.import_module(_ON_USE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class ModelOptions:
    config: str  # a config.json or a directory holding one
    tp: int | None = None
    ep: int | None = None
    weight_dtype: str | None = None
    batch: int | None = None  # requests per step, where the trace does not say
    context: int | None = None  # KV tokens cached per request, where the trace does not say
    kv_dtype: str | None = None  # the KV cache's format (default: the checkpoint's, else the activations')


@dataclass
class ModelStep:
    row: int  # the owning range in trace.ranges
    name: str
    batch: StepBatch  # batch.complete False: the costs below are lower bounds (batch.missing() says why)
    blocks: StepCosts | None  # tracekit.model.blocks.step_blocks, None for a step of no tokens
    terms: dict | None = None  # tracekit.model.predict.step_terms on the device, None without one


@dataclass
class ModelRun:
    arch: Architecture
    parallel: Parallel
    steps: list[ModelStep]
    owner: np.ndarray  # per kernel: the owning range row of its model step, -1 none
    groups: pd.DataFrame  # tracekit.model.fill.GROUP_COLUMNS
    group_of: np.ndarray  # per kernel: row in groups, -1 none
    notes: list[str] = field(default_factory=list)
    # per phase x block group: the trace's own costs against the model's (model/agreement.py)
    agreement: pd.DataFrame = field(default_factory=lambda: no_agreement())


def run_model(trace: Trace, costs: pd.DataFrame, labels: pd.DataFrame, step_of: np.ndarray, options: ModelOptions,
              device: Device | None = None, arch: Architecture | None = None) -> ModelRun:
    """Per step: its batch, its block costs, and those costs spread onto its uncosted kernels
    (`costs` is changed in place). `step_of`: tracekit.trace.step_ownership.kernel_steps of the trace."""
    from tracekit.model.agreement import agreement
    from tracekit.model.batch import kv_write_tokens, with_tokens
    from tracekit.model.batch_reader import BatchReader
    from tracekit.model.blocks import step_blocks
    from tracekit.model.config import load_config
    from tracekit.model.fill import spread
    from tracekit.model.parallel import infer_parallel
    from tracekit.model.parts import moe_parts, projection_parts
    from tracekit.model.predict import step_terms
    from tracekit.model.predicted_steps import kernel_owner, model_steps

    arch = arch or load_config(options.config, options.weight_dtype, options.kv_dtype)
    par = infer_parallel(trace, arch, options.tp, options.ep)
    reader = BatchReader(trace, arch.vocab)
    steps, notes = [], []
    nests = model_steps(trace)
    owner = kernel_owner(trace, trace.kernels, [row for row, _ in nests], step_of)
    written = kv_write_tokens(trace.kernels, owner)
    training = training_steps(labels, owner)
    for row, nest in nests:
        batch = reader.step(nest, options.batch, options.context)
        if row in written:
            batch = with_tokens(batch, written[row])
        blocks = step_blocks(arch, batch, par) if batch.tokens > 0 and row not in training else None
        terms = step_terms(blocks, device) if blocks is not None and device is not None else None
        steps.append(ModelStep(row, reader.range_names[row], batch, blocks, terms))
    notes += _partial_notes(steps)
    if trained := sum(s.row in training for s in steps):
        notes.append(f"{trained} of {len(steps)} steps run backward kernels (training): the model costs and predicts "
                     "inference forwards only, so these steps are neither costed nor predicted from it")
    if not steps:
        notes.append("the trace has no step (ProfilerStep#N, decode_step, step[..], a vLLM execute_.. range, or another "
                     "engine's step annotation): nothing to predict")
    # Only a step whose tokens are known puts costs on kernels: a lower-bound batch (one
    # request for an unknown batch, one token per prompt of unknown length) would put too
    # small a cost on them. A step whose KV alone is unknown fills all but the KV-dependent blocks.
    fill = {s.row: (s.blocks, s.terms, {"moe": moe_parts(arch, s.batch, par), "projections": projection_parts(arch, s.batch, par)})
            for s in steps if s.blocks is not None and s.batch.tokens_known}
    groups, group_of = spread(costs, labels, trace.kernels, owner, fill)
    return ModelRun(arch, par, steps, owner, groups, group_of, notes, agreement(groups, group_of, trace.kernels, costs, labels))


def no_agreement() -> pd.DataFrame:
    from tracekit.model.agreement import AGREEMENT_COLUMNS

    return pd.DataFrame(columns=AGREEMENT_COLUMNS)


def training_steps(labels: pd.DataFrame, owner: np.ndarray) -> set[int]:
    """The steps (range rows) that own a backward or recompute kernel: a training iteration,
    whose work (forward, backward, recompute, optimizer) is not the forward the model costs."""
    phase = labels["phase"].astype(str).to_numpy()
    back = np.isin(phase, ["backward", "recompute"]) & (owner >= 0)
    return {int(r) for r in np.unique(owner[back])}


def _partial_notes(steps: list[ModelStep]) -> list[str]:
    """One note per kind of missing knowledge: how many steps, and what would complete them."""
    notes, n = [], len(steps)
    unknown = sum(not s.batch.batch_known for s in steps)
    if unknown:
        notes.append(f"{unknown} of {n} steps have no batch the trace describes: costed and predicted as lower bounds "
                     "(1 request of 1 token); pass --batch B --context C")
    short = sum(s.batch.batch_known and not s.batch.tokens_known for s in steps)
    if short:
        notes.append(f"{short} of {n} steps give request counts but not the prompts' lengths: their costs are lower bounds "
                     "and are not put on kernels")
    no_kv = sum(s.batch.batch_known and not s.batch.kv_known for s in steps)
    if no_kv:
        notes.append(f"{no_kv} of {n} steps have no KV length: weights and activations are costed, the KV reads are unknown, "
                     "so their bytes and predictions are lower bounds; pass --context C (KV tokens cached per request)")
    return notes
