//! The embedded lock backend's integration tests in one binary (one link of
//! the dependency tree): the conformance suite and the signing cases.

mod conformance;
mod signing;
