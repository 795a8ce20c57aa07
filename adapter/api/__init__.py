"""The served APIs: routes, handlers, discovery, the provider that answers, objects, OpenAPI, explain."""
