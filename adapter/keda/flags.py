"""The KEDA package's part of the adapter's flags (``KedaSettings``, section ``keda``): where the external scaler
listens, whose client certificates it takes, and how its activity streams poll."""

from __future__ import annotations

from common.flags import Flag, defaults_of, duration, flag, integer, optional_path, string_list


def address(text: str) -> str | None:
    """``HOST:PORT`` as gRPC binds it (``[::1]:9443`` for IPv6; ``:9443`` is every IPv4 address, as Go writes it);
    empty: the scaler is off."""
    if not text:
        return None
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not port.isascii() or int(port) > 65535:
        raise ValueError(f"{text!r} is not HOST:PORT with a port from 0 to 65535")
    if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
        raise ValueError(f"{text!r}: write an IPv6 address in brackets, as [::1]:{port}")
    if any(c.isspace() or c in "/?#@" for c in host):
        raise ValueError(f"{text!r}: {host!r} is not a host name or address")
    return f"{host or '0.0.0.0'}:{int(port)}"


FLAGS: tuple[Flag, ...] = (
    flag("--keda-scaler-address", field="keda.address", parse=address,
         help="HOST:PORT to serve KEDA's external scaler (gRPC) on, with the serving certificate unless "
         "--insecure-serve-http (default: off)"),
    flag("--keda-client-ca-file", field="keda.client_ca_file", parse=optional_path,
         help="CA bundle that KEDA's client certificate (its tlsClientCert) must chain to; without it anyone who "
         "reaches the port can read every namespace's metrics through it"),
    flag("--keda-client-allowed-names", field="keda.client_allowed_names", parse=string_list,
         default="", repeated=True,
         help="names KEDA's client certificate must carry one of, as its common name or a DNS or URI subject "
         "alternative name, comma-separated (as --requestheader-allowed-names); empty: any certificate that chains "
         "to --keda-client-ca-file, whichever namespace's Certificate it was issued for"),
    flag("--keda-stream-interval", field="keda.stream_interval", parse=duration(0.1, 60, "100ms to 1m"),
         default="1s", help="how often each StreamIsActive stream asks for its value again, 100ms to 1m"),
    flag("--keda-max-streams", field="keda.max_streams", parse=integer(1, 100_000), default="1000",
         help="most StreamIsActive streams open at once, 1 to 100000; one more is refused (RESOURCE_EXHAUSTED)"),
    # KEDA opens one stream per external-push trigger: 100 is more push triggers than a team's namespace holds, and
    # with the default --keda-max-streams leaves 900 places to the other namespaces
    flag("--keda-max-streams-per-namespace", field="keda.max_streams_per_namespace", parse=integer(1, 100_000),
         default="100", help="most StreamIsActive streams open at once asking in one namespace, 1 to 100000; one "
         "more is refused (RESOURCE_EXHAUSTED), so that no namespace takes every place"),
)  # fmt: skip
default = defaults_of(FLAGS)
