"""Cost of --model on a long serving trace: the SGLang decode step tiled into many steps.

    python benchmarks/tile_kineto.py ../shared/fixtures/torch/mi300x_sglang_qwen3-8b_decode_bs32.json.gz /tmp/tiled.json --min-bytes 1.2e8
    python benchmarks/bench_model.py /tmp/tiled.json

Measured here (2 shared cores, 214 steps, 119k kernels): analyze 4.7 s, with --model 6.6 s, calibrate 1.5 s.
"""
import time, sys
import tracekit
from tracekit.model import ModelOptions
t0 = time.perf_counter(); a = tracekit.analyze(sys.argv[1]); t1 = time.perf_counter()
b = tracekit.analyze(sys.argv[1], model=ModelOptions('../shared/models/qwen3-8b.config.json')); t2 = time.perf_counter()
print(f"plain {t1-t0:.2f}s  with model {t2-t1:.2f}s  steps {len(b.model.steps)} kernels {len(b.kernels)} mape {b.model.summary['mape']:.3f} cov {b.coverage['modeled_share']:.3f}")
from tracekit.model.calibrate import calibrate
t3 = time.perf_counter(); r = calibrate([b]); print(f"calibrate {time.perf_counter()-t3:.2f}s", r['devices']['MI300X']['steps'], r['devices']['MI300X']['fit'])
