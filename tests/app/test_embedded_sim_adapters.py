"""The embedded simulator serves a scenario's LoRA adapters (and nothing of LoRA without)."""

from rampwatch.app.run_config import RunConfig
from rampwatch.app.session.server import serve_command


def test_the_embedded_simulator_serves_the_scenarios_adapters():
    workload = {"adapters": [{"name": "sql", "weight": 3.0}, {"name": "chat", "weight": 1.0}]}
    command = serve_command(RunConfig("random"), seed=0, workload=workload)
    assert command is not None
    words = list(command.argv)
    tail = words[words.index("--enable-lora") :]
    assert tail[:5] == ["--enable-lora", "--max-loras", "1", "--max-lora-rank", "16"]
    assert tail[5:8] == ["--lora-modules", "sql=sim://sql", "chat=sim://chat"]


def test_without_adapters_no_lora_flag():
    command = serve_command(RunConfig("random"), seed=0)
    assert command is not None and not any(word.startswith("--") and "lora" in word for word in command.argv)
