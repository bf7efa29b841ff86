"""Which runtime / driver calls the launches table keeps: those that put work on a GPU, and
the synchronisations that wait for it (the idle-time breakdown needs to see the host blocked)."""

import re

# cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernelEx, cudaGraphLaunch, cudaMemcpyAsync,
# hipExtModuleLaunchKernel, hipGraphLaunch, ... and nsys's versioned names (..._v7000).
LAUNCH_API = re.compile(r"LaunchKernel|LaunchCooperativeKernel|GraphLaunch|Memcpy|Memset|ModuleLaunch|ExtLaunch|cuLaunch|Synchronize")
# cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, hipDeviceSynchronize,
# hipStreamSynchronize, cuCtxSynchronize, and the copies that block the host until the GPU is
# done (not ...Async): cudaMemcpy, cudaMemcpy2D/3D, cudaMemcpyToSymbol/FromSymbol, cudaMemcpyPeer,
# hipMemcpyWithStream (the blocking copy PyTorch uses on ROCm), hipMemcpyDtoH/HtoD/DtoD,
# cuMemcpy, cuMemcpyDtoH_v2, ...
SYNC_API = re.compile(r"Synchronize|^(?:cuda|hip)Memcpy(?:2D|3D)?(?:ToSymbol|FromSymbol|Peer)?(?:WithStream)?(?:_v\d+)?$"
                      r"|^hipMemcpy[DH]to[DH](?:_v\d+)?$|^cuMemcpy(?:[DH]to[DH]|2D|3D|Peer)?(?:_v\d+)?$")
# cudaStreamBeginCapture / hipStreamEndCapture, ...: where a CUDA/HIP graph's capture starts and
# ends on its thread. Not GPU work, but the launches between them are that graph's nodes
# (tracekit.trace.capture_pairing reads them).
CAPTURE_API = re.compile(r"StreamBeginCapture|StreamEndCapture")
