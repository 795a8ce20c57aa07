"""The HTTP layer: routes and handlers that turn a URL into a provider call and its answer into JSON, and health."""
