"""The image entry point's rule: which program a container's arguments are for (run for real, through the installed
entry point, in tests/adapter/test_image_entrypoint.py)."""

from __future__ import annotations

import pytest

from image.entrypoint import adapter_only_flags, choose, main


@pytest.mark.parametrize(
    ("args", "program", "rest"),
    [
        # dcgm-exporter's DaemonSets: none, or its flags
        ([], "collector", []),
        (["-f", "/etc/dcgm-exporter/dcp-metrics-included.csv"], "collector", None),
        (["--collectors=/etc/dcgm-exporter/default-counters.csv", "-k", "-a", ":9400"], "collector", None),
        # prometheus-adapter's: its Helm chart names the binary first; its manifest starts with --cert-dir
        (["/adapter", "--secure-port=6443", "--v=4"], "adapter", ["--secure-port=6443", "--v=4"]),
        (["--cert-dir=/var/run/serving-cert", "--config=/etc/adapter/config.yaml"], "adapter", None),
        (["--v=4", "--prometheus-url", "http://prometheus:9090"], "adapter", None),
        (["-v=6"], "adapter", None),
        # a flag of the adapter's anywhere decides
        (["--logtostderr=true", "--config", "/etc/adapter/config.yaml"], "adapter", None),
        # names and commands
        (["adapter", "--help"], "adapter", ["--help"]),
        (["gpuscale-adapter"], "adapter", []),
        (["explain", "/apis/custom.metrics.k8s.io/v1beta2"], "adapter", None),
        (["serve", "--config=c"], "adapter", None),
        (["collector", "--simulate-gpus=2"], "collector", ["--simulate-gpus=2"]),
        (["gpuscale-collector", "--config=x"], "collector", ["--config=x"]),
        # a value that looks like an adapter flag is not a flag
        (["-f", "--config.csv"], "collector", None),
    ],
)
def test_which_program_the_arguments_are_for(args: list[str], program: str, rest: list[str] | None) -> None:
    assert choose(args) == (program, args if rest is None else rest)


def test_the_adapter_only_flags_leave_out_the_collectors() -> None:
    only = adapter_only_flags()
    assert {"--config", "--prometheus-url", "--secure-port", "--cert-dir", "-v", "--v", "--logtostderr"} <= only
    assert not {"-f", "--collectors", "-a", "--address", "--kubeconfig", "--debug"} & only


def test_help_says_the_rule(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "prometheus-adapter's binary, which its Helm chart passes first" in out
    assert "otherwise the collector" in out
