//! The fence against a real S3-compatible server (moto in server mode,
//! started by the testkit on a free loopback port), and the rule table
//! against the in-memory store as well.

mod common;
mod concurrency;
mod in_doubt;
mod probe;
mod rules;
mod stories;
