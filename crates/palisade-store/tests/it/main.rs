//! The store's integration tests in one binary (one link of the dependency
//! tree): the engine suite on sled, and the store over it.

mod engine_suite;
mod store;
