"""The adapter's server below the app: what the log says of requests that never reach the app, and the event loop
(the connection bounds, shared with the collector, are in common/connections.py)."""
