"""The picture's content, read from the matplotlib figure it is drawn from (demo/chart.py): what is drawn, not how
many bytes it takes."""

from __future__ import annotations

from typing import Any

import pytest

from demo import chart
from demo.hpa import Autoscaler, HpaSpec
from demo.hpa_controller import Sync

SPEC = HpaSpec(70)
SHARED = {"infer-a": 55.0, "infer-b": 20.0}


def even_syncs() -> list[Sync]:
    """Four pods sharing the work evenly: their values are equal at every sync."""
    pods = tuple(f"trainer-{n}" for n in range(4))
    values = dict.fromkeys(pods, 67.5)
    autoscaler = Autoscaler(SPEC)
    return [Sync(3.0 * n, pods, values, autoscaler.decide(3.0 * n, 4, pods, values), answer="") for n in range(6)]


@pytest.fixture(scope="module")
def drawn() -> Any:
    pytest.importorskip("matplotlib")
    syncs = even_syncs()
    return chart.figure(syncs, SPEC, "title", lambda at: 2.7, None, [SHARED] * len(syncs))


def lines_of(axes: Any) -> dict[str, Any]:
    return {line.get_label(): line for line in axes.get_lines() if not line.get_label().startswith("_")}


def test_every_panel_has_a_title(drawn: Any) -> None:
    assert [bool(axes.get_title(loc="left")) for axes in drawn.axes] == [True, True, True]


def test_pods_with_equal_values_are_drawn_apart(drawn: Any) -> None:
    trainers = [line for label, line in lines_of(drawn.axes[0]).items() if label.startswith("trainer-")]
    assert len(trainers) == 4
    assert len({line.get_marker() for line in trainers}) == 4
    points = {tuple(zip(line.get_xdata(), line.get_ydata(), strict=True)) for line in trainers}
    assert len(points) == 4, "two pods' markers lie on top of each other"
    assert {y for line in trainers for y in line.get_ydata()} == {67.5}  # nudged sideways, never in value


def test_the_pods_sharing_one_gpu_are_drawn_each_with_its_own_value(drawn: Any) -> None:
    shared = {label: line for label, line in lines_of(drawn.axes[0]).items() if "shared GPU" in label}
    assert sorted(shared) == ["infer-a (shared GPU)", "infer-b (shared GPU)"]
    assert set(shared["infer-a (shared GPU)"].get_ydata()) == {55.0}
    assert set(shared["infer-b (shared GPU)"].get_ydata()) == {20.0}
