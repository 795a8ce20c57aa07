"""Who may ask: serving TLS, delegated authentication and authorization, their reviews and caches."""
