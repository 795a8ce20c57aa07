"""Prometheus credentials from prometheus-adapter's two auth flags: in-cluster, or a kubeconfig's user and CA."""

from __future__ import annotations

import base64
import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import yaml

from adapter.backends.prometheus import PrometheusConfig
from adapter.config.settings import Settings
from adapter.errors import ConfigError

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def _data_file(directory: Path, name: str, data: str) -> Path:
    path = directory / name
    path.touch(mode=0o600)
    path.write_bytes(base64.b64decode(data))
    return path


def _from_kubeconfig(path: Path) -> dict[str, Any]:
    try:
        config = yaml.safe_load(path.read_text())
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        context = contexts[config["current-context"]]
        cluster = next(c["cluster"] for c in config.get("clusters") or [] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config.get("users") or [] if u["name"] == context["user"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, StopIteration, AttributeError) as e:
        raise ConfigError(f"--prometheus-auth-config {path}: not a usable kubeconfig ({e!r})") from e
    base = path.parent
    secrets = Path(tempfile.mkdtemp(prefix="gpuscale-adapter-prometheus-"))
    found: dict[str, Any] = {}
    if user.get("token"):
        token = _data_file(secrets, "token", base64.b64encode(str(user["token"]).encode()).decode())
        found["token_file"] = token
    elif user.get("tokenFile"):
        found["token_file"] = base / user["tokenFile"]
    for key, field in (("client-certificate", "client_cert_file"), ("client-key", "client_key_file")):
        if user.get(f"{key}-data"):
            found[field] = _data_file(secrets, key, user[f"{key}-data"])
        elif user.get(key):
            found[field] = base / user[key]
    if cluster.get("certificate-authority-data"):
        found["ca_file"] = _data_file(secrets, "ca.crt", cluster["certificate-authority-data"])
    elif cluster.get("certificate-authority"):
        found["ca_file"] = base / cluster["certificate-authority"]
    return found


def resolve(settings: Settings) -> PrometheusConfig:
    """The Prometheus connection with credentials filled in; explicit flags win over what auth supplies."""
    config = settings.prometheus
    supplied: dict[str, Any] = {}
    if settings.prometheus_auth_incluster:
        supplied = {"token_file": SERVICE_ACCOUNT / "token", "ca_file": SERVICE_ACCOUNT / "ca.crt"}
    elif settings.prometheus_auth_config:
        supplied = _from_kubeconfig(settings.prometheus_auth_config)
    explicit = {k: v for k, v in supplied.items() if getattr(config, k) is None}
    return dataclasses.replace(config, **explicit)
