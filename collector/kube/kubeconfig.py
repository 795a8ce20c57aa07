"""A kubeconfig file, read as kubectl reads it, for the fields that decide where the collector's requests go and
how they authenticate.

``$KUBECONFIG`` may list several files (``:``-separated): those that exist are merged, the first to name a cluster,
user or context wins, and so does the first ``current-context``. Relative paths in a file are relative to that
file's directory. Used: a cluster's ``server``, ``certificate-authority(-data)``, ``insecure-skip-tls-verify`` and
``tls-server-name``; a user's ``token``, ``tokenFile``, ``client-certificate(-data)``, ``client-key(-data)`` and
``exec`` (a credential plugin that gives a token). Fields that would change how to connect or who the requests are
from, and that this reader does not follow, are errors naming the field (``auth-provider``, ``username``/``password``,
impersonation, ``proxy-url``): going on without them would send requests as someone else, or somewhere else.
Everything else (``extensions``, ``namespace``, ``disable-compression``, ...) changes nothing here and is ignored.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from collector.errors import ConfigError
from collector.kube.config import ExecPlugin, KubeConfig

_UNSUPPORTED_CLUSTER = {"proxy-url": "a proxy"}
_UNSUPPORTED_USER = {
    "auth-provider": "an auth provider plugin (use a token, a client certificate or an exec plugin)",
    "username": "basic authentication (Kubernetes API servers dropped it in 1.19)",
    "password": "basic authentication (Kubernetes API servers dropped it in 1.19)",
    "as": "impersonation",
    "as-uid": "impersonation",
    "as-groups": "impersonation",
    "as-user-extra": "impersonation",
}


@dataclass(frozen=True)
class _Entry:
    body: dict[str, Any]
    file: Path  # the file that named it: its relative paths are relative to this file's directory


def read_kubeconfig(spec: str) -> KubeConfig:
    """The current context of the kubeconfig ``spec`` names (one file, or ``$KUBECONFIG``'s list)."""
    files = [Path(p).expanduser() for p in spec.split(os.pathsep) if p]
    sections: dict[str, dict[str, _Entry]] = {"clusters": {}, "users": {}, "contexts": {}}
    current = ""
    read = 0
    for path in files:
        document = _document(path)
        if document is None:
            continue
        read += 1
        for section, entries in sections.items():
            for entry in _list(document, section, path):
                entries.setdefault(entry[0], _Entry(entry[1], path))
        current = current or str(document.get("current-context") or "")
    if not read:
        raise ConfigError(f"kubeconfig {spec}: no such file")
    where = f"kubeconfig {spec}"
    if not current:
        raise ConfigError(f"{where}: no current-context")
    context = sections["contexts"].get(current)
    if context is None:
        raise ConfigError(f"{where}: current-context {current!r} is not among its contexts")
    cluster_name = str(context.body.get("cluster") or "")
    cluster = sections["clusters"].get(cluster_name)
    if cluster is None:
        raise ConfigError(f"{where}: context {current!r} names cluster {cluster_name!r}, which is not in the file")
    user_name = str(context.body.get("user") or "")
    user = sections["users"].get(user_name) if user_name else None
    if user_name and user is None:
        raise ConfigError(f"{where}: context {current!r} names user {user_name!r}, which is not in the file")
    return _config(f"{where}, context {current!r}", cluster_name, cluster, user_name, user)


def _document(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None  # kubectl skips the files of $KUBECONFIG that are not there
    except OSError as e:
        raise ConfigError(f"kubeconfig {path}: cannot read it: {e.strerror or e}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"kubeconfig {path}: not YAML ({getattr(e, 'problem', None) or e})") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigError(f"kubeconfig {path}: not a kubeconfig (a YAML mapping with clusters, users, contexts)")
    return document


def _list(document: dict[str, Any], section: str, path: Path) -> list[tuple[str, dict[str, Any]]]:
    """The named entries of ``clusters``, ``users`` or ``contexts``: (name, its cluster/user/context mapping)."""
    entries = document.get(section) or []
    key = section[:-1]
    if not isinstance(entries, list):
        raise ConfigError(f"kubeconfig {path}: {section} is not a list")
    out = []
    for entry in entries:
        name = entry.get("name") if isinstance(entry, dict) else None
        body = entry.get(key) if isinstance(entry, dict) else None
        if not isinstance(name, str) or not isinstance(body, dict | None):
            raise ConfigError(f"kubeconfig {path}: an entry of {section} without a name and a {key} mapping")
        out.append((name, body or {}))
    return out


def _config(where: str, cluster_name: str, cluster: _Entry, user_name: str, user: _Entry | None) -> KubeConfig:
    c = cluster.body
    for key, what in _UNSUPPORTED_CLUSTER.items():
        if c.get(key):
            raise ConfigError(
                f"{where}: cluster {cluster_name!r} sets {key} ({what}), which the collector does not use"
            )
    server = str(c.get("server") or "").rstrip("/")
    if not server:
        raise ConfigError(f"{where}: cluster {cluster_name!r} has no server")
    if "://" not in server:
        server = f"https://{server}"  # as client-go reads a server without a scheme
    ca_data = _data(c, "certificate-authority-data", f"{where}: cluster {cluster_name!r}")
    ca_file = _file(c, "certificate-authority", cluster.file)
    insecure = c.get("insecure-skip-tls-verify") is True
    if insecure and (ca_data or ca_file):
        raise ConfigError(
            f"{where}: cluster {cluster_name!r} sets insecure-skip-tls-verify and a certificate authority; kubectl "
            "refuses that too: keep one"
        )
    fields: dict[str, Any] = {}
    if user is not None:
        fields = _credentials(f"{where}: user {user_name!r}", user)
    return KubeConfig(
        server, where, ca_file=ca_file, ca_data=ca_data, insecure=insecure,
        tls_server_name=str(c.get("tls-server-name") or "") or None, **fields,
    )  # fmt: skip


def _credentials(where: str, user: _Entry) -> dict[str, Any]:
    u = user.body
    for key, what in _UNSUPPORTED_USER.items():
        if u.get(key):
            raise ConfigError(f"{where} sets {key}: {what} is not supported by the collector")
    fields: dict[str, Any] = {
        "token": str(u.get("token") or "") or None,
        "token_file": _file(u, "tokenFile", user.file),
        "cert_data": _data(u, "client-certificate-data", where),
        "cert_file": _file(u, "client-certificate", user.file),
        "key_data": _data(u, "client-key-data", where),
        "key_file": _file(u, "client-key", user.file),
    }
    if bool(fields["cert_data"] or fields["cert_file"]) != bool(fields["key_data"] or fields["key_file"]):
        raise ConfigError(f"{where}: a client certificate needs both client-certificate(-data) and client-key(-data)")
    if u.get("exec"):
        if fields["token"] or fields["token_file"]:
            raise ConfigError(f"{where}: both a token and an exec plugin; client-go allows only one")
        fields["exec_plugin"] = _exec(where, u["exec"], user.file)
    return fields


def _exec(where: str, spec: Any, file: Path) -> ExecPlugin:
    if not isinstance(spec, dict) or not isinstance(spec.get("command"), str) or not spec["command"]:
        raise ConfigError(f"{where}: exec has no command")
    if spec.get("interactiveMode") == "Always":
        raise ConfigError(f"{where}: exec's interactiveMode is Always, and the collector has no terminal")
    command = spec["command"]
    if os.sep in command and not os.path.isabs(command):  # as kubectl: a path relative to the kubeconfig's directory
        command = str(file.parent / command)
    env = spec.get("env") or []
    if not isinstance(env, list) or not all(isinstance(e, dict) and "name" in e for e in env):
        raise ConfigError(f"{where}: exec's env is not a list of name/value pairs")
    return ExecPlugin(
        command,
        tuple(str(a) for a in spec.get("args") or ()),
        tuple((str(e["name"]), str(e.get("value") or "")) for e in env),
        str(spec.get("apiVersion") or "client.authentication.k8s.io/v1"),
        spec.get("provideClusterInfo") is True,
    )


def _data(body: dict[str, Any], key: str, where: str) -> bytes | None:
    value = body.get(key)
    if not value:
        return None
    try:
        return base64.b64decode("".join(str(value).split()), validate=True)  # line breaks are no error
    except binascii.Error:
        raise ConfigError(f"{where}: {key} is not base64") from None


def _file(body: dict[str, Any], key: str, origin: Path) -> Path | None:
    value = body.get(key)
    if not value:
        return None
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else origin.parent / path
