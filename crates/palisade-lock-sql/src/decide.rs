//! The grant decision, as a pure function of the rows a grant transaction
//! read with the lock row locked. Kept apart from SQL so the rules can be
//! read (and tested) in one place.

use palisade_core::Mode;

/// A session as the lock tables record it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionRow {
    pub(crate) id: String,
    pub(crate) expires_at_us: i64,
    pub(crate) lock_delay_us: i64,
    pub(crate) ended: bool,
}

impl SessionRow {
    /// Alive by the database's clock: not ended, not expired.
    pub(crate) fn alive(&self, now_us: i64) -> bool {
        !self.ended && self.expires_at_us > now_us
    }
}

/// A holder row of the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HolderRow {
    pub(crate) session_id: String,
    pub(crate) mode: Mode,
}

/// A waiter row of the lock, with its session's state (`None` when the
/// session row is gone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WaiterRow {
    pub(crate) id: i64,
    pub(crate) mode: Mode,
    pub(crate) session_expires_at_us: Option<i64>,
    pub(crate) session_ended: bool,
}

impl WaiterRow {
    fn alive(&self, now_us: i64) -> bool {
        !self.session_ended && self.session_expires_at_us.is_some_and(|at| at > now_us)
    }
}

/// Everything a grant transaction read.
#[derive(Debug, Clone)]
pub(crate) struct LockView {
    pub(crate) now_us: i64,
    pub(crate) generation: i64,
    pub(crate) delay_until_us: i64,
    /// The sessions of the holders and of the requester.
    pub(crate) sessions: Vec<SessionRow>,
    pub(crate) holders: Vec<HolderRow>,
    /// In queue order.
    pub(crate) waiters: Vec<WaiterRow>,
}

/// What the transaction must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Holders whose session is no longer alive: delete their rows and mark
    /// their sessions ended (so no renewal can revive them).
    pub(crate) dead_holders: Vec<String>,
    /// Waiters whose session is gone: delete their rows.
    pub(crate) dead_waiters: Vec<i64>,
    /// The lock-delay deadline after the dead holders are accounted for.
    pub(crate) delay_until_us: i64,
    pub(crate) outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Grant with this generation.
    Grant { generation: i64 },
    /// Not now; nothing changes by expiry before `recheck_at_us` (database
    /// clock), when it is `Some`.
    Wait { recheck_at_us: Option<i64> },
    /// The requester's own session is no longer alive.
    RequesterEnded,
}

/// Decides a request by session `me` in `mode`; `my_waiter` is the
/// requester's queue entry, if it has one.
pub(crate) fn decide(view: &LockView, me: &str, mode: Mode, my_waiter: Option<i64>) -> Decision {
    let now = view.now_us;
    let session = |id: &str| view.sessions.iter().find(|s| s.id == id);

    let mut dead_holders = Vec::new();
    let mut delay_until_us = view.delay_until_us;
    let mut live_holders = Vec::new();
    let mut recheck: Option<i64> = None;
    let mut recheck_at = |at: i64| recheck = Some(recheck.map_or(at, |r| r.min(at)));
    for holder in &view.holders {
        match session(&holder.session_id) {
            Some(row) if row.alive(now) => {
                recheck_at(row.expires_at_us);
                live_holders.push(holder);
            }
            row => {
                // A lease that ended without a release: its lock-delay runs
                // from the moment the database saw it end. A session closed
                // cleanly records a delay of 0.
                if let Some(row) = row {
                    delay_until_us =
                        delay_until_us.max(row.expires_at_us.saturating_add(row.lock_delay_us));
                }
                dead_holders.push(holder.session_id.clone());
            }
        }
    }

    let dead_waiters: Vec<i64> = view
        .waiters
        .iter()
        .filter(|w| !w.alive(now) && Some(w.id) != my_waiter)
        .map(|w| w.id)
        .collect();

    let outcome = if !session(me).is_some_and(|row| row.alive(now)) {
        Outcome::RequesterEnded
    } else {
        let compatible = live_holders.iter().all(|holder| {
            // The requester's own row is a hold being released right now.
            holder.session_id != me && mode == Mode::Shared && holder.mode == Mode::Shared
        });
        let ahead = view
            .waiters
            .iter()
            .filter(|w| w.alive(now) && Some(w.id) != my_waiter)
            .filter(|w| my_waiter.is_none_or(|mine| w.id < mine));
        let mut queue_allows = true;
        for waiter in ahead {
            recheck_at(waiter.session_expires_at_us.unwrap_or(now));
            // Consecutive shared waiters at the head go together.
            if mode == Mode::Exclusive || waiter.mode == Mode::Exclusive {
                queue_allows = false;
            }
        }
        if delay_until_us > now {
            recheck_at(delay_until_us);
        }
        if compatible && queue_allows && delay_until_us <= now {
            Outcome::Grant {
                generation: view.generation + 1,
            }
        } else {
            Outcome::Wait {
                recheck_at_us: recheck,
            }
        }
    };
    Decision {
        dead_holders,
        dead_waiters,
        delay_until_us,
        outcome,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str, expires: i64, delay: i64) -> SessionRow {
        SessionRow {
            id: id.into(),
            expires_at_us: expires,
            lock_delay_us: delay,
            ended: false,
        }
    }

    fn view(
        holders: &[(&str, Mode)],
        waiters: Vec<WaiterRow>,
        sessions: Vec<SessionRow>,
    ) -> LockView {
        LockView {
            now_us: 1_000,
            generation: 7,
            delay_until_us: 0,
            sessions,
            holders: holders
                .iter()
                .map(|(id, mode)| HolderRow {
                    session_id: (*id).into(),
                    mode: *mode,
                })
                .collect(),
            waiters,
        }
    }

    /// `a` holds the lock exclusively with session `a`; `me` asks, with a
    /// session that expires at 2 000 µs.
    fn held_by_a(a: SessionRow) -> LockView {
        let me = session("me", 2_000, 0);
        view(&[("a", Mode::Exclusive)], vec![], vec![a, me])
    }

    fn waiter(id: i64, mode: Mode, expires: i64) -> WaiterRow {
        WaiterRow {
            id,
            mode,
            session_expires_at_us: Some(expires),
            session_ended: false,
        }
    }

    #[test]
    fn a_free_lock_is_granted_with_the_next_generation() {
        let v = view(&[], vec![], vec![session("me", 2_000, 0)]);
        assert_eq!(
            decide(&v, "me", Mode::Exclusive, None).outcome,
            Outcome::Grant { generation: 8 }
        );
    }

    #[test]
    fn a_live_holder_blocks_until_its_expiry() {
        let v = held_by_a(session("a", 5_000, 0));
        assert_eq!(
            decide(&v, "me", Mode::Shared, None).outcome,
            Outcome::Wait {
                recheck_at_us: Some(5_000)
            }
        );
    }

    #[test]
    fn an_expired_holder_is_gone_and_its_lock_delay_applies() {
        let v = held_by_a(session("a", 900, 500));
        let decision = decide(&v, "me", Mode::Exclusive, None);
        assert_eq!(decision.dead_holders, vec!["a".to_string()]);
        assert_eq!(decision.delay_until_us, 1_400);
        assert_eq!(
            decision.outcome,
            Outcome::Wait {
                recheck_at_us: Some(1_400)
            }
        );
    }

    #[test]
    fn readers_share_but_not_past_a_queued_writer() {
        let sessions = vec![session("a", 5_000, 0), session("me", 5_000, 0)];
        let v = view(&[("a", Mode::Shared)], vec![], sessions.clone());
        assert!(matches!(
            decide(&v, "me", Mode::Shared, None).outcome,
            Outcome::Grant { .. }
        ));
        let v = view(
            &[("a", Mode::Shared)],
            vec![waiter(1, Mode::Exclusive, 5_000)],
            sessions,
        );
        assert!(matches!(
            decide(&v, "me", Mode::Shared, None).outcome,
            Outcome::Wait { .. }
        ));
    }

    #[test]
    fn the_head_of_the_queue_goes_first_and_dead_waiters_are_skipped() {
        let sessions = vec![session("me", 5_000, 0)];
        let mut dead = waiter(1, Mode::Exclusive, 500);
        dead.session_ended = true;
        let v = view(
            &[],
            vec![
                dead,
                waiter(2, Mode::Exclusive, 5_000),
                waiter(3, Mode::Exclusive, 5_000),
            ],
            sessions,
        );
        let third = decide(&v, "me", Mode::Exclusive, Some(3));
        assert_eq!(third.dead_waiters, vec![1]);
        assert!(matches!(third.outcome, Outcome::Wait { .. }));
        assert!(matches!(
            decide(&v, "me", Mode::Exclusive, Some(2)).outcome,
            Outcome::Grant { .. }
        ));
    }

    #[test]
    fn an_ended_requester_is_never_granted() {
        let mut me = session("me", 5_000, 0);
        me.ended = true;
        let v = view(&[], vec![], vec![me]);
        assert_eq!(
            decide(&v, "me", Mode::Exclusive, None).outcome,
            Outcome::RequesterEnded
        );
    }
}
