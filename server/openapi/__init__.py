"""OpenAPI 3.1 of the server's HTTP API, generated from its routes and action registry."""
