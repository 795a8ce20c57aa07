import pytest

from collector.settings import parse_settings


def test_dcgm_exporter_arguments_work_unchanged() -> None:
    s = parse_settings(
        ["-f", "/etc/dcgm-exporter/dcp-metrics-included.csv", "-a", ":9500", "-c", "5000", "-k",
         "--kubernetes-gpu-id-type", "device-name", "--pod-resources-kubelet-socket", "/run/k.sock",
         "-r", "localhost:5555", "-d", "f", "--use-old-namespace", "-x", "1000"],
        env={"NODE_NAME": "gpu-node-7"},
    )  # fmt: skip
    assert s.collectors == "/etc/dcgm-exporter/dcp-metrics-included.csv"
    assert (s.host, s.port) == ("", 9500)
    assert s.interval == 5.0
    assert s.kubernetes is True
    assert s.pod_resources_socket == "/run/k.sock"
    assert s.hostname == "gpu-node-7"  # with -k, -r leaves the host label the node name, as in dcgm-exporter
    assert s.old_namespace is True
    assert s.remote_hostengine == "localhost:5555"
    # GPU UUIDs and device names are both recognised, so the id type is accepted and reported as without effect
    assert set(s.ignored) == {"--kubernetes-gpu-id-type", "--devices"}
    assert s.xid_window == 1.0  # DCGM_EXP_XID_ERRORS_COUNT's window, in seconds


def test_dcgm_exporter_environment_variables_work_and_ours_win() -> None:
    env = {
        "DCGM_EXPORTER_INTERVAL": "2000",
        "DCGM_EXPORTER_LISTEN": "127.0.0.1:9999",
        "DCGM_EXPORTER_KUBERNETES": "true",
    }
    s = parse_settings([], env=env)
    assert s.interval == 2.0
    assert (s.host, s.port) == ("127.0.0.1", 9999)
    assert s.kubernetes is True
    s = parse_settings([], env={**env, "GPUSCALE_COLLECTOR_COLLECT_INTERVAL": "250"})
    assert s.interval == 0.25
    s = parse_settings(["-c", "700"], env={**env, "GPUSCALE_COLLECTOR_COLLECT_INTERVAL": "250"})
    assert s.interval == 0.7


def test_defaults() -> None:
    s = parse_settings([], env={})
    assert (s.host, s.port, s.interval, s.slow_interval) == ("", 9400, 1.0, 10.0)
    assert s.collectors is None
    assert s.pod_resources_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert s.kubernetes is False
    assert s.hostname  # the host name when NODE_NAME is unset


def test_the_web_config_file_from_the_flag_or_dcgm_exporter_s_variable() -> None:
    assert parse_settings([], env={}).web_config_file is None
    assert parse_settings(["--web-config-file", "/etc/web.yml"], env={}).web_config_file == "/etc/web.yml"
    env = {"DCGM_EXPORTER_WEB_CONFIG_FILE": "/etc/dcgm-exporter/web-config.yaml"}
    assert parse_settings([], env=env).web_config_file == "/etc/dcgm-exporter/web-config.yaml"


def test_ipv6_address_and_no_hostname() -> None:
    s = parse_settings(["-a", "[::]:9400", "-n"], env={"NODE_NAME": "x"})
    assert (s.host, s.port) == ("::", 9400)
    assert s.hostname is None


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (
            ["-c", "50"],
            {},
            "--collect-interval (or GPUSCALE_COLLECTOR_COLLECT_INTERVAL, DCGM_EXPORTER_INTERVAL): 50 is outside the "
            "valid range 100 to 3600000",
        ),
        (["-c", "fast"], {}, "'fast' is not a whole number from 100 to 3600000"),
        (["-a", "9400"], {}, "expected <host>:<port>"),
        (["-a", ":70000"], {}, "70000 is outside the valid range 1 to 65535"),
        (["--simulate-gpus", "65"], {}, "65 is outside the valid range 0 to 64"),
        (
            [],
            {"DCGM_EXPORTER_INTERVAL": "0"},
            "environment variable DCGM_EXPORTER_INTERVAL (--collect-interval): 0 is outside the valid range 100",
        ),
        ([], {"DCGM_EXPORTER_KUBERNETES": "maybe"}, "'maybe' is not a boolean (true or false)"),
        (["--kubernetes-gpu-id-type", "serial"], {}, "'serial' is not one of uid, device-name"),
    ],
)
def test_invalid_values_are_rejected_with_the_valid_range(
    argv: list[str], env: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parse_settings(argv, env=env)
    assert info.value.code == 2
    assert message in capsys.readouterr().err
