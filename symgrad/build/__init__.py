"""Build: kernels -> a compiled package directory (``package``), keyed by content hashes (``fingerprint``),
written atomically into a cache (``cache``); ``compile`` drives it for a model file or a traced function."""
