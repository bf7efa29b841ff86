"""Pipelines of several networks (issue 46): steps and stages from the weights each call reads.

The traces are the project's own CPU recordings (fixtures/record_cpu_pipelines.py), none of
them named by any rule: hand-written models, record_shapes=True only (no ranges, no frames, no
modules). Their truth (fixtures/cpu_pipelines_truth.json) is what each run measured of itself:
forward hooks counted the calls, perf_counter timed each stage inside the profiled run. The
stage shares checked are each stage's host time over the stage table's window (the whole
pipeline), within 3 points of the truth's share of the run."""

from __future__ import annotations

import gzip
import json
import pathlib
import re

import numpy as np
import pytest

import tracekit
from tracekit.structure.calls import entries
from tracekit.structure.pipeline import find_pipeline
from tracekit.structure.weights import WeightReads

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "fixtures"
TRUTH = json.loads((FIXTURES / "cpu_pipelines_truth.json").read_text())["forms"]

# each truth stage -> the tracekit stage names that are it (by role; the names only label it)
STAGES = {
    "cfg_two_calls": {"text_encoder": r"^text encoder", "denoise": r"^denoise", "vae_decode": r"VAE"},
    "cfg_batch2": {"text_encoder": r"^text encoder", "denoise": r"^denoise", "vae_decode": r"VAE"},
    "speculative": {"prefill": r"^prefill", "draft": r"^draft", "verify": r"^verify"},
    "enc_dec": {"encoder": r"^encoder", "decode": r"^decode$"},
    "policy_reward": {"policy_generate": r"^generate \(", "reward_score": r"^reads the generated sequences"},
    "beam": {"prefill": r"^prefill", "beam_decode": r"^decode$"},
}


def _stage_shares(analysis) -> dict[str, float]:
    return {str(r["stage"]): float(r["wall_share"] or 0) for r in analysis.throughput.stages.to_dict(orient="records")}


@pytest.mark.parametrize("form", sorted(STAGES))
def test_steps_and_stage_shares_match_what_ran(form, shared_analysis):
    truth = TRUTH[form]
    a = shared_analysis(FIXTURES / truth["trace"])
    assert len(a.steps) == truth["steps"], (form, len(a.steps))
    shares = _stage_shares(a)
    for key, pattern in STAGES[form].items():
        got = sum(v for name, v in shares.items() if re.search(pattern, name))
        assert abs(got - truth["stage_share"][key]) <= 0.03, (form, key, got, truth["stage_share"][key], shares)
    # a VAE decode is never the token "decode" phase, nor a draft a "prefill"
    assert not any(re.search("VAE", n) and re.search(r"^decode", n) for n in shares)


@pytest.mark.parametrize("form, calls", [("cfg_two_calls", [2, 20, 1]), ("cfg_batch2", [2, 10, 1]), ("speculative", [37, 10]),
                                         ("enc_dec", [1, 12]), ("policy_reward", [24, 3])])
def test_calls_per_network_are_the_forward_hooks_counts(form, calls, shared_analysis):
    trace = tracekit.load(str(FIXTURES / TRUTH[form]["trace"]))
    pipeline = find_pipeline(trace.ops)
    assert [n.calls for n in pipeline.networks] == calls
    assert sum(TRUTH[form]["calls"].values()) == sum(calls)


def test_guidance_as_two_calls_is_one_step_of_two_unet_calls():
    """The unconditional and the conditional call read the same weights on the same shapes; the
    host work after the second (guidance, the sampler's update) makes the pair the period."""
    pipeline = find_pipeline(tracekit.load(str(FIXTURES / "cpu_pipe_cfg_two_calls.json.gz")).ops)
    assert (pipeline.loop.period, pipeline.loop.count) == (2, TRUTH["cfg_two_calls"]["steps"])
    kinds = [s.kind for s in pipeline.stages]
    assert kinds[:2] == ["encoder", "encoder"] and kinds[-1] == "conv_decoder"


def test_speculative_rounds_end_with_the_verify():
    """9 rounds of 4 drafts and a verify; the two prefills before the first round are not a round."""
    pipeline = find_pipeline(tracekit.load(str(FIXTURES / "cpu_pipe_speculative.json.gz")).ops)
    loop = pipeline.loop
    assert (loop.start, loop.period, loop.count) == (2, 5, 9)
    period = [s.kind for s in pipeline.stages[loop.start:loop.start + loop.period]]
    assert period == ["draft"] * 4 + ["verify"]
    draft, target = pipeline.networks
    assert draft.layers == 1 and target.layers == 4


def _reads(code, in_width, out_width, embedding=None, conv=None) -> WeightReads:
    n = len(code)
    z = np.zeros(n, dtype=np.int64)
    return WeightReads(z, np.arange(n), np.arange(n) + 1, z, z, np.array(code), np.array(code), np.array(in_width), np.array(out_width),
                       np.array(embedding if embedding is not None else [False] * n), np.array(conv if conv is not None else [False] * n),
                       np.ones(n, dtype=np.int64))


def test_a_layer_modulation_widens_like_an_entry_but_is_no_entry():
    """A DiT forward: patch embedding 64 -> 512, then 3 blocks of modulation 512 -> 3072 (widens
    6x, like an entry), q, o, up, down; two forwards. Only the patch embeddings start calls."""
    block = [(2, 512, 3072), (3, 512, 512), (4, 512, 512), (5, 512, 2048), (6, 2048, 512)]
    forward = [(1, 64, 512)] + block * 3
    code, inw, outw = zip(*(forward * 2))
    assert entries(_reads(code, inw, outw)).tolist() == [0, len(forward)]


def test_an_lm_head_is_no_entry_of_the_next_forward():
    """A token model: embedding, 2 layers, LM head 64 -> 1000 (widens, but into a vocabulary, not
    the width the next reads work at)."""
    forward = [(0, 0, 64), (1, 64, 64), (2, 64, 64), (1, 64, 64), (2, 64, 64), (3, 64, 1000)]
    code, inw, outw = zip(*(forward * 3))
    embedding = [c == 0 for c in code]
    assert entries(_reads(code, inw, outw, embedding)).tolist() == [0, 6, 12]


@pytest.mark.skipif(not (SHARED / "torch" / "h100_streaming_video_noranges_dit1.3b_chunk3_steps4.json.gz").exists(), reason="needs ../shared/fixtures")
def test_streaming_dit_stages_without_frames_or_ranges(tmp_path):
    """The shared H100 streaming trace with every Python frame and user range removed: the stages
    come from the weights alone (truth: denoise 76.8%, KV recompute 19.5%, VAE decode 3.7%)."""
    source = SHARED / "torch" / "h100_streaming_video_noranges_dit1.3b_chunk3_steps4.json.gz"
    truth = json.loads((SHARED / "truth" / "h100_streaming_noranges.truth.json").read_text())
    doc = json.loads(gzip.decompress(source.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("python_function", "user_annotation")]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc))
    a = tracekit.analyze(str(bare), workers=1)
    assert len(a.steps) == truth["chunks_profiled"]
    shares = _stage_shares(a)
    for key, pattern in (("denoise", r"^denoise"), ("recompute", r"once more"), ("vae", r"VAE")):
        got = sum(v for n, v in shares.items() if re.search(pattern, n))
        assert abs(got - truth["stage_share"][key]) <= 0.03, (key, got, shares)


def test_default_profiler_options_give_steps_from_repeated_op_names(shared_analysis):
    """torch.profiler.profile() with nothing set records no shapes: the 5 batches of a conv net
    are the outermost repeat of its top-level op names, and the report names that evidence."""
    truth = TRUTH["default_options"]
    a = shared_analysis(FIXTURES / truth["trace"])
    assert len(a.steps) == truth["steps"]
    assert a.meta["step_source"] == "repeated op names (no record_shapes)"
    walls = a.steps["duration_ns"].to_numpy() / 1e9
    assert abs(walls.sum() / truth["wall_s"] - 1) <= 0.1


@pytest.mark.parametrize("form", ["cfg_two_calls", "cfg_batch2"])
def test_images_per_second_from_the_decoder_after_the_loop(form, shared_analysis):
    """The VAE's last convolution writes [1, 3, 128, 128]: one image per pipeline call, over the
    whole call (text encoder, denoise loop, VAE)."""
    truth = TRUTH[form]
    total = shared_analysis(FIXTURES / truth["trace"]).throughput.total
    assert total["unit"] == "images" and total["items"] == truth["throughput"]["items"] == 1
    assert abs(total["throughput"] / truth["throughput"]["per_s"] - 1) <= 0.10


def test_output_tokens_per_second_over_the_pipeline_call(shared_analysis):
    """An encoder, then 12 decode forwards: 12 tokens over the whole call (the encoder's time
    included), as vLLM's output throughput counts, next to the decode steps' own rate."""
    truth = TRUTH["enc_dec"]
    total = shared_analysis(FIXTURES / truth["trace"]).throughput.total
    assert total["items"] == truth["throughput"]["items"] == 12
    assert abs(total["pipeline_throughput"] / truth["throughput"]["per_s"] - 1) <= 0.10
    assert total["throughput"] > total["pipeline_throughput"]  # the decode steps alone run faster


def test_a_lone_embedding_after_the_last_forward_is_no_step(shared_analysis):
    """The VLM's generate loop embeds the token it will not feed: 10 LLM forwards, 10 steps."""
    truth = TRUTH["vlm"]
    a = shared_analysis(FIXTURES / truth["trace"])
    assert len(a.steps) == truth["steps"] == truth["calls"]["llm"] == 10


@pytest.mark.parametrize("form", ["policy_reward", "vlm", "enc_dec"])
def test_output_tokens_are_one_per_sequence_per_generating_forward(form, shared_analysis):
    """Output tokens apart from the tokens the forwards read: the policy's 8 forwards per round
    over 4 prompts, 3 rounds = 96 (its reward model's inputs are not output); the VLM's 10."""
    truth = TRUTH[form]
    total = shared_analysis(FIXTURES / truth["trace"]).throughput.total
    want = truth.get("output_tokens", truth["throughput"]["items"])
    per_s = truth.get("output_tokens_per_s", truth["throughput"]["per_s"])
    assert total["output_tokens"] == want
    assert abs(total["output_tokens_per_s"] / per_s - 1) <= 0.10


def test_speculative_output_tokens_are_the_targets_cache_growth(shared_analysis):
    """9 rounds: the target's cache holds 15 positions before the first verify (the 16-token
    prompt but its last) and is cut to 35 after the last: 20 tokens out, 20 - 9 = 11 of the
    36 drafts accepted (the truth's rounds_log, summed)."""
    truth = TRUTH["speculative"]
    total = shared_analysis(FIXTURES / truth["trace"]).throughput.total
    assert total["output_tokens"] == truth["output_tokens"] == sum(r["emitted"] for r in truth["rounds_log"]) == 20
    assert f"{truth['accepted_drafts']} of {truth['drafted']} drafts accepted" in total["output_tokens_how"]
    assert abs(total["output_tokens_per_s"] / truth["throughput"]["per_s"] - 1) <= 0.10


def test_without_a_cut_after_the_last_verify_its_tokens_are_unknown():
    """The last round's accepted tokens show only in the cut of the cache after it: a trace
    whose cut is gone says so, and states the rounds before it, rather than guess."""
    from tracekit.structure.accepted import CUT, accepted_tokens

    trace = tracekit.load(str(FIXTURES / TRUTH["speculative"]["trace"]))
    pipeline = find_pipeline(trace.ops)
    verifies = [j for j, s in enumerate(pipeline.stages) if s.kind == "verify"]
    ops = trace.ops.copy()
    names = ops["name"].astype(str).to_numpy()
    after = (ops["start"].to_numpy() >= pipeline.calls.end[verifies[-1]]) & (names == CUT)
    ops["name"] = np.where(after, "aten::narrow", names)
    tokens, how = accepted_tokens(ops, pipeline.calls, verifies)
    last = TRUTH["speculative"]["rounds_log"][-1]["emitted"]
    assert tokens is None and f"grew by {20 - last} token(s) over the first 8 of 9" in how


def test_a_generate_then_score_round_counts_the_samples_scored(shared_analysis):
    """3 rounds: the policy decodes 8 tokens for 4 prompts, the reward model reads the 4
    sequences [4, 16]: 4 samples a round, 12 in all, in the truth's unit."""
    truth = TRUTH["policy_reward"]
    a = shared_analysis(FIXTURES / truth["trace"])
    assert a.throughput.steps["items"].tolist() == [truth["batch"]] * truth["steps"]
    total = a.throughput.total
    assert total["unit"] == truth["throughput"]["unit"] == "samples" and total["items"] == truth["throughput"]["items"] == 12
    assert abs(total["throughput"] / truth["throughput"]["per_s"] - 1) <= 0.10
    assert total["output_tokens"] == truth["output_tokens"] == 96  # the tokens generated, reported apart


def test_beam_search_counts_one_sequence_not_its_beams(shared_analysis):
    """4 beams decode as 4 rows per forward; the topk over [1, 4 x 512] says they are one
    sequence's beams: 10 output tokens, not 40."""
    truth = TRUTH["beam"]
    a = shared_analysis(FIXTURES / truth["trace"])
    total = a.throughput.total
    assert len(a.steps) == truth["steps"] == 10
    assert total["output_tokens"] == truth["throughput"]["items"] == 10 and truth["beams"] == 4
    assert "4 beams per sequence" in total["output_tokens_how"]
    assert abs(total["output_tokens_per_s"] / truth["throughput"]["per_s"] - 1) <= 0.10
