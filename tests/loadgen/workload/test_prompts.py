import numpy as np
import pytest

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.prompts import SEPARATOR, compose_exact, random_token_ids, synth_text
from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.loadgen.workload.tokenizers import HFTokenizer, load_tokenizer

WORDS = (
    "the server queues requests when the batch is full and the cache holds keys and values "
    "prefill runs in chunks decode emits one token per step latency rises as load grows "
    "numbers 0 1 2 3 4 5 6 7 8 9 10 100 you are a helpful assistant, answer: (code) {x} = y;"
).split()


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    """A small byte-level BPE tokenizer saved like a Hugging Face model directory:
    sub-word merges make exact lengths need the decode/encode fix-up."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    rng = np.random.default_rng(0)
    corpus = [" ".join(rng.choice(WORDS, 14)) for _ in range(3000)]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        corpus, vocab_size=400, min_frequency=2, special_tokens=["<s>", "</s>", "<unk>"], show_progress=False
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    out = tmp_path_factory.mktemp("bpe")
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def bpe(bpe_dir):
    tok = load_tokenizer(str(bpe_dir))
    assert isinstance(tok, HFTokenizer)
    return tok


@pytest.mark.slow
def test_backend_shortcut_gives_the_wrapped_tokenizers_ids_and_text(bpe):
    # HFTokenizer calls the fast tokenizer's Rust backend directly; it must agree with
    # transformers' own encode/decode on text with specials, emoji and odd bytes.
    assert bpe._backend is not None
    rng = np.random.default_rng(3)
    alphabet = list("abc def\nghé😀\t") + ["<s>", "</s>", " the", "{x}"]
    for _ in range(200):
        text = "".join(rng.choice(alphabet, int(rng.integers(1, 60))))
        assert bpe.encode(text) == list(bpe._tok.encode(text, add_special_tokens=False))
        ids = rng.integers(0, bpe.vocab_size, int(rng.integers(1, 40))).tolist()
        assert bpe.decode(ids) == bpe._tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 333, 2048])
def test_synth_text_is_exact_with_a_subword_tokenizer(bpe, n):
    rng = np.random.default_rng(n)
    for _ in range(5):
        assert len(bpe.encode(synth_text(bpe, n, rng))) == n


@pytest.mark.parametrize("n", [1, 5, 1000])
def test_synth_text_is_exact_with_the_sim_tokenizer(n):
    sim = load_tokenizer(None)
    assert len(sim.encode(synth_text(sim, n, np.random.default_rng(0)))) == n


def test_random_ids_avoid_special_tokens(bpe):
    ids = random_token_ids(bpe, 5000, np.random.default_rng(1))
    assert not set(ids) & set(bpe.special_ids)
    assert len(set(ids)) > 100


def test_compose_keeps_the_prefix_and_hits_the_total(bpe):
    rng = np.random.default_rng(3)
    prefix = synth_text(bpe, 500, rng)
    for total in (520, 777, 1500):
        text, got = compose_exact(bpe, prefix, total, rng)
        assert text.startswith(prefix + SEPARATOR)
        assert got == total == len(bpe.encode(text))


def test_compose_reports_the_count_it_could_reach(bpe):
    prefix = synth_text(bpe, 100, np.random.default_rng(4))
    text, got = compose_exact(bpe, prefix, 50, np.random.default_rng(4))
    assert text == prefix and got == len(bpe.encode(text)) == 100


def test_factory_with_a_subword_tokenizer_counts_what_it_sends(bpe):
    sc = load_scenario("code-generation", overrides=[("workload.input_tokens", "{dist: uniform, min: 100, max: 400}")])
    factory = RequestFactory(sc, bpe)
    for _ in range(10):
        req = factory.next_request()
        assert len(bpe.encode(req.payload["prompt"])) == req.expected_prompt_tokens
        own = req.expected_prompt_tokens - req.extra["shared_prefix_tokens"]
        # The separator after the system prompt costs a token or two with this tokenizer.
        assert 100 <= own <= 403


def test_missing_tokenizer_is_a_user_error_naming_it():
    with pytest.raises(UserError, match="--tokenizer no-such-org/no-such-model: not a local directory"):
        load_tokenizer("no-such-org/no-such-model")


def test_tokenizer_path_that_is_a_file(tmp_path):
    f = tmp_path / "tok.json"
    f.write_text("{}")
    with pytest.raises(UserError, match=f"--tokenizer {f}: expected a directory"):
        load_tokenizer(str(f))


def test_project_tiny_model_tokenizer_if_built():
    from pathlib import Path

    path = Path.home() / ".cache" / "rampwatch" / "tiny-llama-v1"
    if not (path / "tokenizer.json").exists():
        pytest.skip("tiny model not built (scripts/setup_vllm.sh)")
    tok = load_tokenizer(str(path))
    rng = np.random.default_rng(0)
    assert [len(tok.encode(synth_text(tok, n, rng))) for n in (10, 500)] == [10, 500]
