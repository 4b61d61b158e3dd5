"""The CPUs each actor asks Ray for: quantities Ray accepts (whole above 1, at most four decimals below)."""

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
