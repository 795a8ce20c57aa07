"""The main job's pipeline on simulated GPUs, as `make run` starts it: every component real but Kubernetes."""

import asyncio
import time
from pathlib import Path

import pytest

from demo.hpa import desired_replicas
from demo.run import INFER, TRAINERS, simulated_setup
from demo.stack import CUSTOM, Stack


@pytest.mark.prometheus
async def test_a_scripted_gpu_load_reaches_the_custom_metrics_api(tmp_path: Path) -> None:
    collector_args, pods = simulated_setup(tmp_path)
    async with Stack(tmp_path, collector_args=collector_args) as stack:
        stack.set_pods(pods)
        deadline = time.monotonic() + 60
        trainers: dict[str, float] = {}
        while set(trainers) != set(TRAINERS):
            assert time.monotonic() < deadline, f"trainers never all appeared: {trainers}"
            await asyncio.sleep(0.5)
            trainers = await stack.pod_metric("gpu_utilization", "app=trainer")
        # the script holds the trainers near 15, 20 and 10 % for the first 15 s
        assert trainers == pytest.approx({"trainer-0": 15, "trainer-1": 20, "trainer-2": 10}, abs=8)
        assert desired_replicas(3, trainers.values(), 70) == 1

        # two pods on one GPU get their own shares (0.55 and 0.2 of the GPU's time), not the whole GPU each;
        # the split is a windowed quantity (5 s here), so give the window time to fill
        await asyncio.sleep(6)
        infer = await stack.pod_metric("gpu_utilization", "app=infer")
        assert set(infer) == set(INFER)
        assert infer["infer-a"] > 1.5 * infer["infer-b"] > 0
        assert infer["infer-a"] + infer["infer-b"] == pytest.approx(75, abs=8)

        # the object form, the namespace form and the node form answer too
        status, body = await stack.get(f"{CUSTOM}/namespaces/ml/pods/trainer-1/gpu_memory_used")
        assert status == 200
        assert [i["describedObject"]["name"] for i in body["items"]] == ["trainer-1"]
        status, body = await stack.get(f"{CUSTOM}/nodes/{stack.node}/gpu_utilization")
        assert status == 200
        assert len(body["items"]) == 1

        # a pod that ends loses its value
        stack.set_pods([p for p in pods if p.name != "trainer-2"])
        deadline = time.monotonic() + 30
        while "trainer-2" in await stack.pod_metric("gpu_utilization", "app=trainer"):
            assert time.monotonic() < deadline, "trainer-2 outlived its pod"
            await asyncio.sleep(0.5)
