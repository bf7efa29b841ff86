"""`tracekit mcp`: tracekit's analysis as tools a model can call (Model Context Protocol, stdio).

cache.py holds the analyses (one per file and options, computed once however many calls ask
together); fields.py turns tables and summaries into bounded JSON data with every trace string
escaped (reports.text.mcp_text); summary.py, explain.py and rows.py are the tools' bodies, plain
functions of an Analysis; server.py registers them with the `mcp` SDK (the `mcp` extra), whose
schemas come from their signatures. Only server.py imports the SDK.
"""
