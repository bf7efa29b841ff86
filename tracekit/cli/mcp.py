"""`tracekit mcp`: serve tracekit's analysis as Model Context Protocol tools over stdio."""

from __future__ import annotations

import click

from tracekit.errors import TraceError


@click.command()
def mcp() -> None:
    """Serve the analysis to an agent: a Model Context Protocol server on stdin / stdout with
    the tools analyze, top, explain, diff and check (needs the `mcp` extra:
    pip install 'tracekit[mcp]'). It ends when the client closes stdin."""
    try:
        from tracekit.mcp_server.server import serve
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in ("mcp", "mcp_types", "pydantic", "anyio"):
            raise
        raise TraceError("tracekit mcp", "the MCP SDK is not installed: pip install 'tracekit[mcp]'") from None
    serve()
