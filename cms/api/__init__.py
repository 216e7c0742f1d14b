"""HTTP only: routes, middlewares and thin handlers that parse, call one service method and serialize."""
