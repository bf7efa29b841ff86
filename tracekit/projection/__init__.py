"""Projection: what a measured run would do elsewhere. Takes `analysis.build`'s result (never
rebuilds it); gives tables.

bounds.py: what bounds each kernel on the source, and the rule that moves its time (the roof
part by the target's roof, the rest kept). ranges.py: the error bands measured on the shared
pairs. device.py: the same run on another GPU. replay.py: the per-stream replay that turns
projected kernel times into step times, the host timeline apart. projected_steps.py: step windows and
throughput moved with their kernels. notes.py: the assumptions and the throughput verdict in
words. tp.py (roles: tp_roles.py): the same run at another tensor-parallel degree, on the
same or another GPU. rank_shapes.py: the ranks of one job side by side.
"""
