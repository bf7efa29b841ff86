"""Small Kineto traces built by hand, for rules whose shared fixtures are not public
(DualPipe chunks, DeepEP kernels, torch.compile regions). Every event is written out the
way torch.profiler writes it: µs floats, `ac2g` correlation ids, cpu_op / user_annotation."""

from __future__ import annotations

import json


class KinetoBuilder:
    def __init__(self, device_name: str = "NVIDIA H100 80GB HBM3"):
        self.events: list[dict] = []
        self.corr = 0
        self.device_name = device_name
        self.header: dict = {}  # top-level keys beside traceEvents (distributedInfo, ...)

    def range(self, name: str, ts: float, dur: float, tid: int = 1) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur})

    def frame(self, name: str, ts: float, dur: float, tid: int = 1) -> None:
        """A Python frame as torch.profiler(with_stack=True) writes it: `python_function`,
        named "file.py(line): function"."""
        self.events.append({"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
                            "args": {"Python id": len(self.events), "Ev Idx": len(self.events)}})

    def op(self, name: str, ts: float, dur: float, tid: int = 1, dims=None, types=None, **extra) -> None:
        args = {"Input Dims": dims or [], "Input type": types or [], **extra}
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args})

    def kernel(self, name: str, launch_ts: float, gpu_ts: float, dur: float, tid: int = 1, stream: int = 7,
               launch: str = "cudaLaunchKernel", **extra) -> None:
        """`launch`: the runtime / driver call (`cuLaunchKernel` is a `cuda_driver` event, as
        extensions such as DeepGEMM launch through the driver API)."""
        self.corr += 1
        category = "cuda_driver" if launch.startswith("cu") and not launch.startswith("cuda") else "cuda_runtime"
        self.events.append({"ph": "X", "cat": category, "name": launch, "pid": 1, "tid": tid,
                            "ts": launch_ts, "dur": 1.0, "args": {"correlation": self.corr}})
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": gpu_ts, "dur": dur,
                            "args": {"correlation": self.corr, "device": 0, "stream": stream,
                                     "grid": [132, 1, 1], "block": [128, 1, 1], **extra}})

    def call(self, name: str, ts: float, dur: float = 1.0, tid: int = 1, **args) -> int:
        """A runtime call with no GPU activity of its own (a launch into a graph capture,
        cudaStreamBeginCapture, ...); `kernel=` names the kernel as ROCm's roctracer does."""
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
                            "args": {"correlation": self.corr, **args}})
        return self.corr

    def graph_replay(self, names: list[str], launch_ts: float, gpu_ts: float, dur: float, tid: int = 1, stream: int = 7,
                     launch: str = "cudaGraphLaunch") -> None:
        """One graph launch and the kernels it runs, back to back, each `dur` long: they share
        the launch's correlation id and carry no grid (as a ROCm graph replay records them)."""
        corr = self.call(launch, launch_ts, 2.0, tid)
        for i, name in enumerate(names):
            self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": gpu_ts + i * dur,
                                "dur": dur, "args": {"correlation": corr, "device": 0, "stream": stream}})

    def write(self, path) -> str:
        doc = {"traceEvents": self.events,
               "deviceProperties": [{"id": 0, "name": self.device_name, "totalGlobalMem": 85899345920}], **self.header}
        path.write_text(json.dumps(doc))
        return str(path)
