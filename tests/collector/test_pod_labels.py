"""Pod labels and UIDs for pod-owned series: names as dcgm-exporter sanitises them, the allowlist, the pod watch."""

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from collector.kube.config import KubeAccess
from collector.pods.directory import KubePodDirectory, PodMeta
from collector.pods.labels import RESERVED, PodLabelFilter, parse_allowlist, sanitize
from harness.kube.api import FakeKubeAPIServer
from harness.tasks import running


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("app", "app"),
        ("app.kubernetes.io/name", "app_kubernetes_io_name"),
        ("example.com/team-name", "example_com_team_name"),
        ("Tier_1", "Tier_1"),
        ("1password.com/vault", "_1password_com_vault"),  # a name may not start with a digit
    ],
)
def test_names_are_sanitised_as_dcgm_exporter_does(key: str, name: str) -> None:
    assert sanitize(key) == name


def test_no_allowlist_keeps_every_label_sorted_by_key() -> None:
    assert PodLabelFilter()({"b": "2", "a.b/c": "1"}) == (("a_b_c", "1"), ("b", "2"))


def test_the_allowlist_searches_the_original_key_and_any_pattern_may_match() -> None:
    keep = PodLabelFilter(parse_allowlist(r"^app\.kubernetes\.io/,team"))
    labels = {"app.kubernetes.io/name": "trainer", "my-team": "ml", "secret-token": "x", "app_kubernetes_io_x": "y"}
    assert keep(labels) == (("app_kubernetes_io_name", "trainer"), ("my_team", "ml"))


def test_two_keys_that_sanitise_alike_keep_the_first_in_key_order() -> None:
    assert PodLabelFilter()({"a/b": "slash", "a.b": "dot"}) == (("a_b", "dot"),)


@pytest.mark.parametrize("name", [*sorted(RESERVED), "dra_claim_name", "dra_mig_profile", "DCGM_FI_DRIVER_VERSION"])
def test_a_pod_label_named_as_a_label_of_the_collector_is_prefixed(name: str) -> None:
    assert dict(PodLabelFilter()({name: "x", "team": "ml"})) == {f"label_{name}": "x", "team": "ml"}


def test_a_pod_label_already_named_label_x_keeps_its_value_over_the_renamed_x() -> None:
    assert PodLabelFilter()({"pod": "renamed", "label_pod": "own"}) == (("label_pod", "own"),)


def test_a_pattern_that_does_not_compile_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"'team\(' is not a valid regular expression: missing \): team\("):
        parse_allowlist(r"^app,team(")
    with pytest.raises(ValueError, match="invalid perl operator"):
        parse_allowlist("(?=lookahead)")  # Go's regexp refuses it too


def test_patterns_are_read_as_go_reads_them() -> None:
    assert PodLabelFilter(parse_allowlist("^[[:alpha:]]+$"))({"team": "a", "team2": "b"}) == (("team", "a"),)
    assert PodLabelFilter(parse_allowlist(r"\pL\z"))({"a1": "x", "ab": "y"}) == (("ab", "y"),)
    assert parse_allowlist("") == ()
    assert [p.pattern for p in parse_allowlist(" a , b ")] == ["a", "b"]
    assert parse_allowlist("a")[0].search("xay")


@pytest.fixture
async def api() -> AsyncIterator[FakeKubeAPIServer]:
    server = FakeKubeAPIServer()
    await server.start()
    yield server
    await server.stop()


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


async def test_the_pod_watch_keeps_uids_and_allowed_labels_current(api: FakeKubeAPIServer, tmp_path: Path) -> None:
    def pod(name: str, uid: str, labels: dict[str, str], node: str = "node-a") -> None:
        api.put("pods", name, labels, namespace="ml", uid=uid, spec={"nodeName": node})

    pod("a", "uid-a", {"app.kubernetes.io/name": "trainer", "secret": "s"})
    pod("b", "uid-b", {"app.kubernetes.io/name": "other"}, node="node-b")
    keep = PodLabelFilter(parse_allowlist("^app"))
    directory = KubePodDirectory("node-a", KubeAccess(str(api.kubeconfig(tmp_path / "kubeconfig"))), keep)
    async with running(directory.run()):
        await until(lambda: directory.synced)
        assert directory.pod("ml", "a") == PodMeta("uid-a", (("app_kubernetes_io_name", "trainer"),))
        assert directory.pod("ml", "b") is None  # another node's pod
        pod("a", "uid-a", {"app.kubernetes.io/name": "trainer-v2"})  # relabelled: the watch brings it
        await until(lambda: directory.pod("ml", "a") == PodMeta("uid-a", (("app_kubernetes_io_name", "trainer-v2"),)))
        # by a real watch, not by listing again
        assert api.count("/api/v1/pods", watch=True) >= 1
        assert api.count("/api/v1/pods") == 1
        api.delete("pods", "a", namespace="ml")
        await until(lambda: directory.pod("ml", "a") is None)
        assert directory.lookup("uid-a") is None
        pod("a", "uid-a2", {})  # a StatefulSet's pod back under the same name, with a new UID
        await until(lambda: directory.pod("ml", "a") == PodMeta("uid-a2", ()))
        assert directory.lookup("uid-a2") == ("ml", "a")


async def test_labels_are_kept_only_when_asked_for(api: FakeKubeAPIServer, tmp_path: Path) -> None:
    api.put("pods", "a", {"app": "x"}, namespace="ml", uid="uid-a", spec={"nodeName": "node-a"})
    directory = KubePodDirectory("node-a", KubeAccess(str(api.kubeconfig(tmp_path / "kubeconfig"))))
    async with running(directory.run()):
        await until(lambda: directory.synced)
        assert directory.pod("ml", "a") == PodMeta("uid-a", ())
