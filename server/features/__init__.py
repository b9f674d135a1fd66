"""LSP features, one module each: each handler fetches the document, calls a plain function,
converts the answer."""
