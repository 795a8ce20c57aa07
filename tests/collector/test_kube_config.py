"""Where the collector finds the Kubernetes API: the pod's service account, or a kubeconfig read as kubectl reads it."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from collector.errors import ConfigError
from collector.kube.config import ExecPlugin, KubeAccess, KubeConfig
from collector.kube.kubeconfig import read_kubeconfig

CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def service_account(tmp_path: Path, token: str = "sa-token", ca: bytes = CA_PEM) -> Path:
    directory = tmp_path / "serviceaccount"
    directory.mkdir()
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes(ca)
    return directory


def in_pod(host: str = "10.96.0.1", port: str = "443") -> dict[str, str]:
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}


@pytest.mark.parametrize(
    ("host", "server"),
    [("10.96.0.1", "https://10.96.0.1:443"), ("fd00:10:96::1", "https://[fd00:10:96::1]:443")],
)
def test_in_a_pod_the_service_account_is_used(tmp_path: Path, host: str, server: str) -> None:
    directory = service_account(tmp_path)
    config = KubeAccess(None, directory, in_pod(host)).config()
    assert config == KubeConfig(
        server, "the pod's service account", ca_file=directory / "ca.crt", token_file=directory / "token"
    )


def test_in_a_pod_a_named_kubeconfig_wins(tmp_path: Path) -> None:
    kubeconfig = write(tmp_path / "kubeconfig", document(cluster={"server": "https://api.example:6443"}))
    config = KubeAccess(str(kubeconfig), service_account(tmp_path), in_pod()).config()
    assert config.server == "https://api.example:6443"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("no token", r"the service account's .*/token cannot be read: No such file or directory"),
        ("empty token", r"the service account's .*/token is empty"),
        ("no port", r"in a pod, but KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is empty"),
    ],
)
def test_a_service_account_that_cannot_be_used_says_why(tmp_path: Path, setup: str, message: str) -> None:
    directory = service_account(tmp_path, token="" if setup == "empty token" else "t")
    if setup == "no token":
        (directory / "token").unlink()
    environ = in_pod(port="" if setup == "no port" else "443")
    with pytest.raises(ConfigError, match=rf"^no Kubernetes API configuration \({message}\); in a pod the service"):
        KubeAccess(None, directory, environ).config()


def test_outside_a_pod_without_any_kubeconfig_the_error_names_every_place_looked_at(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape("not in a pod, no --kubeconfig, $KUBECONFIG unset and no ~/.kube")):
        KubeAccess(None, tmp_path, {"HOME": str(tmp_path)}).config()


def test_outside_a_pod_kubeconfig_then_the_home_directory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(home / ".kube" / "config", document(cluster={"server": "https://home:6443"}))
    assert KubeAccess(None, tmp_path, {"HOME": str(home)}).config().server == "https://home:6443"
    named = write(tmp_path / "named", document(cluster={"server": "https://named:6443"}))
    environ = {"HOME": str(home), "KUBECONFIG": str(named)}
    assert KubeAccess(None, tmp_path, environ).config().server == "https://named:6443"


def document(
    cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None, current: str = "ctx"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://api:6443"}}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "ignored"}}],
        "current-context": current,
        "preferences": {},
    }


def write(path: Path, content: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(content))
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_the_fields_that_matter_are_read(tmp_path: Path) -> None:
    cluster = {"server": "https://api:6443/", "certificate-authority-data": b64(CA_PEM),
               "tls-server-name": "kubernetes.default.svc", "extensions": [{"name": "x", "extension": {}}]}  # fmt: skip
    user = {"client-certificate-data": b64(b"CERT"), "client-key-data": b64(b"KEY"), "token": "t0k3n"}
    config = read_kubeconfig(str(write(tmp_path / "kubeconfig", document(cluster, user))))
    assert config == KubeConfig(
        "https://api:6443", f"kubeconfig {tmp_path / 'kubeconfig'}, context 'ctx'", ca_data=CA_PEM,
        cert_data=b"CERT", key_data=b"KEY", token="t0k3n", tls_server_name="kubernetes.default.svc",
    )  # fmt: skip


def test_relative_paths_are_relative_to_the_file_that_names_them(tmp_path: Path) -> None:
    cluster = {"server": "https://api:6443", "certificate-authority": "pki/ca.crt"}
    user = {"client-certificate": "pki/me.crt", "client-key": "/abs/me.key", "tokenFile": "token"}
    config = read_kubeconfig(str(write(tmp_path / "conf" / "kubeconfig", document(cluster, user))))
    pki = tmp_path / "conf" / "pki"
    assert (config.ca_file, config.cert_file, config.key_file) == (pki / "ca.crt", pki / "me.crt", Path("/abs/me.key"))
    assert config.token_file == tmp_path / "conf" / "token"


def test_kubeconfig_lists_merge_as_kubectl_does(tmp_path: Path) -> None:
    """The first file to name an entry or a current-context wins; files that are not there are skipped."""
    first = write(tmp_path / "first", {"current-context": "b", "users": [{"name": "u", "user": {"token": "1"}}]})
    second = document(cluster={"server": "https://second:6443"}, user={"token": "2"}, current="ctx")
    second["contexts"].append({"name": "b", "context": {"cluster": "c", "user": "u"}})
    spec = f"{tmp_path / 'absent'}:{first}:{write(tmp_path / 'second', second)}"
    config = read_kubeconfig(spec)
    assert (config.server, config.token, config.origin) == (
        "https://second:6443",
        "1",
        f"kubeconfig {spec}, context 'b'",
    )


def test_an_exec_plugin_is_read_with_its_command_relative_to_the_file(tmp_path: Path) -> None:
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "./bin/get-token",
                     "args": ["--cluster", "c"], "env": [{"name": "REGION", "value": "eu"}],
                     "provideClusterInfo": True, "interactiveMode": "Never"}}  # fmt: skip
    config = read_kubeconfig(str(write(tmp_path / "kubeconfig", document(user=user))))
    assert config.exec_plugin == ExecPlugin(
        str(tmp_path / "bin" / "get-token"), ("--cluster", "c"), (("REGION", "eu"),),
        "client.authentication.k8s.io/v1beta1", True,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("cluster", "user", "message"),
    [
        ({}, {"auth-provider": {"name": "oidc"}}, "user 'u' sets auth-provider: an auth provider plugin (use a token, "
                                                  "a client certificate or an exec plugin) is not supported"),
        ({}, {"username": "admin", "password": "x"}, "user 'u' sets username: basic authentication"),
        ({}, {"token": "t", "as": "someone-else"}, "user 'u' sets as: impersonation is not supported"),
        ({"proxy-url": "socks5://proxy:1080"}, {}, "cluster 'c' sets proxy-url (a proxy), which the collector"),
        ({"insecure-skip-tls-verify": True, "certificate-authority": "/ca"}, {},
         "sets insecure-skip-tls-verify and a certificate authority"),
        ({"certificate-authority-data": "not base64!"}, {}, "cluster 'c': certificate-authority-data is not base64"),
        ({}, {"client-certificate": "/me.crt"}, "a client certificate needs both client-certificate(-data) and "
                                                 "client-key(-data)"),
        ({}, {"token": "t", "exec": {"command": "x"}}, "both a token and an exec plugin"),
        ({}, {"exec": {"command": "x", "interactiveMode": "Always"}}, "interactiveMode is Always"),
        ({"server": ""}, {}, "cluster 'c' has no server"),
    ],
)  # fmt: skip
def test_what_cannot_be_followed_is_an_error_naming_the_field(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], message: str
) -> None:
    path = write(tmp_path / "kubeconfig", document({"server": "https://api:6443", **cluster}, user))
    with pytest.raises(ConfigError) as info:
        read_kubeconfig(str(path))
    assert str(info.value).startswith(f"kubeconfig {path}, context 'ctx': ")
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("clusters: [", "not YAML"),
        ("- a list", "not a kubeconfig"),
        (yaml.safe_dump({**document(), "current-context": ""}), "no current-context"),
        (yaml.safe_dump(document(current="other")), "current-context 'other' is not among its contexts"),
        (yaml.safe_dump({**document(), "clusters": []}), "context 'ctx' names cluster 'c', which is not in the file"),
    ],
)
def test_a_kubeconfig_that_cannot_be_read_says_why(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=re.escape(message)):
        read_kubeconfig(str(path))
