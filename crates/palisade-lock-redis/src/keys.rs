//! Where a lock lives in Redis.
//!
//! Every key of one lock carries the same hash tag, `{<segment>}`, where the
//! segment is [`LockName::key_segment`]: the name percent-encoded so that it
//! has no `{`, `}`, `/` or `:`. Redis Cluster hashes only the tag, so all of
//! a lock's keys live in one slot and one script can touch them all; and no
//! two names share a tag, so `a`, `a/b` and `ab` never collide.
//!
//! ```text
//! <prefix>{<segment>}:lock        exclusive holder (SET NX PX)
//! <prefix>{<segment>}:gen         generation counter (never expires)
//! <prefix>{<segment>}:shadow      exclusive holder's lock-delay companion
//! <prefix>{<segment>}:delay       lock-delay in force after a lost lease
//! <prefix>{<segment>}:readers     shared holders, scored by expiry
//! <prefix>{<segment>}:readerinfo  shared holders' generations and ids
//! <prefix>{<segment>}:queue       waiters, in arrival order
//! <prefix>{<segment>}:waiters     waiters' entries, with their deadline
//! <prefix>inbox:<client id>       pub/sub channel: grants for one client
//! <prefix>{<segment>}:inbox:<client id>
//!                                 shard channel: grants of this lock for
//!                                 one client (cluster wake-ups)
//! ```

use palisade_core::LockName;

/// The eight keys of one lock, in the order every script expects them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockKeys {
    keys: [String; 8],
}

impl LockKeys {
    /// The keys of `name` under `prefix`.
    ///
    /// ```
    /// use palisade_core::LockName;
    /// use palisade_lock_redis::LockKeys;
    ///
    /// let keys = LockKeys::new("palisade:", &LockName::new("orders/42").unwrap());
    /// assert_eq!(keys.lock(), "palisade:{orders%2F42}:lock");
    /// assert_eq!(keys.generation(), "palisade:{orders%2F42}:gen");
    /// ```
    pub fn new(prefix: &str, name: &LockName) -> Self {
        let tag = format!("{prefix}{{{}}}", name.key_segment());
        LockKeys {
            keys: [
                format!("{tag}:lock"),
                format!("{tag}:gen"),
                format!("{tag}:shadow"),
                format!("{tag}:delay"),
                format!("{tag}:readers"),
                format!("{tag}:readerinfo"),
                format!("{tag}:queue"),
                format!("{tag}:waiters"),
            ],
        }
    }

    /// The exclusive holder's key: `"<token> <generation> <delay ms> <lease id>
    /// <holder id>"`, with the lease's TTL.
    pub fn lock(&self) -> &str {
        &self.keys[0]
    }

    /// The generation counter.
    pub fn generation(&self) -> &str {
        &self.keys[1]
    }

    /// The queue of waiters (a list of tokens).
    pub fn queue(&self) -> &str {
        &self.keys[6]
    }

    /// The waiters' entries (a hash keyed by token).
    pub fn waiters(&self) -> &str {
        &self.keys[7]
    }

    /// The shared holders (a sorted set of tokens scored by expiry).
    pub fn readers(&self) -> &str {
        &self.keys[4]
    }

    /// The shard channel on which the client `client_id` hears of grants
    /// of this lock (cluster wake-ups): the lock's hash tag, so it lives in
    /// the lock's slot.
    pub(crate) fn inbox_channel(&self, client_id: &str) -> String {
        let tag = self.keys[0]
            .strip_suffix(":lock")
            .expect("the lock key ends in :lock");
        format!("{tag}:inbox:{client_id}")
    }

    /// All eight keys, in script order.
    pub fn all(&self) -> &[String; 8] {
        &self.keys
    }
}

/// The pub/sub channel on which one client receives its grants.
pub(crate) fn inbox_channel(prefix: &str, client_id: &str) -> String {
    format!("{prefix}inbox:{client_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot_tag(key: &str) -> &str {
        let open = key.find('{').unwrap();
        let close = key[open..].find('}').unwrap() + open;
        &key[open + 1..close]
    }

    #[test]
    fn keys_share_one_tag_and_names_never_collide() {
        let names = ["a", "a/b", "ab", "a/bc", "{a}", "a:b", "a}b{"];
        let mut all_keys = std::collections::HashSet::new();
        for name in names {
            let keys = LockKeys::new("p:", &LockName::new(name).unwrap());
            let tag = slot_tag(keys.lock()).to_owned();
            for key in keys.all() {
                assert_eq!(slot_tag(key), tag, "{key}");
                assert!(all_keys.insert(key.clone()), "duplicate key {key}");
            }
        }
    }
}
