"""The runtime / driver call names of tracekit/trace/launch_api.py, checked against the names
the CUDA and HIP runtimes publish (and nsys's versioned spellings, `_v7000`)."""

from tracekit.trace.launch_api import (BEGIN_CAPTURE_API, CAPTURE_API, END_CAPTURE_API, GRAPH_LAUNCH_API, KERNEL_LAUNCH_API,
                                       LAUNCH_API, NODE_API, NOT_NODE_API, SYNC_API)

KERNEL_LAUNCHES = ["cudaLaunchKernel", "cudaLaunchKernelExC_v11060", "cuLaunchKernelEx", "cudaLaunchCooperativeKernel",
                   "hipLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "hipExtLaunchKernel"]
GRAPH_LAUNCHES = ["cudaGraphLaunch", "cudaGraphLaunch_v10000", "hipGraphLaunch"]
COPIES = ["cudaMemcpyAsync", "cudaMemsetAsync", "hipMemcpyWithStream", "cuMemcpyDtoH_v2"]
SYNCS = ["cudaDeviceSynchronize", "cudaStreamSynchronize", "hipStreamSynchronize", "cuCtxSynchronize"]
OTHER = ["cudaGetDevice", "cudaEventRecord", "cudaFuncGetAttributes", "hipMalloc", "cudaStreamIsCapturing"]


def test_each_call_is_told_by_what_it_does():
    assert all(KERNEL_LAUNCH_API.search(n) and not GRAPH_LAUNCH_API.search(n) for n in KERNEL_LAUNCHES)
    assert all(GRAPH_LAUNCH_API.search(n) and not KERNEL_LAUNCH_API.search(n) for n in GRAPH_LAUNCHES)
    assert not any(KERNEL_LAUNCH_API.search(n) for n in COPIES + SYNCS + OTHER)


def test_the_launches_table_keeps_work_and_waits_only():
    assert all(LAUNCH_API.search(n) for n in KERNEL_LAUNCHES + GRAPH_LAUNCHES + COPIES + SYNCS)
    assert not any(LAUNCH_API.search(n) for n in OTHER)


def test_a_captured_graph_node_is_a_kernel_or_copy_not_a_graph_launch_or_wait():
    def node(n):
        return bool(NODE_API.search(n)) and not NOT_NODE_API.search(n)
    assert all(node(n) for n in KERNEL_LAUNCHES + COPIES)
    assert not any(node(n) for n in GRAPH_LAUNCHES + SYNCS + OTHER)


def test_sync_and_capture_calls():
    # a blocking copy waits for the GPU, an async one does not
    assert all(SYNC_API.search(n) for n in SYNCS + ["cudaMemcpy", "hipMemcpyDtoH", "cuMemcpyDtoH_v2"])
    assert not any(SYNC_API.search(n) for n in KERNEL_LAUNCHES + GRAPH_LAUNCHES + ["cudaMemcpyAsync", "hipMemcpyAsync"])
    assert BEGIN_CAPTURE_API.search("cudaStreamBeginCapture") and END_CAPTURE_API.search("hipStreamEndCapture")
    assert not BEGIN_CAPTURE_API.search("cudaStreamEndCapture")
    assert CAPTURE_API.search("cudaStreamBeginCapture_v10000") and not CAPTURE_API.search("cudaStreamIsCapturing")
