"""Which runtime / driver calls put work on a GPU (the rest are queries and syncs)."""

import re

# cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernelEx, cudaGraphLaunch, cudaMemcpyAsync,
# hipExtModuleLaunchKernel, hipGraphLaunch, ... and nsys's versioned names (..._v7000).
LAUNCH_API = re.compile(r"LaunchKernel|LaunchCooperativeKernel|GraphLaunch|Memcpy|Memset|ModuleLaunch|ExtLaunch|cuLaunch")
