"""The Kubernetes API stand-in and what it serves (objects, watches, discovery, reviews), the aggregation layer, a
cluster's PKI and identities, and the real kubectl."""
