"""The CPUs each actor asks Ray for: quantities Ray accepts (whole above 1, at most four decimals below)."""

import time

import pytest

from coral.scale.cluster import _fair_share


class FakeRay:
    def __init__(self, cpus: float) -> None:
        self.cpus = cpus

    def available_resources(self) -> dict:
        return {"CPU": self.cpus}


@pytest.mark.parametrize(("free", "actors", "share"), [(2.0, 3, 0.6666), (2.0, 4, 0.5), (7.0, 2, 3), (16.0, 3, 5),
                                                        (1.0, 3, 0.3333)])
def test_the_share_is_a_quantity_ray_accepts(free, actors, share):
    assert _fair_share(FakeRay(free), "local", actors) == share


@pytest.mark.parametrize(("free", "actors"), [(0.0, 2), (0.0001, 3)])
def test_no_free_cpu_is_a_clear_error(free, actors):
    with pytest.raises(ValueError, match="no free CPU"):
        _fair_share(FakeRay(free), "auto", actors)


class SlowReleaseRay:
    """Gives a killed actor's CPU back only after a few polls, as Ray does a moment after `kill`."""

    def __init__(self, total: float, polls_to_release: int) -> None:
        self.total, self.free, self.lag, self.killed = total, total, polls_to_release, 0

    def available_resources(self) -> dict:
        if self.killed:
            self.lag -= 1
            if self.lag <= 0:
                self.free, self.killed = self.free + self.killed, 0
        return {"CPU": self.free}

    def cluster_resources(self) -> dict:
        return {"CPU": self.total}

    def kill(self, actor: object) -> None:
        self.killed += 0.5


def test_a_closed_group_returns_only_once_its_cpus_are_free_again():
    # CI failed when `coral search` followed `coral eval` on one Ray: the closed group's CPUs were not yet
    # free, and the next fair share saw 0.0001 CPU
    from coral.scale.actors import ActorGroup

    ray = SlowReleaseRay(total=2.0, polls_to_release=5)
    group = ActorGroup.__new__(ActorGroup)
    group.ray, group.actors, group.each = ray, ["a", "b", "c"], {"CPU": 0.5, "GPU": 0.0}
    ray.free = 0.5
    group.close()
    assert ray.available_resources()["CPU"] == 2.0 and ray.killed == 0
    assert _fair_share(ray, "local", 3) == 0.6666


def test_room_for_a_group_fails_at_once_when_too_big_waits_for_freed_cpus_and_names_what_is_short(monkeypatch):
    import time

    import coral.scale.actors as actors

    monkeypatch.setattr(actors, "ROOM_WAIT_S", 0.3)
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"g: 5 actors x 1 CPU need 5 CPUs, the Ray cluster has 2 free of 2; lower"):
        actors._check_room(SlowReleaseRay(total=2.0, polls_to_release=1), "g", 5, 1.0, 0.0)
    assert time.monotonic() - start < 0.2  # larger than the cluster: no waiting
    ray = SlowReleaseRay(total=2.0, polls_to_release=3)
    ray.free, ray.killed = 0.5, 1.5  # a closed group's CPUs come back after a few polls
    actors._check_room(ray, "g", 2, 1.0, 0.0)
    stuck = SlowReleaseRay(total=2.0, polls_to_release=1)
    stuck.free = 0.5  # held by another client for good
    with pytest.raises(ValueError, match=r"need 2 CPUs, the Ray cluster has 0.5 free of 2"):
        actors._check_room(stuck, "g", 2, 1.0, 0.0)


def test_a_closed_group_whose_cpus_ray_gives_back_rounded_returns_at_once():
    # seen on Ray 2.60: 3 actors of 0.6666 on 2 CPUs leave 0.0002 free; after one is killed Ray reports
    # 0.6667 free, not 0.6668, and close waited the whole 30 s for the missing 0.0001
    from coral.scale.actors import ActorGroup

    class RoundingRay(SlowReleaseRay):
        def kill(self, actor: object) -> None:
            self.killed += 0.6665

    ray = RoundingRay(total=2.0, polls_to_release=1)
    ray.free = 0.0002
    group = ActorGroup.__new__(ActorGroup)
    group.ray, group.actors, group.each = ray, ["a"], {"CPU": 0.6666, "GPU": 0.0}
    start = time.monotonic()
    group.close()
    assert time.monotonic() - start < 5
