//! Looking at locks ([`Inspect`]) and ending a hold from outside
//! ([`ForceRelease`]) on Redis, for operators.
//!
//! One read-only script per lock returns its exclusive holder (never its
//! secret owner token), its live shared holders, its live queue and its
//! lock-delay, all at one instant of Redis's clock. Listing walks the
//! keyspace with `SCAN`: on a single Redis, or on every master of a Redis
//! Cluster (from `CLUSTER SLOTS`), since each holds only its slots' locks.

use std::collections::BTreeSet;
use std::time::Duration;

use palisade_core::{
    ForceRelease, Generation, Holder, Inspect, LockError, LockInfo, LockName, Mode, Waiter,
    name_has_prefix,
};
use redis::Value;

use crate::RedisLockClient;
use crate::error::{BACKEND, bad_reply};
use crate::scripts::ScriptName;

/// The key suffixes that exist only while a lock is held, waited for or
/// delayed (the generation counter outlives them all).
const LIVE_SUFFIXES: [&str; 5] = [":lock", ":readers", ":queue", ":delay", ":shadow"];

impl Inspect for RedisLockClient {
    async fn inspect(&self, name: &LockName) -> Result<LockInfo, LockError> {
        let reply = self
            .eval_script(
                &self.inner.scripts[ScriptName::Inspect],
                &self.keys(name),
                &[],
            )
            .await?;
        parse_inspect(name.clone(), &reply).ok_or_else(|| bad_reply("inspect", &reply))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockInfo>, LockError> {
        let key_prefix = &self.inner.config.key_prefix;
        let pattern = format!(
            "{}{{{}*",
            glob_escape(key_prefix),
            LockName::key_segment_prefix(prefix)
        );
        let mut names = BTreeSet::new();
        for node in self.inner.connection.masters().await.map_err(|error| {
            crate::error::from_redis("cluster slots", self.inner.config.response_timeout, error)
        })? {
            for key in self.scan(node.as_ref(), &pattern).await? {
                if let Some(name) = name_of(key_prefix, &key) {
                    if name_has_prefix(&name, prefix) {
                        names.insert(name);
                    }
                }
            }
        }
        self.inspect_active(names).await
    }
}

impl RedisLockClient {
    /// Every key matching `pattern` on `node` (a cluster master's address;
    /// `None` on a single Redis), by `SCAN`.
    async fn scan(
        &self,
        node: Option<&(String, u16)>,
        pattern: &str,
    ) -> Result<Vec<String>, LockError> {
        let timeout = self.inner.config.response_timeout;
        let mut found = Vec::new();
        let mut cursor = 0_u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000);
            let reply = self
                .inner
                .connection
                .query_on(node, scan)
                .await
                .map_err(|error| crate::error::from_redis("scan", timeout, error))?;
            let (next, keys) = parse_scan(&reply).ok_or_else(|| bad_reply("scan", &reply))?;
            found.extend(keys);
            if next == 0 {
                return Ok(found);
            }
            cursor = next;
        }
    }
}

impl ForceRelease for RedisLockClient {
    /// Deletes the holder's key (or its shared entry) if its generation is
    /// `generation`, without a lock-delay, and grants the lock to the next
    /// waiter, in one script.
    async fn force_release(
        &self,
        name: &LockName,
        generation: Generation,
    ) -> Result<bool, LockError> {
        let generation_text = generation.get().to_string();
        let clock = match self.inner.config.generation_scheme {
            crate::GenerationScheme::ServerClock => "1",
            crate::GenerationScheme::Counter => "0",
        };
        let reply = self
            .eval_script(
                &self.inner.scripts[ScriptName::ForceRelease],
                &self.keys(name),
                &[&generation_text, clock],
            )
            .await?;
        let released = match reply {
            Value::Int(1) => true,
            Value::Int(0) => false,
            other => return Err(bad_reply("force_release", &other)),
        };
        tracing::warn!(backend = BACKEND, lock = %name, %generation, released, "forced release");
        Ok(released)
    }
}

/// `SCAN`'s glob syntax: the key prefix is matched literally.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The lock a key belongs to: `<prefix>{<segment>}<live suffix>`.
fn name_of(key_prefix: &str, key: &str) -> Option<LockName> {
    let rest = key.strip_prefix(key_prefix)?.strip_prefix('{')?;
    let (segment, suffix) = rest.split_once('}')?;
    if !LIVE_SUFFIXES.contains(&suffix) {
        return None;
    }
    LockName::from_key_segment(segment)
}

fn parse_scan(reply: &Value) -> Option<(u64, Vec<String>)> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let [cursor, keys] = parts.as_slice() else {
        return None;
    };
    let cursor = text(cursor)?.parse().ok()?;
    let Value::Array(keys) = keys else {
        return None;
    };
    Some((cursor, keys.iter().filter_map(text).collect()))
}

fn parse_inspect(name: LockName, reply: &Value) -> Option<LockInfo> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let [hold, hold_pttl, delay_left, readers, waiters] = parts.as_slice() else {
        return None;
    };
    let mut info = LockInfo::free(name);
    let hold = text(hold)?;
    if !hold.is_empty() {
        let pttl = int(hold_pttl)?;
        info.holders
            .push(holder(Mode::Exclusive, &hold, Some(pttl))?);
    }
    let Value::Array(readers) = readers else {
        return None;
    };
    for pair in readers.chunks(2) {
        let [info_text, pttl] = pair else {
            return None;
        };
        info.holders
            .push(holder(Mode::Shared, &text(info_text)?, Some(int(pttl)?))?);
    }
    info.holders.sort_by_key(|holder| holder.generation);
    let delay_left = int(delay_left)?;
    if delay_left > 0 {
        info.lock_delay_left = Some(millis(delay_left));
    }
    let Value::Array(waiters) = waiters else {
        return None;
    };
    let mut queue = Vec::with_capacity(waiters.len());
    for entry in waiters {
        // "<deadline_ms> <mode> <ttl_ms> <delay_ms> <lease> <holder> <channel>"
        let entry = text(entry)?;
        let fields: Vec<&str> = entry.split(' ').collect();
        let [_, mode, _, _, lease, holder, _] = fields.as_slice() else {
            return None;
        };
        let mode = if *mode == "s" {
            Mode::Shared
        } else {
            Mode::Exclusive
        };
        queue.push(Waiter::new(
            mode,
            Some((*lease).to_owned()),
            Some((*holder).to_owned()),
        ));
    }
    info.waiters = Some(queue);
    Some(info)
}

/// A holder from `"<gen> <delay_ms> <lease> <holder>"` and its PTTL.
fn holder(mode: Mode, fields: &str, pttl: Option<i64>) -> Option<Holder> {
    let parts: Vec<&str> = fields.split(' ').collect();
    let [generation, _, lease, holder_id] = parts.as_slice() else {
        return None;
    };
    let generation = Generation::new(generation.parse().ok()?)?;
    Some(
        Holder::new(mode, generation)
            .with_lease_left(pttl.filter(|ms| *ms >= 0).map(millis))
            .with_lease(Some((*lease).to_owned()))
            .with_holder(Some((*holder_id).to_owned())),
    )
}

fn millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(number) => Some(*number),
        _ => None,
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_back_to_exactly_one_name() {
        let name = |key: &str| name_of("p:", key).map(|n| n.as_str().to_owned());
        assert_eq!(name("p:{a%2Fb}:lock").as_deref(), Some("a/b"));
        assert_eq!(name("p:{ab}:queue").as_deref(), Some("ab"));
        assert_eq!(name("p:{ab}:gen"), None);
        assert_eq!(name("p:{ab}:readerinfo"), None);
        assert_eq!(name("q:{ab}:lock"), None);
        assert_eq!(name("p:inbox:123"), None);
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
