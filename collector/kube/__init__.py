"""The few Kubernetes API reads the collector makes: one client, and LIST-then-WATCH copies of objects."""
