"""``--web-config-file``: TLS, basic authentication, headers and a rate limit on the collector's HTTP server, from
Prometheus exporter-toolkit's web configuration file as dcgm-exporter reads it.

config.py      the file, parsed strictly into frozen settings
tls.py         its tls_server_config as an SSLContext, and what Python's ssl does differently
basic_auth.py  bcrypt checks with exporter-toolkit's cache
rate_limit.py  its token bucket
serving.py     the file kept current while serving; the middleware every request passes through
"""
