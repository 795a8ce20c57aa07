"""The manifests, RBAC, schemas and Dockerfile read as a cluster and a builder read them."""
