//! Shared fixtures for Palisade's integration tests. The tests themselves
//! live in `tests/tests/<area>/main.rs`, one binary per area.
