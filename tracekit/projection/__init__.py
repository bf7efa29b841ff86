"""Projection: what a measured run would do elsewhere. Takes an Analysis; gives tables.

device.py: the same run on another GPU (each kernel keeps its achieved fraction of its
binding roof; the host timeline stays as measured). replay.py: the per-stream replay that
turns projected kernel times into step times. tp.py: the same run at another tensor-parallel
degree (sharded blocks shrink, replicated ones do not).
"""
