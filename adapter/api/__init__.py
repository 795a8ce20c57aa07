"""The served APIs' wire types: request paths, the objects answered (metric values, discovery, Status), OpenAPI."""
