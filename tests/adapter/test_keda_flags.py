"""The external scaler's flags: off unless an address is given, each value checked at start."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from adapter.errors import ConfigError
from adapter.keda.settings import KedaSettings
from adapter.settings import parse_settings
from harness.kube.kubectl import run
from harness.processes import free_port

BASE = {"GPUSCALE_ADAPTER_PROMETHEUS_URL": "http://localhost:9090"}


def test_off_by_default_with_a_one_second_stream_and_a_thousand_streams_a_hundred_a_namespace() -> None:
    assert parse_settings([], env=BASE).keda == KedaSettings(None, None, 1.0, 1000, 100)


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("0.0.0.0:9443", "0.0.0.0:9443"),
        (":9443", "0.0.0.0:9443"),
        ("127.0.0.1:0", "127.0.0.1:0"),
        ("[::]:9443", "[::]:9443"),
        ("[::1]:09443", "[::1]:9443"),
        ("gpuscale-adapter.gpu-system.svc:9443", "gpuscale-adapter.gpu-system.svc:9443"),
    ],
)
def test_addresses(text: str, address: str) -> None:
    assert parse_settings([f"--keda-scaler-address={text}"], env=BASE).keda.address == address


def test_every_flag_has_its_variable() -> None:
    env = {
        **BASE,
        "GPUSCALE_ADAPTER_KEDA_SCALER_ADDRESS": ":9443",
        "GPUSCALE_ADAPTER_KEDA_CLIENT_CA_FILE": "/ca.pem",
        "GPUSCALE_ADAPTER_KEDA_STREAM_INTERVAL": "250ms",
        "GPUSCALE_ADAPTER_KEDA_MAX_STREAMS": "10",
        "GPUSCALE_ADAPTER_KEDA_MAX_STREAMS_PER_NAMESPACE": "5",
        "GPUSCALE_ADAPTER_KEDA_CLIENT_ALLOWED_NAMES": "keda-operator,keda-operator.keda.svc",
    }
    names = ("keda-operator", "keda-operator.keda.svc")
    assert parse_settings([], env=env).keda == KedaSettings("0.0.0.0:9443", Path("/ca.pem"), 0.25, 10, 5, names)


def test_allowed_names_are_a_list_that_may_repeat() -> None:
    argv = ["--keda-scaler-address=:9443", "--keda-client-ca-file=/ca.pem", "--keda-client-allowed-names=a,b",
            "--keda-client-allowed-names=c"]  # fmt: skip
    assert parse_settings(argv, env=BASE).keda.client_allowed_names == ("a", "b", "c")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--keda-scaler-address=9443"], "'9443' is not HOST:PORT with a port from 0 to 65535"),
        (["--keda-scaler-address=host:99999"], "'host:99999' is not HOST:PORT"),
        (["--keda-scaler-address=host:"], "'host:' is not HOST:PORT"),
        (["--keda-scaler-address=::1:9443"], "write an IPv6 address in brackets, as [::1]:9443"),
        (["--keda-scaler-address=a b:1"], "'a b' is not a host name or address"),
        (["--keda-scaler-address=http://x:1"], "'http://x:1'"),
        (["--keda-client-ca-file=/ca.pem"], "--keda-client-ca-file (or GPUSCALE_ADAPTER_KEDA_CLIENT_CA_FILE): needs "),
        (
            ["--keda-scaler-address=:9443", "--keda-client-ca-file=/ca.pem", "--insecure-serve-http",
             "--insecure-disable-auth"],
            "client certificates need TLS",
        ),
        (
            ["--keda-scaler-address=:9443", "--keda-client-allowed-names=keda-operator"],
            "--keda-client-allowed-names (or GPUSCALE_ADAPTER_KEDA_CLIENT_ALLOWED_NAMES): needs --keda-client-ca-file",
        ),
        (["--keda-stream-interval=50ms"], "50ms is outside the valid range 100ms to 1m"),
        (["--keda-stream-interval=2m"], "2m is outside the valid range 100ms to 1m"),
        (["--keda-max-streams=0"], "--keda-max-streams (or GPUSCALE_ADAPTER_KEDA_MAX_STREAMS): 0 is outside"),
        (["--keda-max-streams=many"], "'many' is not a whole number from 1 to 100000"),
        (["--keda-max-streams-per-namespace=0"], "--keda-max-streams-per-namespace (or "
         "GPUSCALE_ADAPTER_KEDA_MAX_STREAMS_PER_NAMESPACE): 0 is outside"),
    ],
)  # fmt: skip
def test_bad_values_are_refused_naming_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_settings(argv, env=BASE)
    assert message in str(e.value)


ADAPTER = (sys.executable, "-m", "adapter", "--prometheus-url=http://127.0.0.1:9", "--bind-address=127.0.0.1")


async def test_a_bad_value_stops_the_start_with_exit_code_2() -> None:
    rc, _, err = await run(*ADAPTER, "--keda-scaler-address=nope")
    assert rc == 2
    assert "--keda-scaler-address (or GPUSCALE_ADAPTER_KEDA_SCALER_ADDRESS): 'nope' is not HOST:PORT" in err


async def test_a_client_ca_file_that_is_no_ca_bundle_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("not a certificate\n")
    rc, _, err = await run(
        *ADAPTER, "--insecure-disable-auth", f"--cert-dir={tmp_path}", f"--secure-port={free_port()}",
        "--keda-scaler-address=127.0.0.1:0", f"--keda-client-ca-file={tmp_path / 'ca.crt'}",
    )  # fmt: skip
    assert rc == 2
    assert f"--keda-client-ca-file {tmp_path / 'ca.crt'}: not a PEM CA bundle" in err.splitlines()[-1]
    assert "Traceback" not in err


async def test_a_port_in_use_stops_the_start_naming_the_flag() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc, _, err = await run(
            *ADAPTER, "--insecure-serve-http", "--insecure-disable-auth", f"--secure-port={free_port()}",
            f"--keda-scaler-address=127.0.0.1:{port}",
        )  # fmt: skip
    assert rc == 2
    assert f"--keda-scaler-address 127.0.0.1:{port}: cannot listen there" in err.splitlines()[-1]
    assert "Traceback" not in err
