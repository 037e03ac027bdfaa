//! The HTTP client's integration tests in one binary (one link of the
//! dependency tree), against a real resource server: the API, retries, and
//! TLS with bearer tokens.

mod client;
mod retry;
mod secure;
