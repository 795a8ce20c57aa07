"""A web configuration file (``--web-config-file``) that serves the collector over TLS, with a certificate made for
127.0.0.1 by a throwaway CA."""

from __future__ import annotations

from pathlib import Path

import trustme


def tls_web_config(directory: Path) -> Path:
    cert = trustme.CA().issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(directory / "server.key")
    cert.cert_chain_pems[0].write_to_path(directory / "server.crt")
    (directory / "web.yml").write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    return directory / "web.yml"
