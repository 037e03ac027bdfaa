//! Real Redis servers for tests (with and without persistence, cluster).
