"""Orchestra's test suite; the tree mirrors the packages, shared fakes live in tests/helpers."""
