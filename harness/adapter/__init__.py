"""The adapter as tests and benchmarks run it: in process with a client, as a process over TLS, several replicas."""
