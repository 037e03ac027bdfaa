//! The metrics crate's integration tests in one binary (one link of the
//! dependency tree): the metered lock and the lock side's dashboard.

mod dashboard;
mod metered;
