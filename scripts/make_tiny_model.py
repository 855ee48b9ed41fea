"""Write a tiny random-weight Llama (plus a byte-level BPE tokenizer) for the real-vLLM tests.

Deterministic: the same corpus, seed and config give the same files. Run with an
interpreter that has torch, transformers and tokenizers (the vLLM venv does).

    python scripts/make_tiny_model.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB_SIZE = 512
SEED = 1234

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_WORDS = (
    "the server queues requests when the batch is full and the cache holds keys and values "
    "for every token of every running sequence a scheduler admits waiting requests while "
    "blocks remain free prefill runs in chunks decode emits one token per step per request "
    "latency rises as load grows throughput rises until compute or memory bandwidth binds "
    "prompts share system messages and documents so prefix blocks are reused across users "
    "numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 time to first token inter token latency "
    "you are a helpful assistant answer the question summarise the document write code "
).split()


def corpus_lines(n_lines: int = 4000) -> list[str]:
    """A fixed pseudo-random text built from a small vocabulary (no downloads, no randomness)."""
    lines = []
    state = 17
    for i in range(n_lines):
        words = []
        for _ in range(12):
            state = (state * 1103515245 + 12345) % (2**31)
            words.append(_WORDS[state % len(_WORDS)])
        lines.append(" ".join(words) + f" {i}.")
    return lines


def build_tokenizer(out: Path):
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        corpus_lines(),
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=["<s>", "</s>", "<unk>", "<pad>"],
        show_progress=False,
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(out)
    return tok


def build_model(out: Path, vocab_size: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,  # vLLM's CPU attention kernel needs 64 here
        max_position_embeddings=2048,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=3,
        torch_dtype="float32",
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: make_tiny_model.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(out)
    build_model(out, vocab_size=len(tok))
    (out / "rampwatch-tiny.json").write_text(json.dumps({"vocab_size": len(tok), "seed": SEED}))
    print(f"tiny model written to {out} (vocab {len(tok)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
