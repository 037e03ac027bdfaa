//! Recipes with fencing, on every Palisade lock backend: the things people
//! build from a lock, each with the sequencer as its fencing token.
//!
//! - [`Election`]: leader election whose **term is the generation** of the
//!   election's lock. [`Election::campaign`] waits until elected and
//!   publishes a value (an address, an id); [`Election::observe`] follows
//!   who leads without taking a lock; a [`Leadership`] resigns, proclaims a
//!   new value, and is lost exactly as a lease is.
//! - [`Semaphore`]: N permits under one name; each permit's sequencer
//!   fences what its holder writes; the count is checked by every client.
//! - [`Striped`]: a quantity split over N fenced segments, each under its
//!   own lock, with takers that move on from empty segments and a
//!   rebalance.
//!
//! Each recipe is built on core's [`Lock`](palisade_core::Lock) and
//! [`Inspect`](palisade_core::Inspect) traits alone, so it needs nothing of
//! a backend those do not give; `palisade-testkit`'s `recipe_suite` runs
//! each on every backend. See docs/recipes.md for what each token guards,
//! how each recipe behaves under a paused leader or holder, and how they
//! compare with etcd's election API, Curator and Redisson.
//!
//! **Architecture Invariant:** this crate depends on `palisade-core` only
//! among Palisade's crates: a recipe is generic over the backend, and its
//! names are ordinary lock names, derived from the user's with a `/.`
//! infix (`/.leader/`, `/.permits/`) or `/segment-<i>`.

mod election;
mod error;
mod semaphore;
mod striping;

pub use election::{Election, Leader, Leadership};
pub use error::RecipeError;
pub use semaphore::{Permit, Semaphore};
pub use striping::{Hunt, SegmentStore, Striped, Taken};
