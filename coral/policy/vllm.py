"""VLLMPolicy: an in-process vLLM engine as a coral Policy (optional extra: pip install 'coral-rl[vllm]').

vllm is imported when a VLLMPolicy is built, never when this module is imported, so the rest of
coral runs without it. Prompts are rendered with the engine tokenizer's chat template and sent as
token ids; each completion carries prompt/completion ids and the logprob of every sampled token. A
LoRA adapter directory (written by HFPolicy.save) can be attached per call.

Logprobs: vLLM reports by default the logprobs of the raw model distribution (`logprobs_mode=
"raw_logprobs"`, before temperature and top-p), which are not those of the distribution a token was
drawn from when the temperature is not 1. The engine is built with `logprobs_mode="processed_logprobs"`
(vLLM >= 0.10.2): log_softmax of the logits after penalties, temperature and top-k/top-p, as HFPolicy
reports them, so a trainer can compare them with its own `forward(..., temperature=T)` (truncated
importance sampling, `LossConfig.tis_cap`). Other modes are refused.

This module is NOT exercised by coral's CPU test suite (vllm needs a GPU); only the missing-package
error is tested. It does NOT sync weights from a trainer in place: reload from a saved directory,
or attach the trainer's LoRA adapter with `lora_path`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coral.policy.base import Completion, GenerationRequest

LOGPROBS_MODE = "processed_logprobs"
INSTALL_HINT = "VLLMPolicy needs the 'vllm' package, which is not installed: pip install 'coral-rl[vllm]'"


def import_vllm() -> Any:
    try:
        # lazy: vllm is GPU only and optional
        import vllm
    except ImportError as error:
        raise ImportError(INSTALL_HINT) from error
    return vllm


class VLLMPolicy:
    """`model`: a local directory or hub name; `engine_kwargs` go to `vllm.LLM` (dtype,
    gpu_memory_utilization, max_model_len, enable_lora, ...)."""

    def __init__(
        self, model: str, name: str | None = None, lora_path: str | None = None, **engine_kwargs: Any
    ) -> None:
        mode = engine_kwargs.setdefault("logprobs_mode", LOGPROBS_MODE)
        if mode != LOGPROBS_MODE:
            raise ValueError(f"VLLMPolicy needs logprobs_mode={LOGPROBS_MODE!r} (the logprobs of the distribution "
                             f"each token was sampled from), got logprobs_mode={mode!r}")
        self._vllm = import_vllm()
        if lora_path is not None:
            engine_kwargs.setdefault("enable_lora", True)
        self.llm = self._vllm.LLM(model=model, **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.name = name or f"vllm:{model}"
        self.lora_path = lora_path

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        vllm = self._vllm
        prompts, params = [], []
        for r in requests:
            text = self.tokenizer.apply_chat_template(
                list(r.messages), tokenize=False, add_generation_prompt=True
            )
            prompts.append({"prompt_token_ids": self.tokenizer.encode(text, add_special_tokens=False)})
            sp = r.sampling
            params.append(
                vllm.SamplingParams(
                    max_tokens=sp.max_new_tokens,
                    temperature=sp.temperature,
                    top_p=sp.top_p,
                    stop=list(sp.stop) or None,
                    seed=sp.seed,
                    logprobs=0,  # the sampled token's logprob only
                )
            )
        lora = None
        if self.lora_path is not None:
            # lazy: vllm is GPU only and optional
            from vllm.lora.request import LoRARequest

            lora = LoRARequest("coral", 1, self.lora_path)
        outputs = self.llm.generate(prompts, sampling_params=params, lora_request=lora, use_tqdm=False)
        return [_completion(o) for o in outputs]


def _completion(output: Any) -> Completion:
    sample = output.outputs[0]
    ids = list(sample.token_ids)
    logprobs = [float(step[token].logprob) for step, token in zip(sample.logprobs or [], ids, strict=False)]
    return Completion(
        text=sample.text,
        prompt_ids=list(output.prompt_token_ids),
        completion_ids=ids,
        logprobs=logprobs,
        finish_reason="length" if sample.finish_reason == "length" else "stop",
        usage={"prompt_tokens": len(output.prompt_token_ids), "completion_tokens": len(ids)},
    )
