//! Real etcd servers for tests (single member and 3-member clusters).
