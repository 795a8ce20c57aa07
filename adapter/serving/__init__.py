"""The HTTP server's edge, below the app: which connections are taken and for how long, the memory they leave
behind, and what the log says of requests that never reach the app."""
