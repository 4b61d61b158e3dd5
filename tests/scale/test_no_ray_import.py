"""Without `ray_address`, coral never imports ray: not on `import coral`, not in any command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    # the worktree first on sys.path, as pytest's rootdir is: this checkout's coral, not another install's
    return subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r})\n" + code],
                          cwd=cwd, capture_output=True, text=True, timeout=240)


def test_importing_coral_and_every_entry_point_does_not_import_ray(tmp_path):
    out = python("import coral, coral.scale, coral.cli, coral.evaluation, coral.mars2.search\n"
                 "import coral.corecode.recipe, coral.mars2.recipe\n"
                 "from coral.scale import maybe_distribute, RayPolicy\n"
                 "coral.cli.build_parser()\n"
                 "assert maybe_distribute('policy', 'sandbox', None) == ('policy', 'sandbox')\n"
                 "print('ray' in sys.modules)", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_coral_eval_and_coral_search_without_ray_address_do_not_import_ray(tmp_path):
    from coral.benchmarks import load_benchmark

    task = load_benchmark("procedural-test", limit=1)[0]
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([f"```python\n{task.reference}\n```"]))
    model = f"scripted:{replies}"
    out = python("from coral.cli import main\n"
                 f"assert main(['eval', '--workflow', 'single', '--model', {model!r}, '--limit', '1', "
                 f"'--sandbox-workers', '1', '--out-dir', 'e', '--no-progress']) == 0\n"
                 f"assert main(['search', '--models', {model!r}, '--limit', '1', '--max-nodes', '1', "
                 f"'--sandbox-workers', '1', '--out-dir', 's', '--no-progress']) == 0\n"
                 "print('ray' in sys.modules)", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize("address", ["", "   ", None])
def test_connect_rejects_an_empty_ray_address(address):
    from coral.scale import connect

    with pytest.raises(ValueError, match="ray_address must be 'local', 'auto' or a cluster address"):
        connect(address)


# one RL step (one inner and one outer link step) of each recipe at the smallest sizes its checks allow:
# 14 CPU-seconds for all three
TINY_RECIPES = {
    "corecode": {"n_train_tasks": 12, "n_test_tasks": 1, "n_fresh_tasks": 0, "d_model": 32, "n_layers": 1,
                 "sft": {"epochs": 0.1, "batch_size": 8}, "sft_processes": 1, "rl_steps": 1, "tasks_per_step": 1,
                 "plans_per_task": 2, "codes_per_plan": 1, "max_new_tokens": 4, "eval_samples_per_task": 0,
                 "sandbox_workers": 1, "efficiency_weight": 0.0},
    "mars2": {"n_train_tasks": 6, "n_test_tasks": 1, "agents": 1, "refine_examples": 1, "sft_processes": 1,
              "sft": {"epochs": 0.1, "batch_size": 8}, "rl_steps": 1, "tasks_per_step": 1, "max_nodes_per_tree": 1,
              "max_new_tokens": 4, "sandbox_workers": 1},
    "recursivemas": {"n_train_tasks": 2, "n_test_tasks": 1, "agent_widths": [32], "n_layers": 1, "vocab_size": 300,
                     "inner": {"steps": 1, "warmup_steps": 0}, "outer": {"steps": 1, "warmup_steps": 0},
                     "batch_size": 2, "rounds": 1, "latent_steps": 1, "max_new_tokens": 4},
}


def test_coral_train_of_every_recipe_without_ray_address_does_not_import_ray(tmp_path):
    for recipe, fields in TINY_RECIPES.items():
        # JSON is YAML: the config file coral train reads
        (tmp_path / f"{recipe}.yaml").write_text(json.dumps({"recipe": recipe, **fields, "out_dir": recipe}))
    runs = "".join(f"assert main(['train', {f'{r}.yaml'!r}, '--no-progress']) == 0\n" for r in TINY_RECIPES)
    out = python("from coral.cli import main\n" + runs + "print('ray' in sys.modules)", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
