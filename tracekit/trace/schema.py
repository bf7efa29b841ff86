"""The Trace contract's columns: each table's columns in order, with their dtypes.

Times are int64 nanoseconds from the start of the capture (the earliest event in the
file). Row references between tables (kernel -> launch, kernel -> op, op -> parent, ...)
are integer row positions into the other table, -1 (NO_ROW) when absent.
"""

NO_ROW = -1
# The kernel table's `kind` labels, in code order (both parsers code the column with them).
GPU_KINDS = ("kernel", "memcpy", "memset")

# Columns of each table, in order, with their dtypes. Tables are built through
# `make_table` (or tables.ColumnTable) so that a table is the same shape whatever the source.
KERNEL_COLUMNS: dict[str, str] = {
    "kind": "category",  # kernel | memcpy | memset
    "name": "category",
    "short_name": "category",  # nsys shortName; None for Kineto
    "device": "int32",
    "stream": "int64",
    "start": "int64",
    "end": "int64",
    "pid": "int64",  # host process that launched it, -1 when the format does not say
    "correlation": "int64",
    "grid_x": "int32", "grid_y": "int32", "grid_z": "int32",
    "block_x": "int32", "block_y": "int32", "block_z": "int32",
    "registers": "int32",
    "shared_memory": "int64",
    "bytes": "int64",  # memcpy / memset bytes, -1 for kernels
    "copy_kind": "category",  # HtoD, DtoH, DtoD, ... for memcpy
    "rank": "int32",
    # collective metadata (Kineto `Collective name`, `In msg nelems`, ...; NCCL NVTX in nsys)
    "collective": "category",
    "coll_in_elems": "int64",
    "coll_out_elems": "int64",
    "coll_group_size": "int32",
    "coll_dtype": "category",
    "coll_group": "category",
    # a cost the trace itself states (Inductor's kernel_flop / kernel_num_gb), NaN when absent
    "meta_flops": "float64",
    "meta_bytes": "float64",
}

LAUNCH_COLUMNS: dict[str, str] = {
    "name": "category",
    "pid": "int64",
    "tid": "int64",
    "start": "int64",
    "end": "int64",
    "correlation": "int64",
    # the kernel a launch call names, where the runtime records it (ROCm's roctracer does, CUDA's
    # runtime events do not): a graph capture's launches name the kernels the graph will run
    "kernel": "category",
}

OP_COLUMNS: dict[str, str] = {
    "name": "category",
    "pid": "int64",
    "tid": "int64",
    "start": "int64",
    "end": "int64",
    "external_id": "int64",
    "sequence": "int64",  # autograd sequence number: links a backward op to its forward op
    "input_dims": "object",  # list per input: list[int] for tensors, [] for scalars / None
    "input_types": "object",  # list[str]: "float", "c10::BFloat16", "Scalar", ...
    "concrete_inputs": "object",  # list[str]: values of scalar inputs, "" for tensors
    "input_strides": "object",  # list per input: list[int] strides for tensors (0 = broadcast), None when not recorded
    "meta_flops": "float64",  # Inductor's kernel_flop on its launch wrapper, NaN when absent
    "meta_bytes": "float64",  # Inductor's kernel_num_gb x 1e9, NaN when absent
}

RANGE_COLUMNS: dict[str, str] = {
    "name": "category",
    # user: record_function / NVTX on a CPU thread; gpu: GPU-side user annotation;
    # python: a Python frame (torch.profiler with_stack); nvtx:<domain> for named domains.
    "domain": "category",
    "pid": "int64",
    "tid": "int64",  # the thread for CPU ranges, the device for GPU ranges
    "start": "int64",
    "end": "int64",
}

# Columns linking adds (see link.py).
LINK_COLUMNS: dict[str, str] = {
    "launch": "int64",  # row in launches, -1 when no launch was captured
    "op": "int64",  # innermost op enclosing the launch on the launching thread
    "range": "int64",  # innermost user range enclosing the launch (walk `parent` for the stack)
    "frame": "int64",  # innermost Python frame enclosing the launch
    "gpu_range": "int64",  # innermost GPU-side annotation enclosing the kernel on its device
    "graph_launch": "bool",  # launched by cudaGraphLaunch / hipGraphLaunch
    "launched_before_capture": "bool",  # no launch row: it was issued before the window opened
    # `op` is a captured op: graph-capture pairing (capture_pairing.py) gave this graph-replayed
    # kernel the op its launch had when the graph was captured
    "capture_op": "bool",
}
