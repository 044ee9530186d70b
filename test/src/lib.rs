//! Shared helpers for pmio integration tests live next to the tests in `test/tests/`.
