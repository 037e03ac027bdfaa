//! The guarded-service example's integration tests in one binary (one link
//! of the dependency tree): the durability promise and the GC-pause story.

mod durability;
mod gc_pause;
