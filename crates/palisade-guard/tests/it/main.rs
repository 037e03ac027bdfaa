//! The guard's integration tests in one binary (one link of the dependency
//! tree): the refusals, the race between a holder and a newer one, and the
//! marks kept in sled.

mod common;
mod race;
mod refusals;
mod sled_marks;
