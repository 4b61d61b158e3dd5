"""The tiny model factory: deterministic, self-contained, saveable."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from coral.policy import tiny_policy
from coral.policy.tiny import build_tokenizer

CORPUS = ["def add(a, b):\n    return a + b\n", "def mul(a, b):\n    return a * b\n"] * 20


def small(**kw):
    return tiny_policy(d_model=64, n_layers=2, **kw)


def test_same_seed_builds_identical_weights():
    a, b = small(seed=3), small(seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters(), strict=True))


def test_different_seeds_build_different_weights():
    a, b = small(seed=1), small(seed=2)
    assert not torch.equal(a.model.lm_head.weight, b.model.lm_head.weight)


def test_building_leaves_the_global_rng_alone():
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    small(seed=9)
    assert torch.equal(torch.rand(1), expected)


def test_byte_level_tokenizer_round_trips_any_text():
    tokenizer = build_tokenizer()
    text = "déf f(x):\n\treturn '✓' + x  # 🙂"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    assert len(tokenizer) == 260


def test_bpe_trained_on_a_corpus_makes_sequences_shorter():
    byte_level, bpe = build_tokenizer(), build_tokenizer(CORPUS, vocab_size=300)
    assert len(bpe.encode(CORPUS[0])) < len(byte_level.encode(CORPUS[0])) / 2
    assert bpe.decode(bpe.encode(CORPUS[0], add_special_tokens=False)) == CORPUS[0]


def test_bpe_training_is_deterministic():
    assert build_tokenizer(CORPUS, 300).get_vocab() == build_tokenizer(CORPUS, 300).get_vocab()


def test_special_tokens_in_a_rendered_chat_are_single_tokens():
    policy = small()
    ids = policy.encode(policy.render([{"role": "user", "content": "hi"}]))
    assert ids[0] == policy.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert policy.tokenizer.eos_token_id in ids


def test_saves_and_loads_with_plain_transformers(tmp_path):
    policy = small(corpus=CORPUS, vocab_size=300)
    policy.model.save_pretrained(tmp_path)
    policy.tokenizer.save_pretrained(tmp_path)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(tmp_path), AutoTokenizer.from_pretrained(tmp_path)
    ids = torch.tensor([tokenizer.encode(CORPUS[0])])
    assert tokenizer.encode(CORPUS[0]) == policy.tokenizer.encode(CORPUS[0])
    torch.testing.assert_close(model(input_ids=ids).logits, policy.model(input_ids=ids).logits)
    assert tokenizer.chat_template == policy.tokenizer.chat_template
