//! An exhaustive model check of Redlock with its quorum-minted generation
//! (`palisade-lock-redis`'s `src/redlock/`; `docs/backends/redis.md`,
//! "Redlock"). The search is the crate's tests (`src/model.rs`); it lives
//! in a crate of its own so the workspace can compile it optimized
//! (`[profile.dev.package.palisade-redlock-model]` in the root
//! `Cargo.toml`): unoptimized, its millions of states took minutes of every
//! test run.

#[cfg(test)]
mod model;
