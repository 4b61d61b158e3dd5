import json
import random
from dataclasses import replace

import pytest
import torch

from coral.benchmarks.procedural import make_tasks
from coral.corecode.data import corecode_sft_examples
from coral.policy import tiny_policy
from coral.train.sft import SFTConfig, epoch_batches, load_sft_jsonl, train_sft


def test_sft_lowers_the_loss_and_changes_every_parameter():
    tasks = make_tasks(24, "train", max_depth=2, seed=0)
    examples = corecode_sft_examples(tasks)["coder"]
    policy = tiny_policy(seed=0, d_model=32, n_layers=1)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    losses = train_sft(policy, examples, SFTConfig(epochs=10, batch_size=8, lr=3e-3, warmup_steps=2), progress=False)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-3:]) / 3 < 0.8 * sum(losses[:3]) / 3
    assert [n for n, p in policy.model.named_parameters() if torch.equal(before[n], p.detach())] == []


def test_gold_data_pairs_problem_with_plan_and_code():
    task = make_tasks(1, "train", seed=1)[0]
    data = corecode_sft_examples([task])
    assert data["planner"][0].completion == task.metadata["gold_plan"]
    assert task.metadata["gold_plan"] in data["coder"][0].messages[-1]["content"]
    assert data["coder"][0].completion.startswith("```python\n" + task.reference.strip()[:10])


def test_jsonl_loader_accepts_prompt_or_messages_and_names_bad_lines(tmp_path):
    good = tmp_path / "d.jsonl"
    good.write_text(json.dumps({"prompt": "p", "completion": "c"}) + "\n"
                    + json.dumps({"messages": [{"role": "user", "content": "q"}], "completion": "a"}) + "\n")
    assert [e.completion for e in load_sft_jsonl(good)] == ["c", "a"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "p", "completion": "c"}) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"bad.jsonl: line 2 is not valid JSON"):
        load_sft_jsonl(bad)
    bad.write_text(json.dumps({"prompt": "p"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl: record 1 needs a string field 'completion'"):
        load_sft_jsonl(bad)


def test_parallel_sft_trains_each_policy_in_place_as_a_serial_run_on_its_thread_schedule_would(tmp_path):
    import os

    from coral.train.sft_parallel import step_costs, thread_schedule, train_sft_many

    data = corecode_sft_examples(make_tasks(16, "train", seed=0))
    cfgs = {"planner": SFTConfig(epochs=1, batch_size=8, warmup_steps=1, seed=0),  # ends first: the coder
            "coder": SFTConfig(epochs=6, batch_size=8, warmup_steps=1, seed=0)}    # takes over its CPUs

    def fresh():
        return {role: tiny_policy(seed=i, d_model=32, n_layers=1) for i, role in enumerate(("planner", "coder"))}

    threads = max(1, (os.cpu_count() or 1) // 2)
    policies = fresh()
    schedule = thread_schedule({r: step_costs(p, data[r], cfgs[r]) for r, p in policies.items()}, 2, threads)
    assert schedule["planner"] == {} and list(schedule["coder"].values()) == [2 * threads]
    assert 0 < next(iter(schedule["coder"])) < 12

    serial_losses, before = {}, {}
    saved = torch.get_num_threads()
    try:
        for role, policy in policies.items():  # what each worker does: its schedule's threads at each step
            torch.set_num_threads(schedule[role].get(0, threads))

            def log(m, plan=schedule[role]):
                if m["sft/step"] + 1 in plan:
                    torch.set_num_threads(plan[m["sft/step"] + 1])
            serial_losses[role] = train_sft(policy, data[role], cfgs[role], progress=False, log=log)
    finally:
        torch.set_num_threads(saved)
    parallel = fresh()
    before = {r: {n: t.clone() for n, t in p.model.state_dict().items()} for r, p in parallel.items()}
    losses = train_sft_many({r: (p, data[r], cfgs[r]) for r, p in parallel.items()}, tmp_path / "p",
                            progress=False, processes=2)
    assert losses == serial_losses  # the same arithmetic, bit for bit, however the two processes were timed
    for role in ("planner", "coder"):
        assert losses[role][-1] < losses[role][0]
        after = parallel[role].model.state_dict()
        assert all(not torch.equal(before[role][n], after[n]) for n in after)  # trained in place
        for n, t in policies[role].model.state_dict().items():
            assert torch.equal(after[n], t), f"{role}.{n}"


def test_thread_schedule_hands_a_finished_trainers_cpus_to_the_longest_one_from_its_next_step():
    from coral.train.sft_parallel import thread_schedule

    # planner: 10 steps of 1; coder: 10 of 2. At t=10 the planner ends; the coder is 5 steps in
    assert thread_schedule({"planner": [1.0] * 10, "coder": [2.0] * 10}, 2, 1) == {"planner": {}, "coder": {5: 2}}
    # mid-step: a (4 steps of 3, 2 threads) is 1.67 steps in when b (5 of 1, 2 threads) ends at t=2.5
    assert thread_schedule({"a": [3.0] * 4, "b": [1.0] * 5}, 2, 2) == {"a": {2: 4}, "b": {}}
    # three jobs on two processes: c starts on a's process at t=4; b ends at t=8, when c is 4 steps in
    assert thread_schedule({"a": [1.0] * 4, "b": [1.0] * 8, "c": [1.0] * 8}, 2, 1) == {"a": {}, "b": {}, "c": {4: 2}}
    # equal jobs end together: nobody is left to take over; a job with no steps frees its CPU at once
    assert thread_schedule({"a": [1.0] * 4, "b": [1.0] * 4}, 2, 1) == {"a": {}, "b": {}}
    assert thread_schedule({"a": [], "b": [1.0] * 8}, 2, 1) == {"a": {}, "b": {0: 2}}
    with pytest.raises(ValueError, match="'b' has 0.0"):
        thread_schedule({"a": [1.0], "b": [1.0, 0.0]}, 2, 1)


def test_step_costs_count_parameters_per_token_and_attention_per_token_of_context():
    from coral.train.sft import batch_plan, tokenize_examples
    from coral.train.sft_parallel import ATTENTION_COST, step_costs

    examples = corecode_sft_examples(make_tasks(12, "train", seed=0))["planner"]
    cfg = SFTConfig(epochs=1, batch_size=5, seed=0)
    policy = tiny_policy(seed=0, d_model=32, n_layers=2)
    lengths = [len(p) + len(c) for p, c in tokenize_examples(policy, examples)]
    plan = batch_plan(lengths, cfg)
    costs = step_costs(policy, examples, cfg)
    params = sum(p.numel() for p in policy.model.parameters())
    assert len(costs) == len(plan) == 3
    for batch, cost in zip(plan, costs, strict=True):
        longest = max(lengths[i] for i in batch)
        assert cost == pytest.approx(len(batch) * longest * (2 * params + ATTENTION_COST * 2 * 32 * longest))
    assert step_costs(policy, [], cfg) == []


def test_batch_plan_is_the_order_train_sft_follows(monkeypatch):
    import coral.train.sft as sft

    examples = corecode_sft_examples(make_tasks(20, "train", seed=0))["coder"]
    cfg = SFTConfig(epochs=2.5, batch_size=8, length_window=2, seed=3)
    policy = tiny_policy(seed=0, d_model=32, n_layers=1)
    seen = []
    real = sft.sft_loss
    monkeypatch.setattr(sft, "sft_loss", lambda pol, batch: (
        seen.append(sorted(len(p) + len(c) for p, c in batch)), real(pol, batch))[1])
    train_sft(policy, examples, cfg, progress=False)
    lengths = [len(p) + len(c) for p, c in sft.tokenize_examples(policy, examples)]
    plan = sft.batch_plan(lengths, cfg)
    assert len(plan) == 7  # ceil(20 / 8) = 3 steps an epoch, 2.5 epochs
    assert seen == [sorted(lengths[i] for i in batch) for batch in plan]
    assert sorted(i for batch in plan[:3] for i in batch) == list(range(20))  # an epoch: every example once
    with pytest.raises(ValueError, match="no examples"):
        sft.batch_plan([], cfg)


def test_a_failing_parallel_sft_names_the_policy(tmp_path):
    from coral.train.sft_parallel import train_sft_many

    data = corecode_sft_examples(make_tasks(4, "train", seed=0))
    jobs = {"planner": (tiny_policy(seed=0, d_model=32, n_layers=1), data["planner"], SFTConfig()),
            "coder": (tiny_policy(seed=1, d_model=32, n_layers=1), [], SFTConfig())}
    with pytest.raises(RuntimeError, match="SFT of 'coder' failed.*no examples"):
        train_sft_many(jobs, tmp_path, progress=False, processes=2)


def test_epoch_batches_take_every_example_once_in_batches_of_similar_length():
    lengths = [(i * 37) % 200 + 1 for i in range(1000)]
    bucketed = epoch_batches(lengths, 10, 8, random.Random(0))
    plain = epoch_batches(lengths, 10, 1, random.Random(0))
    for batches in (bucketed, plain):
        assert sorted(i for b in batches for i in b) == list(range(1000))
        assert [len(b) for b in batches] == [10] * 100

    def padded(batches):
        return sum(max(lengths[i] for i in b) * len(b) for b in batches)

    assert padded(bucketed) < 0.8 * padded(plain)
    # the batch order is shuffled too: batch lengths do not rise through the epoch
    maxima = [max(lengths[i] for i in b) for b in bucketed[:8]]
    assert maxima != sorted(maxima)


def test_epoch_batches_keep_a_short_last_batch_and_reject_a_zero_window():
    batches = epoch_batches(list(range(25)), 10, 2, random.Random(0))
    assert sorted(len(b) for b in batches) == [5, 10, 10]
    with pytest.raises(ValueError, match="length_window"):
        SFTConfig(length_window=0)


def test_bf16_sft_trains_float32_weights_under_autocast():
    examples = corecode_sft_examples(make_tasks(24, "train", max_depth=2, seed=0))["coder"]
    cfg = SFTConfig(epochs=10, batch_size=8, lr=3e-3, warmup_steps=2)
    runs = {}
    for bf16 in (False, True):
        policy = tiny_policy(seed=0, d_model=32, n_layers=1)
        runs[bf16] = train_sft(policy, examples, replace(cfg, bf16=bf16), progress=False)
        assert {p.dtype for p in policy.model.parameters()} == {torch.float32}
    assert runs[True][0] == pytest.approx(runs[False][0], rel=0.02)  # same start, bf16 rounding only
    assert runs[True] != runs[False]  # the flag reaches the forward pass
    assert sum(runs[True][-3:]) < 0.8 * sum(runs[True][:3])


def test_sft_of_a_policy_without_trainable_parameters_is_refused():
    policy = tiny_policy(seed=0, d_model=32, n_layers=1)
    for p in policy.model.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        train_sft(policy, corecode_sft_examples(make_tasks(2, "train", seed=0))["coder"], progress=False)


class _Crash(Exception):
    pass


def _crash_at(step):
    def log(metrics):
        if metrics.get("sft/step") == step:
            raise _Crash
    return log


def test_sft_killed_mid_run_resumes_from_its_checkpoint_to_the_uninterrupted_state(tmp_path):
    examples = corecode_sft_examples(make_tasks(24, "train", max_depth=2, seed=0))["coder"]
    cfg = SFTConfig(epochs=3, batch_size=8, warmup_steps=2, seed=0)  # 9 steps, over 3 epochs of batch orders
    clean = tiny_policy(seed=0, d_model=32, n_layers=1)
    clean_losses = train_sft(clean, examples, cfg, progress=False)
    ckpt = tmp_path / "sft" / "coder.pt"
    crashed = tiny_policy(seed=0, d_model=32, n_layers=1)
    with pytest.raises(_Crash):  # dies in step index 6, after the checkpoint of steps 0-3
        train_sft(crashed, examples, cfg, progress=False, checkpoint=ckpt, checkpoint_every=4, log=_crash_at(6))
    assert torch.load(ckpt, weights_only=False)["step"] == 4
    resumed_at = []
    resumed = tiny_policy(seed=0, d_model=32, n_layers=1)  # a new process: fresh weights, state from the file
    losses = train_sft(resumed, examples, cfg, progress=False, checkpoint=ckpt, checkpoint_every=4,
                       log=lambda m: resumed_at.append(m["sft/resumed_at"]) if "sft/resumed_at" in m else None)
    assert resumed_at == [4]
    assert losses == clean_losses
    for (name, a), b in zip(clean.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert torch.load(ckpt, weights_only=False)["step"] == 9  # the end is saved too


def test_an_sft_checkpoint_of_another_run_is_refused_by_name(tmp_path):
    examples = corecode_sft_examples(make_tasks(8, "train", seed=0))["coder"]
    ckpt = tmp_path / "coder.pt"
    train_sft(tiny_policy(seed=0, d_model=32, n_layers=1), examples, SFTConfig(epochs=1, batch_size=4),
              progress=False, checkpoint=ckpt)
    with pytest.raises(ValueError, match=r"coder.pt was written by a run with other SFT settings"):
        train_sft(tiny_policy(seed=0, d_model=32, n_layers=1), examples, SFTConfig(epochs=1, batch_size=2),
                  progress=False, checkpoint=ckpt)
    with pytest.raises(ValueError, match=r"coder.pt was written by a run with other examples"):
        train_sft(tiny_policy(seed=0, d_model=32, n_layers=1), examples[:-1], SFTConfig(epochs=1, batch_size=4),
                  progress=False, checkpoint=ckpt)


def test_parallel_sft_resumes_each_policy_from_its_own_checkpoint(tmp_path):
    from coral.train.sft_parallel import train_sft_many

    data = corecode_sft_examples(make_tasks(16, "train", seed=0))
    cfg = SFTConfig(epochs=2, batch_size=8, warmup_steps=1, seed=0)
    checkpoints = {"planner": tmp_path / "ck" / "planner.pt", "coder": tmp_path / "ck" / "coder.pt"}

    def fresh():
        return {role: tiny_policy(seed=i, d_model=32, n_layers=1) for i, role in enumerate(("planner", "coder"))}

    first = fresh()
    losses = train_sft_many({r: (p, data[r], cfg) for r, p in first.items()}, tmp_path / "a", progress=False,
                            processes=2, checkpoints=checkpoints)
    again = fresh()  # both files hold finished runs: the second call only loads them
    resumed = train_sft_many({r: (p, data[r], cfg) for r, p in again.items()}, tmp_path / "b", progress=False,
                             processes=2, checkpoints=checkpoints)
    assert resumed == losses
    for role in ("planner", "coder"):
        for name, t in first[role].model.state_dict().items():
            assert torch.equal(again[role].model.state_dict()[name], t), f"{role}.{name}"


def test_an_sft_checkpoint_holds_only_the_trained_parameters(tmp_path):
    examples = corecode_sft_examples(make_tasks(8, "train", seed=0))["coder"]
    policy = tiny_policy(seed=0, d_model=32, n_layers=1)
    for name, p in policy.model.named_parameters():
        p.requires_grad_(name.startswith("model.layers."))  # embeddings, final norm and head frozen
    trained = {n for n, p in policy.model.named_parameters() if p.requires_grad}
    ckpt = tmp_path / "coder.pt"
    train_sft(policy, examples, SFTConfig(epochs=1, batch_size=4), progress=False, checkpoint=ckpt)
    assert set(torch.load(ckpt, weights_only=False)["trained"]) == trained
    unfrozen = tiny_policy(seed=0, d_model=32, n_layers=1)  # all trainable: not the run that wrote the file
    with pytest.raises(ValueError, match="other trainable parameters"):
        train_sft(unfrozen, examples, SFTConfig(epochs=1, batch_size=4), progress=False, checkpoint=ckpt)


def test_parallel_sft_workers_die_with_a_killed_parent(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "train.py"
    script.write_text(
        "from coral.benchmarks.procedural import make_tasks\n"
        "from coral.policy import tiny_policy\n"
        "from coral.corecode.data import corecode_sft_examples\nfrom coral.train.sft import SFTConfig\n"
        "from coral.train.sft_parallel import train_sft_many\n"
        "data = corecode_sft_examples(make_tasks(8, 'train', seed=0))\n"
        "if __name__ == '__main__':  # the spawned workers import this file too\n"
        "    jobs = {r: (tiny_policy(seed=i, d_model=32, n_layers=1), data[r], SFTConfig(epochs=10000, batch_size=8))\n"
        "            for i, r in enumerate(('planner', 'coder'))}\n"
        f"    train_sft_many(jobs, {str(tmp_path / 'work')!r}, progress=False, processes=2,\n"
        f"                   checkpoints={{r: {str(tmp_path)!r} + f'/{{r}}.pt' for r in jobs}})\n")
    parent = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "OMP_NUM_THREADS": "1"})

    def workers() -> list[int]:
        found = []
        for task in os.listdir(f"/proc/{parent.pid}/task"):
            with open(f"/proc/{parent.pid}/task/{task}/children") as fh:
                found += [int(c) for c in fh.read().split()]
        return [pid for pid in found if b"spawn_main" in _cmdline(pid)]

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    spawned: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(spawned := workers()) < 2:
            assert parent.poll() is None and time.monotonic() < deadline, "the SFT workers never started"
            time.sleep(0.2)
        while not all((tmp_path / f"{r}.pt").is_file() for r in ("planner", "coder")):  # both past 50 steps
            assert parent.poll() is None and time.monotonic() < deadline, "the SFT workers never trained"
            time.sleep(0.2)
        assert parent.poll() is None and all(alive(pid) for pid in spawned)  # training, when the parent is killed
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in spawned) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [pid for pid in spawned if alive(pid)] == []
    finally:
        parent.kill()
        for pid in [pid for pid in spawned if alive(pid)]:  # the old code's orphans
            os.kill(pid, signal.SIGKILL)


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except FileNotFoundError:  # exited since it was listed
        return b""
