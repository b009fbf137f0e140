"""The HTTP face: the routes, their deadlines, the OpenAPI page, the factory."""
