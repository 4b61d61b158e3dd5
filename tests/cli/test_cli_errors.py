"""Every out-of-range value and every error of the machine (a read-only or full disk, a folder that is a
file) ends a command with one line naming the field, value or file, exit status 2; a bug keeps its traceback."""

from __future__ import annotations

import dataclasses
import errno
import typing
from pathlib import Path

import pytest

from coral.cli import main, recipes
from coral.config import ConfigError, from_mapping, is_config_class, nest
from coral.evaluation import EvalConfig
from coral.mars2.search import SearchConfig


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("flag, value, field", [
    ("--limit", "-1", "limit"), ("--limit", "0", "limit"), ("--temperature", "-1", "temperature"),
    ("--max-new-tokens", "0", "max_new_tokens"), ("--top-p", "0", "top_p"), ("--top-p", "1.5", "top_p"),
    ("--timeout-s", "0", "timeout_s"), ("--sandbox-workers", "0", "sandbox_workers"),
    ("--debug-rounds", "-1", "debug_rounds"), ("--seed", "-1", "seed"),
])
def test_an_out_of_range_eval_value_is_one_line_naming_the_field(flag, value, field, tmp_path, capsys):
    assert main(["eval", flag, value, "--out-dir", str(tmp_path), "--no-progress"]) == 2
    assert f"field {field!r}" in _one_line(capsys)


def _numeric_fields(cls: type, prefix: str = "") -> list[str]:
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if is_config_class(hint):
            out += _numeric_fields(hint, f"{prefix}{f.name}.")
        elif {a for a in typing.get_args(hint) or (hint,) if a is not type(None)} <= {int, float}:
            out.append(prefix + f.name)
    return out


COMMAND_CONFIGS = {"eval": EvalConfig, "search": SearchConfig, **{name: cls for name, (cls, _) in recipes().items()}}


@pytest.mark.parametrize("command", sorted(COMMAND_CONFIGS))
def test_every_numeric_field_of_every_command_refuses_minus_one_naming_the_field(command):
    cls = COMMAND_CONFIGS[command]
    fields = _numeric_fields(cls)
    assert len(fields) > 5
    accepted = []
    for name in fields:
        try:
            from_mapping(cls, nest({name: -1}), "flags")
            accepted.append(name)
        except ConfigError as exc:
            assert f"'{name}'" in str(exc) or f".{name.rsplit('.', 1)[-1]}" in str(exc), (name, str(exc))
    assert accepted == [], f"coral {command} takes -1 for {accepted}: a later layer fails with a traceback"


def test_an_output_folder_on_a_read_only_disk_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    import coral.evaluation

    ro = tmp_path / "ro"
    real = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if str(self).startswith(str(ro)):
            raise OSError(errno.EROFS, "Read-only file system", str(ro))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setattr(coral.evaluation, "build_agents", lambda *a, **k: pytest.fail("work began"))
    assert main(["eval", "--out-dir", str(ro / "e"), "--no-progress"]) == 2
    assert _one_line(capsys) == f"coral eval: error: {ro}: Read-only file system"
    paper = Path(__file__).resolve().parents[2] / "coral/hiras/fixtures/ncs_paper.md"
    assert main(["reproduce", str(paper), "--model", "scripted-demo", "--out-dir", str(ro / "r")]) == 2
    assert _one_line(capsys) == f"coral reproduce: error: {ro}: Read-only file system"


def test_an_output_folder_inside_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert main(["eval", "--out-dir", str(tmp_path / "file" / "e"), "--no-progress"]) == 2
    assert _one_line(capsys) == f"coral eval: error: {tmp_path / 'file' / 'e'}: Not a directory"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"recipe: mars2\nout_dir: {tmp_path / 'file' / 'run'}\n")
    assert main(["train", str(cfg)]) == 2
    assert "Not a directory" in _one_line(capsys)


def test_a_full_disk_mid_run_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys):
    import coral.cli

    samples = str(tmp_path / "samples.jsonl")

    def full(cfg, progress):
        raise OSError(errno.ENOSPC, "No space left on device", samples)

    monkeypatch.setattr(coral.cli, "run_eval", full)
    assert main(["eval", "--out-dir", str(tmp_path), "--no-progress"]) == 2
    assert _one_line(capsys) == f"coral eval: error: {samples}: No space left on device"


def test_an_error_caused_by_a_full_disk_in_a_worker_is_one_line(tmp_path, monkeypatch, capsys):
    import coral.corecode.recipe

    def worker_failed(cfg, progress):
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "runs/demo/sft/coder.pt")
        except OSError as exc:
            raise RuntimeError(f"SFT of 'coder' failed in its worker process: {exc}") from exc

    monkeypatch.setattr(coral.corecode.recipe, "run_demo", worker_failed)
    assert main(["demo", "--out-dir", str(tmp_path)]) == 2
    assert "SFT of 'coder' failed in its worker process: [Errno 28] No space left on device" in _one_line(capsys)


def test_an_os_error_of_a_bug_keeps_its_traceback(tmp_path, monkeypatch):
    import coral.corecode.recipe

    def bug(cfg, progress):
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(coral.corecode.recipe, "run_demo", bug)
    with pytest.raises(OSError, match="Bad file descriptor"):
        main(["demo", "--out-dir", str(tmp_path)])


def test_a_read_only_existing_folder_is_named_not_the_probe_file(tmp_path, monkeypatch, capsys):
    import tempfile

    def read_only(*args, dir=None, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", f"{dir}/.coral-write-check-abc123")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", read_only)
    paper = Path(__file__).resolve().parents[2] / "coral/hiras/fixtures/ncs_paper.md"
    assert main(["judge", str(tmp_path), "--paper", str(paper), "--protocol", "ref-free", "--model", "tiny",
                 "--out", str(tmp_path / "j.json")]) == 2
    assert _one_line(capsys) == f"coral judge: error: {tmp_path}: Read-only file system"
