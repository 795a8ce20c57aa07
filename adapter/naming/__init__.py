"""How rules name things: metric names, Go templates, Kubernetes resources."""
