"""Write a tiny LoRA adapter for the tiny test model (rank 8 on q_proj and v_proj):
``adapter_config.json`` and ``adapter_model.safetensors`` in PEFT's layout, as vLLM's
``--lora-modules NAME=PATH`` loads them.

Run with the vLLM venv's interpreter (it has torch and safetensors):

    VLLM_PYTHON scripts/make_tiny_lora.py MODEL_DIR OUT_DIR [SEED]

The weights are small random numbers (seeded): the adapter changes the answers a little,
which is all a load test needs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RANK = 8
TARGETS = ("q_proj", "v_proj")


def main(argv: list[str]) -> int:
    import torch
    from safetensors.torch import save_file

    model_dir, out_dir = Path(argv[0]), Path(argv[1])
    seed = int(argv[2]) if len(argv) > 2 else 0
    config = json.loads((model_dir / "config.json").read_text())
    hidden = config["hidden_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    out_features = {
        "q_proj": config["num_attention_heads"] * head_dim,
        "v_proj": config["num_key_value_heads"] * head_dim,
    }
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for target in TARGETS:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{target}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(RANK, hidden, generator=generator) * 0.01
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(out_features[target], RANK, generator=generator) * 0.01
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / "adapter_model.safetensors"))
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(model_dir),
        "r": RANK,
        "lora_alpha": 16,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": list(TARGETS),
        "fan_in_fan_out": False,
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
    }
    (out_dir / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
