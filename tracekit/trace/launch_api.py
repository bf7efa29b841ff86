"""The runtime / driver calls of CUDA and HIP, by what they do: launch a kernel, launch a
graph, copy or set memory, wait for the GPU, begin or end a graph capture. The one place
their names are spelled: the parsers keep the launches table's calls by them, trace/link
tells kernel launches from graph launches, graph-capture pairing finds a graph's nodes, and
the idle-time breakdown sees the host blocked. Matched anywhere in the name, so nsys's
versioned names (cudaLaunchKernel_v7000) match too."""

import re

# cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernelEx, cudaLaunchCooperativeKernel,
# hipModuleLaunchKernel, hipExtModuleLaunchKernel, hipExtLaunchKernel, ...
_KERNEL = r"LaunchKernel|LaunchCooperativeKernel|cuLaunch|ModuleLaunch|ExtLaunch"
# cudaMemcpyAsync, cudaMemsetAsync, hipMemcpyWithStream, cuMemcpyDtoH_v2, ...
_COPY, _SET = r"Memcpy", r"Memset"
_MEMORY = f"{_COPY}|{_SET}"
_GRAPH = r"GraphLaunch"  # cudaGraphLaunch, hipGraphLaunch
_SYNCHRONIZE = r"Synchronize"

# Calls that launch one kernel (not graph launches, copies or synchronisations).
KERNEL_LAUNCH_API = re.compile(_KERNEL)
# Calls that replay a whole captured graph.
GRAPH_LAUNCH_API = re.compile(_GRAPH)
# Calls that put a node into a graph being captured (not a graph launch, not a synchronisation).
NODE_API = re.compile(f"{_KERNEL}|{_MEMORY}")
NOT_NODE_API = re.compile(f"{_GRAPH}|{_SYNCHRONIZE}")
# Every call the launches table keeps: those that put work on a GPU, and the synchronisations
# that wait for it (the idle-time breakdown needs to see the host blocked).
LAUNCH_API = re.compile(f"{_KERNEL}|{_GRAPH}|{_MEMORY}|{_SYNCHRONIZE}")
# cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, hipDeviceSynchronize,
# hipStreamSynchronize, cuCtxSynchronize, and the copies that block the host until the GPU is
# done (not ...Async): cudaMemcpy, cudaMemcpy2D/3D, cudaMemcpyToSymbol/FromSymbol, cudaMemcpyPeer,
# hipMemcpyWithStream (the blocking copy PyTorch uses on ROCm), hipMemcpyDtoH/HtoD/DtoD,
# cuMemcpy, cuMemcpyDtoH_v2, ...
SYNC_API = re.compile(_SYNCHRONIZE + r"|^(?:cuda|hip)Memcpy(?:2D|3D)?(?:ToSymbol|FromSymbol|Peer)?(?:WithStream)?(?:_v\d+)?$"
                      r"|^hipMemcpy[DH]to[DH](?:_v\d+)?$|^cuMemcpy(?:[DH]to[DH]|2D|3D|Peer)?(?:_v\d+)?$")
# cudaStreamBeginCapture / hipStreamEndCapture, ...: where a CUDA/HIP graph's capture starts and
# ends on its thread. Not GPU work, but the launches between them are that graph's nodes
# (tracekit.trace.capture_pairing reads them).
BEGIN_CAPTURE_API = re.compile(r"StreamBeginCapture")
END_CAPTURE_API = re.compile(r"StreamEndCapture")
CAPTURE_API = re.compile(f"{BEGIN_CAPTURE_API.pattern}|{END_CAPTURE_API.pattern}")
# A node that copies memory, and one that sets it (rather than a kernel).
COPY_API = re.compile(_COPY)
SET_API = re.compile(_SET)
