//! What a fenced call asks Redis to do, and how it travels to the function.

use bytes::Bytes;
use palisade_core::OpResult;
use smallvec::SmallVec;

use crate::RedisFenceError;

/// The largest counter value, increment or floor the function takes:
/// 2^53 − 1, the integers Lua's numbers hold exactly. Beyond it the
/// function refuses rather than round.
pub const COUNTER_LIMIT: i64 = (1 << 53) - 1;

/// The most ops one call carries (Redis takes more; a bound keeps one call
/// from holding the server for long).
pub const MAX_OPS: usize = 1024;

/// One write of a [`Batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// `SET key value`.
    Set {
        /// The key.
        key: Bytes,
        /// The value.
        value: Bytes,
    },
    /// `DEL key`.
    Del {
        /// The key.
        key: Bytes,
    },
    /// `INCRBY key by` (a negative `by` decrements); with `at_least`, only
    /// if the result is at least `at_least`, else the whole call is refused
    /// with `Refused::CasMismatch` carrying the current value.
    IncrBy {
        /// The key (absent counts as 0).
        key: Bytes,
        /// The increment.
        by: i64,
        /// The smallest result allowed.
        at_least: Option<i64>,
    },
    /// `HSET key field value`.
    HSet {
        /// The key.
        key: Bytes,
        /// The field.
        field: Bytes,
        /// The value.
        value: Bytes,
    },
    /// `HDEL key field`.
    HDel {
        /// The key.
        key: Bytes,
        /// The field.
        field: Bytes,
    },
}

impl Op {
    /// `SET key value`.
    pub fn set(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Op {
        Op::Set {
            key: key.into(),
            value: value.into(),
        }
    }

    /// `DEL key`.
    pub fn del(key: impl Into<Bytes>) -> Op {
        Op::Del { key: key.into() }
    }

    /// `INCRBY key by`.
    pub fn incr_by(key: impl Into<Bytes>, by: i64) -> Op {
        Op::IncrBy {
            key: key.into(),
            by,
            at_least: None,
        }
    }

    /// `DECRBY key by`.
    pub fn decr_by(key: impl Into<Bytes>, by: i64) -> Op {
        Op::incr_by(key, by.saturating_neg())
    }

    /// `DECRBY key by`, only if at least `keep` stay: the stock case.
    pub fn decr_by_keeping(key: impl Into<Bytes>, by: i64, keep: i64) -> Op {
        Op::IncrBy {
            key: key.into(),
            by: by.saturating_neg(),
            at_least: Some(keep),
        }
    }

    /// `HSET key field value`.
    pub fn hset(key: impl Into<Bytes>, field: impl Into<Bytes>, value: impl Into<Bytes>) -> Op {
        Op::HSet {
            key: key.into(),
            field: field.into(),
            value: value.into(),
        }
    }

    /// `HDEL key field`.
    pub fn hdel(key: impl Into<Bytes>, field: impl Into<Bytes>) -> Op {
        Op::HDel {
            key: key.into(),
            field: field.into(),
        }
    }

    /// The op's name in the function's requests.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Op::Set { .. } => "set",
            Op::Del { .. } => "del",
            Op::IncrBy { .. } => "incr",
            Op::HSet { .. } => "hset",
            Op::HDel { .. } => "hdel",
        }
    }

    /// The key the op writes.
    pub fn key(&self) -> &[u8] {
        match self {
            Op::Set { key, .. }
            | Op::Del { key }
            | Op::IncrBy { key, .. }
            | Op::HSet { key, .. }
            | Op::HDel { key, .. } => key,
        }
    }
}

/// Writes applied together on one lock: all of them, or none (a stale
/// sequencer, a failed `at_least`, a key of the wrong kind refuses the
/// whole batch before anything is written).
///
/// ```
/// use palisade_fence_redis::Batch;
///
/// // Sell one item and record the order, only while stock lasts.
/// let batch = Batch::new()
///     .decr_by_keeping("{flash-sale%2Fsku-42}:stock", 1, 0)
///     .hset("{flash-sale%2Fsku-42}:orders", "order-7", "alice");
/// assert_eq!(batch.len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    ops: Vec<Op>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Batch::default()
    }

    /// Adds an op.
    pub fn op(mut self, op: Op) -> Self {
        self.ops.push(op);
        self
    }

    /// Adds `SET key value`.
    pub fn set(self, key: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        self.op(Op::set(key, value))
    }

    /// Adds `DEL key`.
    pub fn del(self, key: impl Into<Bytes>) -> Self {
        self.op(Op::del(key))
    }

    /// Adds `INCRBY key by`.
    pub fn incr_by(self, key: impl Into<Bytes>, by: i64) -> Self {
        self.op(Op::incr_by(key, by))
    }

    /// Adds `DECRBY key by`.
    pub fn decr_by(self, key: impl Into<Bytes>, by: i64) -> Self {
        self.op(Op::decr_by(key, by))
    }

    /// Adds `DECRBY key by`, only if at least `keep` stay: the stock case.
    /// Otherwise the whole batch is refused (`Refused::CasMismatch` with
    /// the current value).
    pub fn decr_by_keeping(self, key: impl Into<Bytes>, by: i64, keep: i64) -> Self {
        self.op(Op::decr_by_keeping(key, by, keep))
    }

    /// Adds `HSET key field value`.
    pub fn hset(
        self,
        key: impl Into<Bytes>,
        field: impl Into<Bytes>,
        value: impl Into<Bytes>,
    ) -> Self {
        self.op(Op::hset(key, field, value))
    }

    /// Adds `HDEL key field`.
    pub fn hdel(self, key: impl Into<Bytes>, field: impl Into<Bytes>) -> Self {
        self.op(Op::hdel(key, field))
    }

    /// The ops, in order.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// How many ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// What one op of a batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// `SET`, `DEL`, `HSET`, `HDEL`: created, replaced, deleted or absent.
    Done(OpResult),
    /// `INCRBY`/`DECRBY`: the new value.
    Counter(i64),
}

/// A request's steps: most requests carry one, kept inline.
pub(crate) type Steps = SmallVec<[Step; 1]>;

/// A request's fields while it is encoded: a header of five and, for one
/// op, four.
pub(crate) type Tokens = SmallVec<[Token; 9]>;

/// A request's keys: the marks record and, for one op, its key.
pub(crate) type CallKeys = SmallVec<[Bytes; 2]>;

/// One step of a call: a write, or a fenced read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    Write(Op),
    Get { key: Bytes },
    HGet { key: Bytes, field: Bytes },
}

impl Step {
    /// The step's name in the function's requests.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Step::Write(op) => op.code(),
            Step::Get { .. } => "get",
            Step::HGet { .. } => "hget",
        }
    }

    pub(crate) fn key(&self) -> &[u8] {
        match self {
            Step::Write(op) => op.key(),
            Step::Get { key } | Step::HGet { key, .. } => key,
        }
    }
}

/// One field of a request, rendered as the function's argument
/// ([`Token::argument`]) or packed for the module ([`pack`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Token {
    Word(&'static str),
    /// Increments, floors, generations, marks, key indexes.
    Number(i128),
    /// An increment without a floor.
    NoFloor,
    Bytes(Bytes),
}

impl Token {
    /// The function's argument for this field.
    pub(crate) fn argument(&self) -> Bytes {
        match self {
            Token::Word(word) => Bytes::from_static(word.as_bytes()),
            Token::Number(value) => Bytes::from(value.to_string()),
            Token::NoFloor => Bytes::new(),
            Token::Bytes(bytes) => bytes.clone(),
        }
    }
}

/// A request's fields as the module's packed request (protocol 4): kept
/// inline up to a steady holder's counter op.
pub(crate) type PackedRequest = SmallVec<[u8; 48]>;

/// `tokens` packed for the module: separated by a space, bytes as
/// `length:bytes`, no floor as `-`.
pub(crate) fn pack(tokens: &[Token]) -> PackedRequest {
    let mut packed = PackedRequest::new();
    for (index, token) in tokens.iter().enumerate() {
        if index > 0 {
            packed.push(b' ');
        }
        match token {
            Token::Word(word) => packed.extend_from_slice(word.as_bytes()),
            Token::Number(value) => {
                packed.extend_from_slice(itoa::Buffer::new().format(*value).as_bytes())
            }
            Token::NoFloor => packed.push(b'-'),
            Token::Bytes(bytes) => {
                packed.extend_from_slice(itoa::Buffer::new().format(bytes.len()).as_bytes());
                packed.push(b':');
                packed.extend_from_slice(bytes);
            }
        }
    }
    packed
}

/// `KEYS` and the ops of a request: the data keys once each after the
/// marks record, and per step (appended to `tokens`) its code, its key's
/// index in `KEYS` (1-based) and its arguments. The steps' bytes move
/// into the request, uncopied.
pub(crate) fn encode(
    marks: Bytes,
    steps: Steps,
    tokens: &mut Tokens,
) -> Result<CallKeys, RedisFenceError> {
    if steps.len() > MAX_OPS {
        return Err(RedisFenceError::Invalid {
            reason: format!("{} ops; at most {MAX_OPS} go in one call", steps.len()),
        });
    }
    let mut keys = CallKeys::new();
    keys.push(marks);
    tokens.reserve(4 * steps.len());
    for (index, step) in steps.into_iter().enumerate() {
        let code = step.code();
        let (key, rest) = match step {
            Step::Write(Op::Set { key, value }) => (key, [Some(Token::Bytes(value)), None]),
            Step::Write(Op::Del { key }) => (key, [None, None]),
            Step::Write(Op::IncrBy { key, by, at_least }) => {
                for value in std::iter::once(by).chain(at_least) {
                    if !(-COUNTER_LIMIT..=COUNTER_LIMIT).contains(&value) {
                        return Err(RedisFenceError::Invalid {
                            reason: format!(
                                "op {index}: {value} is beyond ±{COUNTER_LIMIT}, the integers the function computes with exactly"
                            ),
                        });
                    }
                }
                let floor = at_least.map_or(Token::NoFloor, |floor| Token::Number(floor.into()));
                (key, [Some(Token::Number(by.into())), Some(floor)])
            }
            Step::Write(Op::HSet { key, field, value }) => {
                (key, [Some(Token::Bytes(field)), Some(Token::Bytes(value))])
            }
            Step::Write(Op::HDel { key, field }) => (key, [Some(Token::Bytes(field)), None]),
            Step::Get { key } => (key, [None, None]),
            Step::HGet { key, field } => (key, [Some(Token::Bytes(field)), None]),
        };
        if key.is_empty() {
            return Err(RedisFenceError::Invalid {
                reason: format!("op {index}: an empty key"),
            });
        }
        let position = match keys.iter().position(|known| *known == key) {
            Some(position) => position,
            None => {
                keys.push(key);
                keys.len() - 1
            }
        };
        tokens.push(Token::Word(code));
        tokens.push(Token::Number(position as i128 + 1));
        tokens.extend(rest.into_iter().flatten());
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(items: &[Bytes]) -> Vec<String> {
        items
            .iter()
            .map(|item| String::from_utf8_lossy(item).into_owned())
            .collect()
    }

    #[test]
    fn keys_are_sent_once_and_ops_name_them_by_index() {
        let steps: Steps = Batch::new()
            .decr_by_keeping("{a}:stock", 1, 0)
            .hset("{a}:orders", "o1", "alice")
            .incr_by("{a}:stock", 5)
            .ops()
            .iter()
            .cloned()
            .map(Step::Write)
            .chain([Step::Get {
                key: "{a}:stock".into(),
            }])
            .collect();
        let mut tokens = Tokens::new();
        let keys = encode("p:{a}:marks".into(), steps, &mut tokens).unwrap();
        assert_eq!(text(&keys), ["p:{a}:marks", "{a}:stock", "{a}:orders"]);
        let arguments: Vec<Bytes> = tokens.iter().map(Token::argument).collect();
        assert_eq!(
            text(&arguments),
            [
                "incr", "2", "-1", "0", "hset", "3", "o1", "alice", "incr", "2", "5", "", "get",
                "2"
            ]
        );
        assert_eq!(
            String::from_utf8(pack(&tokens).to_vec()).unwrap(),
            "incr 2 -1 0 hset 3 2:o1 5:alice incr 2 5 - get 2"
        );
    }

    #[test]
    fn counters_beyond_what_lua_holds_exactly_are_refused() {
        let step = |by| {
            smallvec::smallvec![Step::Write(Op::IncrBy {
                key: "k".into(),
                by,
                at_least: None,
            })]
        };
        let encode = |steps| encode("m".into(), steps, &mut Tokens::new());
        assert!(encode(step(COUNTER_LIMIT)).is_ok());
        assert!(encode(step(-COUNTER_LIMIT)).is_ok());
        assert!(encode(step(COUNTER_LIMIT + 1)).is_err());
        assert!(encode(step(i64::MIN)).is_err());
        assert!(encode(smallvec::smallvec![Step::Get { key: Bytes::new() }]).is_err());
    }
}
