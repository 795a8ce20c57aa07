"""The collector's HTTP server, and ``--web-config-file``: TLS, basic authentication, headers and a rate limit on it,
from Prometheus exporter-toolkit's web configuration file as dcgm-exporter reads it.

server.py      the server: the bounded listener (common/listener.py), one h11 connection per client
connection.py  one connection: requests parsed by h11, answered one after the other, idle ones closed
messages.py    a request and its answer as the paths see them

config.py      the file, parsed strictly into frozen settings
tls.py         its tls_server_config as an SSLContext, and what Python's ssl does differently
basic_auth.py  bcrypt checks with exporter-toolkit's cache
rate_limit.py  its token bucket
serving.py     the file kept current while serving; the check every request passes through
"""
