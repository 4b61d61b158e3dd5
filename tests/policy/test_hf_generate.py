"""HFPolicy sampling: batching, logprobs, stopping, seeding and length limits."""

import pytest
import torch

from coral.policy import DEFAULT_CHAT_TEMPLATE, GenerationRequest, HFPolicy, SamplingParams, user
from coral.policy.openai import render_chatml
from coral.policy.tiny import build_tokenizer


def requests(n=4, **sampling):
    sampling = {"max_new_tokens": 12, **sampling}
    return [GenerationRequest(user("x" * (3 * i + 1)), SamplingParams(**sampling)) for i in range(n)]


def test_one_completion_per_request_in_order(tiny):
    reqs = requests(5, seed=1)
    outs = tiny.generate(reqs)
    assert [o.prompt_ids for o in outs] == [tiny.encode(tiny.render(r.messages)) for r in reqs]


def test_logprobs_align_with_completion_ids(tiny):
    for out in tiny.generate(requests(3, seed=0)):
        assert len(out.logprobs) == len(out.completion_ids) == 12
        assert all(lp <= 0 for lp in out.logprobs)


def test_forward_logprobs_match_generate_logprobs_at_temperature_one(tiny):
    outs = tiny.generate(requests(4, seed=3, temperature=1.0))
    logprobs, mask = tiny.forward([o.prompt_ids for o in outs], [o.completion_ids for o in outs])
    for row, out in enumerate(outs):
        torch.testing.assert_close(logprobs[row][mask[row]], torch.tensor(out.logprobs), atol=1e-4, rtol=0)


def test_forward_with_the_sampling_temperature_matches_generate(tiny):
    outs = tiny.generate(requests(2, seed=3, temperature=0.7))
    logprobs, mask = tiny.forward(
        [o.prompt_ids for o in outs], [o.completion_ids for o in outs], temperature=0.7
    )
    torch.testing.assert_close(logprobs[0][mask[0]], torch.tensor(outs[0].logprobs), atol=1e-4, rtol=0)


def test_seeded_generation_is_reproducible(tiny):
    first = tiny.generate(requests(3, seed=7))
    second = tiny.generate(requests(3, seed=7))
    assert [o.completion_ids for o in first] == [o.completion_ids for o in second]


def test_a_seeded_request_ignores_its_batch_companions(tiny):
    alone = tiny.generate(requests(1, seed=5))[0]
    batched = tiny.generate(requests(1, seed=5) + requests(3, temperature=1.0))[0]
    assert alone.completion_ids == batched.completion_ids


def test_requests_that_finish_early_leave_the_batch_without_changing_the_others(tiny):
    # budgets 2, 5, 9, 14: the batch shrinks three times; each seeded request samples what it samples alone
    reqs = [GenerationRequest(user("y" * (2 * i + 1)), SamplingParams(max_new_tokens=n, seed=i, temperature=1.0))
            for i, n in enumerate((9, 2, 14, 5))]
    batched = tiny.generate(reqs)
    for req, out in zip(reqs, batched, strict=True):
        alone = tiny.generate([req])[0]
        assert out.completion_ids == alone.completion_ids and len(out.completion_ids) == req.sampling.max_new_tokens
        torch.testing.assert_close(torch.tensor(out.logprobs), torch.tensor(alone.logprobs), atol=1e-4, rtol=0)


def test_identical_prompts_prefilled_once_sample_as_they_would_alone(tiny):
    # prompts a, b, a, a (different lengths, so the batch is padded): a's cache is computed once and copied
    prompts = [user("aaaa"), user("b"), user("aaaa"), user("aaaa")]
    reqs = [GenerationRequest(m, SamplingParams(max_new_tokens=10, seed=i, temperature=1.0)) for i, m in enumerate(prompts)]
    batched = tiny.generate(reqs)
    assert len({tuple(o.completion_ids) for o in batched}) == 4  # four seeds, four different samples
    for req, out in zip(reqs, batched, strict=True):
        alone = tiny.generate([req])[0]
        assert out.completion_ids == alone.completion_ids and out.prompt_ids == alone.prompt_ids
        torch.testing.assert_close(torch.tensor(out.logprobs), torch.tensor(alone.logprobs), atol=1e-4, rtol=0)


def test_different_seeds_sample_different_tokens(tiny):
    a, b = (tiny.generate(requests(1, seed=s, max_new_tokens=20))[0] for s in (1, 2))
    assert a.completion_ids != b.completion_ids


def test_temperature_zero_picks_the_most_likely_token(tiny):
    out = tiny.generate(requests(1, temperature=0.0))[0]
    ids = torch.tensor([out.prompt_ids + out.completion_ids])
    with torch.no_grad():
        logits = tiny.model(input_ids=ids).logits[0, len(out.prompt_ids) - 1 : -1]
    assert logits.argmax(-1).tolist() == out.completion_ids


def test_tiny_top_p_reduces_sampling_to_greedy_with_certain_logprobs(tiny):
    greedy = tiny.generate(requests(1, temperature=0.0))[0]
    nucleus = tiny.generate(requests(1, temperature=1.0, top_p=1e-6, seed=0))[0]
    assert nucleus.completion_ids == greedy.completion_ids and nucleus.logprobs == [0.0] * 12


def test_max_new_tokens_ends_with_finish_reason_length(tiny):
    out = tiny.generate(requests(1, max_new_tokens=5, seed=0))[0]
    assert (len(out.completion_ids), out.finish_reason) == (5, "length")


def test_eos_ends_the_completion_and_stays_in_ids_but_not_text(tiny):
    eos = tiny.tokenizer.eos_token_id
    boost = torch.zeros(len(tiny.tokenizer))
    boost[eos] = 100.0
    tiny.model.lm_head.register_forward_hook(lambda module, args, output: output + boost)
    out = tiny.generate(requests(1, seed=0))[0]
    assert (out.completion_ids, out.text, out.finish_reason) == ([eos], "", "stop")


def test_stop_string_truncates_text_and_ends_ids_at_the_stopping_token(tiny):
    # a seed whose free sample is long enough, and two of its tokens: a string the model produces again under it
    seed, free = next((s, f) for s in range(20) if len((f := tiny.generate(requests(1, seed=s, max_new_tokens=30))[0])
                                                      .completion_ids) >= 10)
    stop = tiny.decode(free.completion_ids[5:7])
    out = tiny.generate(requests(1, seed=seed, max_new_tokens=30, stop=(stop,)))[0]
    assert out.finish_reason == "stop" and stop not in out.text
    assert stop in tiny.decode(out.completion_ids) and stop not in tiny.decode(out.completion_ids[:-1])


def test_prompt_longer_than_max_len_raises_a_clear_error(tiny):
    long = [GenerationRequest(user("y" * 400), SamplingParams(max_new_tokens=4))]
    with pytest.raises(ValueError, match="max length is 256"):
        tiny.generate(long)


def test_left_truncation_keeps_the_end_of_a_long_prompt(tiny):
    policy = HFPolicy(tiny.model, tiny.tokenizer, truncate_prompt_left=True)
    out = policy.generate([GenerationRequest(user("y" * 400), SamplingParams(max_new_tokens=4, seed=0))])[0]
    full = policy.encode(policy.render(user("y" * 400)))
    assert out.prompt_ids == full[-252:] and len(out.completion_ids) == 4


def test_generation_stops_at_the_model_max_length(tiny):
    prompt = user("z" * 230)
    room = 256 - len(tiny.encode(tiny.render(prompt)))
    out = tiny.generate([GenerationRequest(prompt, SamplingParams(max_new_tokens=100, seed=0))])[0]
    assert (len(out.completion_ids), out.finish_reason) == (room, "length")


def test_tokenizer_without_pad_token_still_batches(tiny):
    tokenizer = build_tokenizer()
    tokenizer.pad_token = None
    policy = HFPolicy(tiny.model, tokenizer)
    batched = policy.generate(requests(3, seed=2))
    assert [o.completion_ids for o in batched] == [
        policy.generate([r])[0].completion_ids for r in requests(3, seed=2)
    ]


def test_tokenizer_without_chat_template_renders_coral_default(tiny):
    tokenizer = build_tokenizer()
    tokenizer.chat_template = None
    chat = user("hi", system="sys")
    assert HFPolicy(tiny.model, tokenizer).render(chat) == render_chatml(chat)


def test_default_template_is_chatml_ending_with_the_assistant_header(tiny):
    assert tiny.tokenizer.chat_template == DEFAULT_CHAT_TEMPLATE
    assert tiny.render(user("hi")) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_generate_restores_training_mode(tiny):
    tiny.train()
    tiny.generate(requests(1, seed=0, max_new_tokens=2))
    assert tiny.model.training


def test_the_buffered_kv_cache_generates_what_the_models_own_cache_does(tiny, monkeypatch):
    import coral.policy.hf as hf

    assert hf.buffered_cache(tiny.model, 8) is not None  # this transformers has cache layers: the buffer is used
    reqs = [GenerationRequest(user("z" * (i + 1)), SamplingParams(max_new_tokens=n, seed=i, temperature=t))
            for i, (n, t) in enumerate([(3, 0.0), (16, 0.0), (16, 1.0), (7, 1.0), (16, 0.7)])]
    buffered = tiny.generate(reqs)
    monkeypatch.setattr(hf, "buffered_cache", lambda model, capacity: None)
    own = tiny.generate(reqs)
    for a, b in zip(buffered, own, strict=True):
        assert a.completion_ids == b.completion_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)


def test_the_buffered_kv_cache_grows_past_its_capacity(tiny):
    from coral.policy.kv_cache import buffered_cache, cache_of

    cache = buffered_cache(tiny.model, 2)
    ids = torch.tensor([[5, 6, 7]])
    out = tiny.model(input_ids=ids, use_cache=True, **{tiny._cache_kw: cache})
    step = tiny.model(input_ids=torch.tensor([[8]]), use_cache=True, **{tiny._cache_kw: cache_of(out)})
    full = tiny.model(input_ids=torch.tensor([[5, 6, 7, 8]]))
    assert cache_of(step).get_seq_length() == 4
    torch.testing.assert_close(step.logits[0, -1], full.logits[0, -1], atol=1e-5, rtol=0)


def test_inverse_cdf_draws_the_first_token_past_u_and_never_one_of_probability_zero():
    from coral.policy.sampling import inverse_cdf

    # probabilities 0, 1/4, 0, 1/2, 1/4 (exact in binary): cumulative 0, 1/4, 1/4, 3/4, 1
    probs = torch.tensor([0.0, 0.25, 0.0, 0.5, 0.25])
    uniforms = torch.tensor([0.0, 0.2499, 0.25, 0.5, 0.75, 1.0 - 2**-24, 1.0])[:, None]
    tokens = inverse_cdf(probs.expand(len(uniforms), -1), uniforms)
    assert tokens.tolist() == [1, 1, 3, 3, 4, 4, 4]
    # unnormalised rows (float noise) scale u by their total
    assert inverse_cdf(2 * probs[None], torch.tensor([[0.5]])).tolist() == [3]


def test_the_sampler_returns_each_drawn_token_with_its_logprob():
    from coral.policy.sampling import TokenSampler

    logits = torch.tensor([0.1, 0.0, 0.6, 0.3]).log()  # cumulative 0.1, 0.1, 0.7, 1.0
    uniforms = [0.05, 0.4, 0.9]
    sampler = TokenSampler([SamplingParams(temperature=1.0)] * 3, [1] * 3, torch.device("cpu"))
    sampler.uniforms = torch.tensor(uniforms)[:, None]
    tokens, logprobs = sampler.sample(logits.expand(3, -1).clone())
    assert tokens.tolist() == [0, 2, 3]
    torch.testing.assert_close(logprobs, logits[tokens])


def test_sampled_token_frequencies_follow_the_distribution():
    from coral.policy.sampling import TokenSampler

    probs = torch.tensor([0.5, 0.25, 0.125, 0.0, 0.125])
    n = 4000
    sampler = TokenSampler([SamplingParams(temperature=1.0, seed=s) for s in range(n)], [1] * n, torch.device("cpu"))
    tokens, _ = sampler.sample(probs.log().expand(n, -1).clone())
    counts = torch.bincount(tokens, minlength=5).float()
    assert counts[3] == 0
    # each count within 4 standard deviations of n * p
    assert ((counts - n * probs).abs() <= 4 * (n * probs * (1 - probs)).sqrt() + 1e-9).all(), counts.tolist()


def test_greedy_and_sampled_rows_at_several_temperatures_share_a_batch_as_if_alone(tiny):
    reqs = [GenerationRequest(user("z" * (i + 1)), SamplingParams(max_new_tokens=6, temperature=t, seed=i))
            for i, t in enumerate((0.0, 1.0, 0.7, 1.0, 0.0))]
    batched = tiny.generate(reqs)
    for req, out in zip(reqs, batched, strict=True):
        alone = tiny.generate([req])[0]
        assert out.completion_ids == alone.completion_ids
        torch.testing.assert_close(torch.tensor(out.logprobs), torch.tensor(alone.logprobs), atol=1e-4, rtol=0)
