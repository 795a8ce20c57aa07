"""The web configuration file (``--web-config-file``): Prometheus exporter-toolkit's format, parsed as strictly.

dcgm-exporter hands this file to exporter-toolkit v0.16 (``docs/web-configuration.md`` there), which decodes it with
``yaml.UnmarshalStrict``: an unknown or repeated key is an error, any scalar may fill a string (with its text as
written), a null leaves the default. The same rules hold here, and each error names the file, the key and its line.
Relative paths are taken from the file's directory, as there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from collector.errors import ConfigError
from common import cipher_suites
from common.flags import parse_duration

# exporter-toolkit accepts Go's secure suites; None: a TLS 1.3 suite, which neither Go nor Python's ssl lets a server
# choose. In Go's preference order, its default for TLS 1.0-1.2.
CIPHERS: Mapping[str, str | None] = {
    **{name: cipher_suites.TLS12[name] for name in cipher_suites.SECURE},
    **dict.fromkeys(cipher_suites.TLS13),
}
CURVES: Mapping[str, str] = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1",
                             "X25519": "X25519"}  # fmt: skip
TLS_VERSIONS = ("TLS10", "TLS11", "TLS12", "TLS13")
# "RequireClientCert" is exporter-toolkit's older spelling of RequireAnyClientCert; "" means NoClientCert
CLIENT_AUTH_TYPES = ("NoClientCert", "RequestClientCert", "RequireAnyClientCert", "VerifyClientCertIfGiven",
                     "RequireAndVerifyClientCert")  # fmt: skip
# the headers exporter-toolkit lets a file set, and their allowed values (none listed: any)
HEADERS: Mapping[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
_FIELD_VALUE = re.compile(r"[\x20-\x7e\t]*")
# what bcrypt.Cost accepts and the bcrypt library checks: $2a$, $2b$ or $2y$, a cost of 04-31, 22 + 31 characters
_BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}")


@dataclass(frozen=True)
class TLSServerConfig:
    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca_file: Path | None = None
    cert: str = ""  # inline PEM, used when cert_file is not given
    key: str = ""
    client_ca: str = ""
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()  # Go's names; empty: Go's default list
    curve_preferences: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    client_allowed_sans: tuple[str, ...] | None = None  # None: not checked; () refuses every certificate

    @property
    def files(self) -> tuple[Path, ...]:
        """The files read to serve: reloaded when one changes."""
        return tuple(p for p in (self.cert_file, self.key_file, self.client_ca_file) if p is not None)


@dataclass(frozen=True)
class RateLimit:
    interval: float  # seconds between two requests, on average
    burst: int


@dataclass(frozen=True)
class WebConfig:
    source: str
    tls: TLSServerConfig | None = None  # None: plain HTTP
    tls_keys: tuple[str, ...] = ()  # tls_server_config keys given without a certificate: they do nothing
    http2: bool = True
    headers: tuple[tuple[str, str], ...] = ()
    users: Mapping[str, str] | None = None  # user → bcrypt hash; None or empty: no basic auth
    rate_limit: RateLimit | None = None


def load_web_config(path: Path) -> WebConfig:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"web config file {path}: cannot be read: {getattr(e, 'strerror', None) or e}") from e
    return parse_web_config(text, path)


def parse_web_config(text: str, path: Path) -> WebConfig:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        raise ConfigError(f"web config file {path}: not valid YAML: {e}") from e
    reader = _Reader(path)
    top = reader.mapping(root, "", ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"))
    tls, tls_keys = _tls(reader, top.get("tls_server_config"), path.parent)
    http = reader.mapping(top.get("http_server_config"), "http_server_config", ("http2", "headers"))
    users = reader.mapping(top.get("basic_auth_users"), "basic_auth_users", None)
    return WebConfig(
        source=str(path),
        tls=tls,
        tls_keys=tls_keys,
        http2=reader.boolean(http.get("http2"), "http_server_config.http2", True),
        headers=_headers(reader, http.get("headers")),
        users={user: _bcrypt(reader, node, f"basic_auth_users.{user}") for user, node in users.items()},
        rate_limit=_rate_limit(reader, top.get("rate_limit")),
    )


class _Reader:
    """Typed values out of YAML nodes, as Go's yaml.v2 decodes them into exporter-toolkit's structs."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, node: yaml.Node | None, key: str, problem: str) -> ConfigError:
        line = f" (line {node.start_mark.line + 1})" if node is not None else ""
        return ConfigError(f"web config file {self.path}: {key or 'the top level'}{line}: {problem}")

    @staticmethod
    def is_null(node: yaml.Node | None) -> bool:
        return node is None or (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null")

    def mapping(self, node: yaml.Node | None, key: str, allowed: tuple[str, ...] | None) -> dict[str, yaml.Node]:
        """A mapping's values by key; ``allowed`` None: any key."""
        if self.is_null(node):
            return {}
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, key, f"expected a mapping, got {_kind(node)}")
        out: dict[str, yaml.Node] = {}
        for key_node, value in node.value:
            name = self.string(key_node, f"{key} key")
            where = f"{key}.{name}" if key else name
            if allowed is not None and name not in allowed:
                raise self.fail(key_node, where, f"unknown key; valid keys are {', '.join(allowed)}")
            if name in out:
                raise self.fail(key_node, where, "given twice")
            out[name] = value
        return out

    def string(self, node: yaml.Node | None, key: str, default: str = "") -> str:
        if self.is_null(node):
            return default
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, key, f"expected a string, got {_kind(node)}")
        return str(node.value)

    def boolean(self, node: yaml.Node | None, key: str, default: bool) -> bool:
        if self.is_null(node):
            return default
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:bool":
            raise self.fail(node, key, f"expected true or false, got {_kind(node)}")
        return bool(yaml.safe_load(node.value))

    def strings(self, node: yaml.Node | None, key: str) -> tuple[str, ...] | None:
        if self.is_null(node):
            return None
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, key, f"expected a list, got {_kind(node)}")
        return tuple(self.string(item, f"{key}[{i}]") for i, item in enumerate(node.value))

    def choices(self, node: yaml.Node | None, key: str, allowed: Mapping[str, Any], what: str) -> tuple[str, ...]:
        values = self.strings(node, key) or ()
        for i, value in enumerate(values):
            if value not in allowed:
                item = node.value[i] if isinstance(node, yaml.SequenceNode) else node
                raise self.fail(item, f"{key}[{i}]", f"unknown {what} {value!r}; known: {', '.join(allowed)}")
        return values


def _kind(node: yaml.Node | None) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if isinstance(node, yaml.ScalarNode):
        text = str(node.value)
        return repr(text if len(text) <= 40 else text[:40] + "...")
    return "nothing"


_TLS_KEYS = ("cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type", "client_ca_file",
             "cipher_suites", "curve_preferences", "min_version", "max_version", "prefer_server_cipher_suites",
             "client_allowed_sans")  # fmt: skip
# the keys whose presence turns TLS on, as exporter-toolkit's TLSConfig.IsEnabled
_TLS_ON = ("cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type", "client_ca_file")


def _tls(reader: _Reader, node: yaml.Node | None, directory: Path) -> tuple[TLSServerConfig | None, tuple[str, ...]]:
    """The TLS settings (None: plain HTTP), and the keys given that do nothing because TLS is off."""
    values = reader.mapping(node, "tls_server_config", _TLS_KEYS)

    def key(name: str) -> str:
        return f"tls_server_config.{name}"

    text = {k: reader.string(values.get(k), key(k)) for k in _TLS_ON}
    if not any(text.values()):
        return None, tuple(k for k in values if not reader.is_null(values[k]))

    def path(name: str) -> Path | None:
        return directory / text[name] if text[name] else None

    def version(name: str, default: str) -> str:
        value = reader.string(values.get(name), key(name), default)
        if value not in TLS_VERSIONS:
            raise reader.fail(
                values[name], key(name), f"unknown TLS version {value!r}; known: {', '.join(TLS_VERSIONS)}"
            )
        return value

    auth = text["client_auth_type"] or "NoClientCert"
    auth = "RequireAnyClientCert" if auth == "RequireClientCert" else auth
    if auth not in CLIENT_AUTH_TYPES:
        problem = f"{auth!r} is not one of {', '.join(CLIENT_AUTH_TYPES)}"
        raise reader.fail(values["client_auth_type"], key("client_auth_type"), problem)
    if not (text["cert_file"] or text["cert"]):
        raise reader.fail(node, "tls_server_config", "missing one of cert or cert_file")
    if not (text["key_file"] or text["key"]):
        raise reader.fail(node, "tls_server_config", "missing one of key or key_file")
    if (text["client_ca_file"] or text["client_ca"]) and auth == "NoClientCert":
        problem = "client CAs are given without a client_auth_type that asks for certificates"
        raise reader.fail(node, "tls_server_config", problem)
    sans = reader.strings(values.get("client_allowed_sans"), key("client_allowed_sans"))
    if sans is not None and auth == "NoClientCert":
        problem = "needs a client_auth_type that asks for certificates; with NoClientCert none is sent"
        raise reader.fail(values["client_allowed_sans"], key("client_allowed_sans"), problem)
    tls = TLSServerConfig(
        cert_file=path("cert_file"),
        key_file=path("key_file"),
        client_ca_file=path("client_ca_file"),
        cert=text["cert"],
        key=text["key"],
        client_ca=text["client_ca"],
        client_auth_type=auth,
        min_version=version("min_version", "TLS12"),
        max_version=version("max_version", "TLS13"),
        cipher_suites=reader.choices(values.get("cipher_suites"), key("cipher_suites"), CIPHERS, "cipher"),
        curve_preferences=reader.choices(values.get("curve_preferences"), key("curve_preferences"), CURVES, "curve"),
        prefer_server_cipher_suites=reader.boolean(
            values.get("prefer_server_cipher_suites"), key("prefer_server_cipher_suites"), True
        ),
        client_allowed_sans=sans,
    )
    if TLS_VERSIONS.index(tls.min_version) > TLS_VERSIONS.index(tls.max_version):
        problem = f"min_version {tls.min_version} is above max_version {tls.max_version}"
        raise reader.fail(node, "tls_server_config", problem)
    return tls, ()


def _headers(reader: _Reader, node: yaml.Node | None) -> tuple[tuple[str, str], ...]:
    out = []
    for name, value_node in reader.mapping(node, "http_server_config.headers", None).items():
        key = f"http_server_config.headers.{name}"
        if name not in HEADERS:
            raise reader.fail(value_node, key, f"this header cannot be set; these can: {', '.join(HEADERS)}")
        value = reader.string(value_node, key)
        if HEADERS[name] and value not in HEADERS[name]:
            raise reader.fail(value_node, key, f"{value!r} is not one of {', '.join(HEADERS[name])}")
        if not _FIELD_VALUE.fullmatch(value):  # Go's server would refuse to send it; here the file is refused
            raise reader.fail(value_node, key, "a header value is printable ASCII, spaces and tabs")
        if value:  # exporter-toolkit: "unset if blank"
            out.append((name, value))
    return tuple(out)


def _bcrypt(reader: _Reader, node: yaml.Node, key: str) -> str:
    value = reader.string(node, key)
    if not _BCRYPT.fullmatch(value):
        # the value is left out of the message: it may be a password written where its hash belongs
        raise reader.fail(node, key, "not a bcrypt hash ($2a$, $2b$ or $2y$, a cost from 04 to 31, 53 characters)")
    return value


def _rate_limit(reader: _Reader, node: yaml.Node | None) -> RateLimit | None:
    values = reader.mapping(node, "rate_limit", ("interval", "burst"))
    interval = _parsed(reader, values.get("interval"), "rate_limit.interval", _interval, 0.0)
    burst = _parsed(reader, values.get("burst"), "rate_limit.burst", _count, 0)
    if interval == 0:  # exporter-toolkit: 0 turns the limit off
        return None
    if burst < 1:
        raise reader.fail(values.get("burst"), "rate_limit.burst", "must be at least 1 with an interval, or no "
                          "request would ever be served")  # fmt: skip
    return RateLimit(interval, burst)


def _parsed(reader: _Reader, node: yaml.Node | None, key: str, parse: Callable[[str], Any], default: Any) -> Any:
    text = reader.string(node, key)
    if not text:
        return default
    try:
        return parse(text)
    except ValueError as e:
        raise reader.fail(node, key, str(e)) from None


def _interval(text: str) -> float:
    if text.startswith("-"):  # Go takes it, and its limiter then lets every request through
        raise ValueError(f"{text!r} is negative")
    # Go decodes a bare number into a Duration as nanoseconds
    return int(text) / 1e9 if text.isdigit() else parse_duration(text)


def _count(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None
