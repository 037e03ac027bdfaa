//! The `palisade` command line, run as a binary against real etcd and
//! Redis processes (from the testkit) and a real resource server
//! (`palisade serve` on a free port).
//!
//! - `lock_write`: `palisade lock <name> -- palisade put ...` with the
//!   sequencer from the environment, on etcd and on Redis; the command's
//!   exit code passes through; a stale sequencer is refused with exit code
//!   4 and changes nothing.
//! - `lease_lost`: the lease ends from outside while the command runs: the
//!   command gets SIGTERM at once, SIGKILL after the grace period, and
//!   `palisade lock` exits 7.
//! - `waiting`: `--wait`, progress lines, signal forwarding, release.
//! - `data`: `put`/`get`/`del`/`marks` with hand-made sequencers: bytes,
//!   stdin, JSON, idempotency, refusals, not found.
//! - `bad_input`: one-line errors with the documented codes, `--help`.
//! - `regression`: a lock service that lost its counter (Redis flushed,
//!   etcd's data dir wiped): the refusal names the regression, `palisade
//!   raise-floor` recovers, no stale write is ever accepted.
//! - `signing`: signed sequencers from `--sign-key-file` on both backends,
//!   bad key files, `keygen`.
//! - `redis_fence`: `put`/`get`/`del`/`fence`/`marks`/`incr`/`raise-floor`
//!   with `--redis-fence` against a real Redis: a late write after a newer
//!   holder's is refused with 4 and writes nothing.
//! - `object`: `object put|get|rm` against moto: a late put or rm after a
//!   newer holder's put exits 4 and changes nothing; a store that ignores
//!   conditional writes is refused by the probe; the secret never shows.
//! - `elect`: `palisade elect` as a hot standby: the leader SIGKILLed, its
//!   command gone, the standby elected within the lease plus a hand-off,
//!   its term fenced; `palisade leader`.
//! - `live_check`: `palisade serve --live-check etcd|redis|postgres`: a
//!   holder whose lease ended is refused before a newer one writes.
//! - `redis_cluster`: `lock`, `put`, `locks show`, `unlock --force`,
//!   `raise-floor` and `serve --live-check` on a Redis Cluster with
//!   replicas (`--redis-url redis+cluster://...`).

mod bad_input;
mod data;
mod dev;
mod elect;
mod fence_on_acquire;
mod fixtures;
mod force_unlock;
mod lease_lost;
mod live_check;
mod lock_killed;
mod lock_write;
mod meta;
mod metrics_listen;
mod object;
mod redis_cluster;
mod redis_fence;
mod redis_tls;
mod regression;
mod signing;
mod waiting;
