"""`tracekit mcp`, driven by the MCP SDK's own client over stdio as an agent drives it: the
tools and their schemas, figures equal to `analyze --format json`, explain's FLOPs and bytes
against the raw trace's shapes, bad input as tool errors, one analysis for 20 concurrent
calls, hostile names escaped, a clean exit on EOF."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import shared
from helpers import run_cli
from synthetic import KinetoBuilder

try:
    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
except ImportError as exc:  # the `mcp` extra is not installed
    if os.environ.get("TRACEKIT_REQUIRE_MCP") == "1":
        raise ImportError(f"{exc}; TRACEKIT_REQUIRE_MCP=1 requires the mcp extra") from exc
    pytest.skip(f"the mcp extra is not installed ({exc.name})", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "fixtures" / "gpu" / "h100" / "h10080gbhbm3_llama3-8b_4layers_prefill1x512_decode_bs16_ncu_twin.json.gz"
BERT = shared("torch", "h100_bert_small_hf_inference.json.gz")
NSYS = shared("nsys", "h100_nvfuser_matmul_nsys2024.6.sqlite")
TOOLS = {"analyze", "top", "explain", "diff", "check"}


def _session(calls, errlog_path: Path):
    """Start `tracekit mcp`, run `calls(session)` (a coroutine function), return its result."""

    async def main():
        params = StdioServerParameters(command=sys.executable, args=["-m", "tracekit", "mcp"], cwd=str(ROOT),
                                       env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")})
        with open(errlog_path, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await calls(session)

    return anyio.run(main)


def _data(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def test_tools_are_listed_with_their_schemas(tmp_path):
    async def calls(s):
        return (await s.list_tools()).tools

    tools = {t.name: t for t in _session(calls, tmp_path / "err.txt")}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and tool.input_schema["type"] == "object" and tool.input_schema["properties"]
    assert tools["analyze"].input_schema["required"] == ["path"]
    assert set(tools["explain"].input_schema["required"]) == {"path", "kind", "name"}
    assert tools["explain"].input_schema["properties"]["kind"]["enum"] == ["kernel", "op", "block", "step"]
    limit = tools["top"].input_schema["properties"]["limit"]
    assert (limit["minimum"], limit["maximum"]) == (1, 500)


def _cli_json(path) -> dict:
    run = run_cli("analyze", path, "--format", "json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.parametrize("path", [BUNDLED, BERT, NSYS], ids=lambda p: p.name)
def test_analyze_returns_the_figures_of_format_json(path, tmp_path):
    async def calls(s):
        return _data(await s.call_tool("analyze", {"path": str(path)}))

    got, want = _session(calls, tmp_path / "err.txt"), _cli_json(path)
    assert got["headline"] == want["headline"]
    assert got["coverage"] == want["coverage"]
    assert got["what_to_fix_first"] == want["what_to_fix_first"]
    assert got["blocks"] == want["blocks"][:50] and got["steps"] == want["steps"][:50]
    assert got["devices"] == want["devices"] and got["device"] == want["device"]
    assert len(got["flags"]) == len(want["flags"])
    # the headline's figures as fields: the busy time is the devices' (one GPU in each of these traces)
    figures = got["headline_figures"]
    assert len(want["devices"]) == 1 and figures["busy_ns"] == want["devices"][0]["busy_ns"]
    assert [(b["phase"], b["block"]) for b in figures["blocks"]] == [(b["phase"], b["block"]) for b in want["blocks"][:len(figures["blocks"])]]
    for b, row in zip(figures["blocks"], want["blocks"]):
        assert b["share_of_busy"] == pytest.approx(row["share"], rel=1e-12)


def _raw_gemm_costs(path: Path, kernel_name: str) -> tuple[int, float, float]:
    """(kernels, FLOPs, bf16 bytes) of every kernel named `kernel_name`, from the raw trace: each
    kernel's External id -> its cpu_op's Input Dims [[M, K], [K, N]] -> 2MNK and 2(MK + KN + MN)."""
    events = json.load(gzip.open(path))["traceEvents"]
    dims = {e["args"]["External id"]: e["args"]["Input Dims"] for e in events
            if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    flops = byte_count = 0.0
    kernels = [e for e in events if e.get("cat") == "kernel" and e["name"] == kernel_name]
    for k in kernels:
        (m, kk), (k2, n) = dims[k["args"]["External id"]][:2]
        assert kk == k2
        flops += 2 * m * n * kk
        byte_count += 2 * (m * kk + kk * n + m * n)
    return len(kernels), flops, byte_count


def test_explain_the_top_gemm_gives_2mnk_and_the_bytes_of_its_shapes(tmp_path):
    async def calls(s):
        rows = _data(await s.call_tool("top", {"path": str(BUNDLED), "table": "kernels", "limit": 50}))["rows"]
        gemm = next(r for r in rows if r["kernel_class"] == "gemm")
        return gemm, _data(await s.call_tool("explain", {"path": str(BUNDLED), "kind": "kernel", "name": gemm["name"]}))

    gemm, answer = _session(calls, tmp_path / "err.txt")
    kernels, flops, byte_count = _raw_gemm_costs(BUNDLED, gemm["name"])
    assert answer["kernels"] == kernels == gemm["count"] > 0
    assert answer["flops"] == pytest.approx(flops, rel=1e-12)
    assert answer["bytes_read"] + answer["bytes_written"] == pytest.approx(byte_count, rel=1e-12)
    group = answer["by_shape"][0]
    assert group["op"] == "aten::mm" and group["dtype"] == "bf16" and "2·M·N·K" in group["formula"]
    (m, k), (_, n) = group["input_dims"]
    assert group["flops_per_kernel"] == 2 * m * n * k
    # the roofline terms a reader checks by hand: t_min = max(FLOPs / peak, bytes / bandwidth)
    peak = answer["roofline"]["matrix_peak_tflops"]["bf16"] * 1e12
    t_min = max(flops / peak, byte_count / answer["roofline"]["memory_bandwidth_bytes_per_s"]) * 1e9
    assert answer["t_min_ns"] == pytest.approx(t_min, rel=1e-9)
    assert answer["efficiency"] == pytest.approx(t_min / answer["time_ns"], rel=1e-9)


def test_bad_input_comes_back_as_tool_errors_with_the_one_line_reason(tmp_path):
    not_a_trace = tmp_path / "notes.json"
    not_a_trace.write_text("these are my notes, not a trace\n")

    async def calls(s):
        return [await s.call_tool("analyze", {"path": str(tmp_path / "missing.json")}),
                await s.call_tool("analyze", {"path": str(not_a_trace)}),
                await s.call_tool("explain", {"path": str(BUNDLED), "kind": "kernel", "name": "no_such_kernel"}),
                await s.call_tool("top", {"path": str(BUNDLED), "table": "ops", "limit": 0})]

    missing, junk, unknown, bad_limit = _session(calls, tmp_path / "err.txt")
    for result in (missing, junk, unknown):
        assert result.is_error and len(result.content) == 1 and "\n" not in result.content[0].text.strip()
    assert bad_limit.is_error and "limit" in bad_limit.content[0].text  # the schema's bound, checked by the SDK
    assert missing.content[0].text.endswith(f"{tmp_path / 'missing.json'}: no such file")
    cli = run_cli("analyze", not_a_trace)
    assert cli.returncode == 2
    assert junk.content[0].text.endswith(cli.stderr.strip().removeprefix("tracekit: error: "))
    assert "no kernel of that name" in unknown.content[0].text
    assert "Traceback" not in (tmp_path / "err.txt").read_text()


def test_twenty_concurrent_calls_on_one_path_analyse_it_once(tmp_path):
    async def calls(s):
        results = [None] * 20

        async def one(i):
            tool = ("analyze", "top")[i % 2]
            results[i] = _data(await s.call_tool(tool, {"path": str(BERT)}))

        async with anyio.create_task_group() as group:
            for i in range(20):
                group.start_soon(one, i)
        return results

    results = _session(calls, tmp_path / "err.txt")
    analysed = [l for l in (tmp_path / "err.txt").read_text().splitlines() if l.startswith("tracekit mcp: analysing")]
    assert len(analysed) == 1, analysed
    assert all(r == results[0] for r in results[0::2]) and all(r == results[1] for r in results[1::2])
    assert results[1]["rows"][0]["time_ns"] > 0


HOSTILE = "evil\x1b[2J\x1b]0;owned\x07kernel\u202e\u200b"


def test_a_kernel_name_with_terminal_escapes_comes_back_escaped(tmp_path):
    b = KinetoBuilder()
    b.op("aten::add", 0.0, 5.0, dims=[[1024], [1024], []], types=["float", "float", "Scalar"])
    b.kernel(HOSTILE, 1.0, 10.0, 2.0)
    trace = b.write(tmp_path / "hostile.json")

    async def calls(s):
        rows = await s.call_tool("top", {"path": str(trace), "table": "kernels"})
        shown = _data(rows)["rows"][0]["name"]
        return rows, shown, await s.call_tool("explain", {"path": str(trace), "kind": "kernel", "name": shown})

    rows, shown, explained = _session(calls, tmp_path / "err.txt")
    assert shown == "evil\\x1b[2J\\x1b]0;owned\\x07kernel\\u202e\\u200b"
    for result in (rows, explained):
        text = result.content[0].text + json.dumps(result.structured_content, ensure_ascii=False)
        assert not any(c in text for c in "\x1b\x07\u202e\u200b")
    assert _data(explained)["kernels"] == 1 and _data(explained)["name"] == shown


def test_the_server_exits_cleanly_on_eof():
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    proc = subprocess.run([sys.executable, "-m", "tracekit", "mcp"], input=json.dumps(init) + "\n", capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    reply = json.loads(proc.stdout.splitlines()[0])
    assert reply["id"] == 1 and reply["result"]["serverInfo"]["name"] == "tracekit"
    assert "Traceback" not in proc.stderr


def test_without_the_sdk_the_command_says_which_extra_in_one_line():
    # the SDK made unimportable in the child: the command's own check, not the SDK's error
    code = "import sys; sys.modules['mcp'] = None; sys.argv = ['tracekit', 'mcp']; from tracekit.cli.main import run; run()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["tracekit: error: tracekit mcp: the MCP SDK is not installed: pip install 'tracekit[mcp]'"]


def test_top_filtered_by_phase_and_block_sums_to_the_blocks_kernel_time(tmp_path):
    async def calls(s):
        kernels = _data(await s.call_tool("top", {"path": str(BUNDLED), "table": "kernels", "phase": "decode", "block": "ffn",
                                                  "limit": 500}))
        blocks = _data(await s.call_tool("top", {"path": str(BUNDLED), "table": "blocks", "phase": "decode"}))
        return kernels, blocks

    kernels, blocks = _session(calls, tmp_path / "err.txt")
    ffn = next(r for r in blocks["rows"] if r["block"] == "ffn")
    assert {r["phase"] for r in blocks["rows"]} == {"decode"} and blocks["total_rows"] == len(blocks["rows"])
    assert kernels["left_off"] == 0 and sum(r["time_ns"] for r in kernels["rows"]) == ffn["kernel_time_ns"]
    assert sum(r["count"] for r in kernels["rows"]) == ffn["count"]
