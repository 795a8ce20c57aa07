"""The rules file as Kubernetes mounts a ConfigMap: the file is a symlink into a directory that a new version
replaces by swapping another symlink (``..data``), so the file's own path never changes."""

from pathlib import Path

from adapter.components import components
from adapter.config.rules_file import RulesFile
from adapter.self_metrics import AdapterMetrics
from adapter.settings import parse_settings

ONE = 'rules:\n- seriesQuery: \'{__name__="a_total",pod!=""}\'\n  resources: {template: <<.Resource>>}\n'
TWO = ONE + '- seriesQuery: \'{__name__="b_total",pod!=""}\'\n  resources: {template: <<.Resource>>}\n'


def publish(mount: Path, version: str, text: str) -> None:
    """What the kubelet does on a ConfigMap update: a new timestamped directory, then an atomic ``..data`` swap."""
    (mount / version).mkdir()
    (mount / version / "rules.yaml").write_text(text)
    (mount / "..data_tmp").symlink_to(version)
    (mount / "..data_tmp").rename(mount / "..data")
    if not (mount / "rules.yaml").is_symlink():
        (mount / "rules.yaml").symlink_to("..data/rules.yaml")


def test_a_configmap_update_is_reloaded_and_a_broken_one_refused(tmp_path: Path) -> None:
    publish(tmp_path, "..2026_12_02_10_00_00.1", ONE)
    metrics = AdapterMetrics()
    rules = RulesFile(tmp_path / "rules.yaml", metrics)
    assert len(rules.rules.rules) == 1
    assert not rules.reload_if_changed()

    publish(tmp_path, "..2026_12_02_10_01_00.2", TWO)
    assert rules.reload_if_changed()
    assert len(rules.rules.rules) == 2

    publish(tmp_path, "..2026_12_02_10_02_00.3", TWO + "- seriesQuerry: x\n")
    assert not rules.reload_if_changed()
    assert len(rules.rules.rules) == 2
    assert rules.last_error is not None
    assert "seriesQuerry" in rules.last_error
    registry = metrics.registry
    assert registry.get_sample_value("gpuscale_adapter_config_reloads_total", {"result": "error"}) == 1
    assert registry.get_sample_value("gpuscale_adapter_config_last_reload_successful") == 0

    publish(tmp_path, "..2026_12_02_10_03_00.4", ONE)
    assert rules.reload_if_changed()
    assert len(rules.rules.rules) == 1
    assert registry.get_sample_value("gpuscale_adapter_config_last_reload_successful") == 1


async def test_config_check_interval_is_the_period_the_rules_file_is_looked_at_and_judged_by(tmp_path: Path) -> None:
    """``--config-check-interval=1h``: the adapter's look at the rules file is a source refreshed hourly, so a look
    that fails is reported after two hours (at the default 5 s: after a minute, the file checks' bound)."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(ONE)
    argv = ["--prometheus-url=http://127.0.0.1:9", f"--config={rules}"]
    bounds = {}
    for given in ([], ["--config-check-interval=1h"]):
        async with components(parse_settings([*argv, *given], env={})) as c:
            [work] = [w for w in c.background() if w.name == "discovery/rules-file"]
            assert work.source is not None
            bounds[bool(given)] = work.source.bound
    assert bounds == {False: 60.0, True: 7200.0}
