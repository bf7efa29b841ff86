"""Cost-model coverage and roofline sanity on every shared trace that carries shapes.

    python benchmarks/coverage_report.py [TRACE ...]

For each trace: the share of GPU kernel time with a cost (and by source), the share of
modeled kernel time above 105% of the peak roofline, and the top kernels without a cost.
"""

from __future__ import annotations

import pathlib
import sys

from tracekit.api import analyze

SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "torch"
DEFAULT = ["h100_qwen1.5-0.5b_hf_inference.json.gz", "h100_bert_small_hf_inference.json.gz", "b200_vllm_tp8_rank0_eager.json.gz",
           "mi300x_resnet_act_checkpoint_rank0.json.gz", "v100_dlrm_8ranks/rank0.json.gz", "v100_resnet50_train_legacy2021.json.gz"]


def _pct(v) -> str:
    return "— (unknown: under half the kernel time is costed)" if v is None else f"{v:.1%}"


def main(paths: list[str]) -> None:
    for path in paths or [str(SHARED / p) for p in DEFAULT]:
        a = analyze(path)
        c = a.coverage
        sources = ", ".join(f"{k} {v:.1%}" for k, v in c["modeled_share_by_source"].items())
        print(f"{pathlib.Path(path).name} [{a.device.key if a.device else 'unknown GPU'}]: modeled {_pct(c['modeled_share'])} "
              f"of kernel time ({sources}); above 105% of peak {_pct(c['over_peak_share'])} of modeled time "
              f"({c['over_peak_kernels']} kernels); roofline efficiency {_pct(c['efficiency'])}")
        for u in c["top_unmodeled"][:4]:
            print(f"    unmodeled {u['share']:.1%}  {u['name'][:70]}  -- {u['reason']}")


if __name__ == "__main__":
    main(sys.argv[1:])
