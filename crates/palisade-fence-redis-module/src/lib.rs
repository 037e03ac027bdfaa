//! Palisade's fence for data kept in Redis, as a Redis module:
//! `PALISADE.FENCE` applies core's fencing rule ([`Marks::admit`] itself,
//! not a restatement) to a lock's marks record and does the write in the
//! same atomic command.
//!
//! It is the native form of the `palisade_fence` functions library's
//! `palisade_fence_apply` (crate `palisade-fence-redis`): the same
//! arguments in the same places (`PALISADE.FENCE numkeys key... arg...`,
//! as `FCALL palisade_fence_apply numkeys key... arg...`), the same
//! answers, the same marks record (one string `x s n`, the type `Record`),
//! so the library and the module serve the same data and a client uses
//! whichever the server has. The module costs a native command where the
//! function pays for the Lua interpreter.
//!
//! Load it with `redis-server --loadmodule
//! target/<profile>/libpalisade_fence_redis_module.so` (or `MODULE LOAD`)
//! on every node, replicas included: a call that writes reaches replicas
//! and the append-only file as itself (`RM_ReplicateVerbatim`), so they
//! run it again (docs/redis-data.md, "The module"). It reads and writes
//! keys in place through the key API (no `RM_Call`), opens each key once
//! per request and writes its answer straight to the client
//! (docs/benchmarks.md, "Redis fence").

use std::os::raw::c_char;

use palisade_core::Mode;
use palisade_core::marks::Marks;
use redis_module::{Context, KeyType, RedisError, RedisResult, RedisString, RedisValue, raw};

mod key;
mod request;

use key::Key;
use request::{EXACT, OpKind, Request, decimal, integer};

/// The version of the argument layout taken and of the marks record:
/// the function's requests packed one per argument (see `request.rs`),
/// the record one string (see [`Record`]). Version 3 kept the record as
/// a hash.
const PROTOCOL: &[u8] = b"4";

fn fail(message: &str) -> RedisError {
    RedisError::String(format!("PALISADE {message}"))
}

/// `PALISADE.FENCE numkeys key... 3 count (base request)...`: the
/// answers to the requests, in order, in one string (see [`Out`]).
/// Redis learns the keys through the keys position API (`getkeys-api`):
/// the key specs Redis 7.0 accepts from a module cannot be set through
/// the module API's safe surface.
fn fence(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let bytes: Vec<&[u8]> = args.iter().map(|arg| arg.as_slice()).collect();
    let key_count = bytes
        .get(1)
        .and_then(|count| decimal(count, true))
        .and_then(|count| usize::try_from(count).ok())
        .filter(|count| 2 + count <= bytes.len());
    if ctx.is_keys_position_request() {
        // Where the keys are (`getkeys-api`): Redis Cluster checks that
        // they share a slot and that this node serves it, ACLs check them.
        for position in 2..2 + key_count.unwrap_or(0) {
            ctx.key_at_pos(i32::try_from(position).unwrap_or(i32::MAX));
        }
        return Ok(RedisValue::NoReply);
    }
    let key_count = key_count.ok_or_else(|| fail("bad key count"))?;
    let names = &args[2..2 + key_count];
    let (keys, args) = bytes[2..].split_at(key_count);
    if args.first() != Some(&PROTOCOL) {
        return Err(fail("protocol is not 4"));
    }
    let count = args
        .get(1)
        .and_then(|count| decimal(count, false))
        .and_then(|count| usize::try_from(count).ok())
        .filter(|count| args.len() == 2 + 2 * count)
        .ok_or_else(|| fail("bad request count"))?;
    let mut requests = Vec::with_capacity(count);
    for (index, pair) in args[2..].chunks_exact(2).enumerate() {
        let base = decimal(pair[0], true)
            .and_then(|base| usize::try_from(base).ok())
            .filter(|base| *base < keys.len())
            .ok_or_else(|| fail(&format!("request {index}: bad key base")))?;
        requests.push((base, pair[1]));
    }
    let mut out = Out {
        text: Vec::with_capacity(64 * count),
        fresh: true,
        wrote: false,
    };
    for (base, request) in requests {
        match request::parse(keys, base, request) {
            Ok(request) => apply(ctx, names, keys, &request, &mut out),
            Err(message) => out.error(&message),
        }
    }
    if out.wrote {
        // Replicas and the append-only file get the call itself: the
        // command is deterministic (its answers and writes follow from its
        // arguments and the data alone), so a replica or a replay that
        // runs it on the same data writes the same.
        ctx.replicate_verbatim();
    }
    raw::reply_with_string_buffer(
        ctx.get_raw(),
        out.text.as_ptr().cast::<c_char>(),
        out.text.len(),
    );
    Ok(RedisValue::NoReply)
}

/// The answers of one call, as one string: a line per request, its
/// tokens separated by a space:
///
/// ```text
/// answer = ("ok" SP x SP s SP seq SP restored *(SP result)
///          / "stale" SP x SP s SP restored / "short" SP op SP current
///          / "shared_on_write" / "wrongtype" SP op / "notinteger" SP op
///          / "error" SP bytes) LF
/// result = ":" integer / "$" bytes / "_"
/// bytes  = length ":" <length bytes>
/// ```
struct Out {
    text: Vec<u8>,
    /// No token yet on this line.
    fresh: bool,
    /// A request wrote something: the call is replicated.
    wrote: bool,
}

impl Out {
    fn word(&mut self, word: &str) {
        if !self.fresh {
            self.text.push(b' ');
        }
        self.fresh = false;
        self.text.extend_from_slice(word.as_bytes());
    }

    fn number(&mut self, value: impl itoa::Integer) {
        self.word(itoa::Buffer::new().format(value));
    }

    fn bytes(&mut self, prefix: &str, bytes: &[u8]) {
        self.word(prefix);
        self.text
            .extend_from_slice(itoa::Buffer::new().format(bytes.len()).as_bytes());
        self.text.push(b':');
        self.text.extend_from_slice(bytes);
    }

    fn int(&mut self, value: i64) {
        self.word(":");
        self.text
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    fn end(&mut self) {
        self.text.push(b'\n');
        self.fresh = true;
    }

    /// A request's own error (the call's other requests go on).
    fn error(&mut self, message: &str) {
        self.word("error");
        self.bytes("", format!("PALISADE {message}").as_bytes());
        self.end();
    }

    /// A refusal that names its op.
    fn refusal(&mut self, code: &str, index: usize) {
        self.word(code);
        self.number(index);
        self.end();
    }
}

/// A lock's marks record: its marks and its write sequence, kept as one
/// string `x SP s SP n` (decimals: `H_excl`, `H_shared`, the sequence),
/// read and written in place. The first layout, a hash of the fields `x`,
/// `s` and `n`, is still read, and rewritten as a string at its next
/// write.
#[derive(Clone, Copy)]
struct Record {
    marks: Marks,
    seq: i64,
}

impl Record {
    const ZERO: Record = Record {
        marks: Marks::ZERO,
        seq: 0,
    };

    /// `None` when the key holds no canonical record.
    fn read(key: &Key) -> Option<Record> {
        match key.kind() {
            KeyType::Empty => Some(Record::ZERO),
            KeyType::String => Record::parse(key.string()?),
            KeyType::Hash => {
                let [x, s, n] = key.marks_fields(|value| (decimal(value, true), integer(value)));
                let field =
                    |field: Option<(Option<u64>, Option<i64>)>| field.unwrap_or((Some(0), Some(0)));
                Some(Record {
                    marks: Marks {
                        exclusive: field(x).0?,
                        shared: field(s).0?,
                    },
                    seq: field(n).1?,
                })
            }
            _ => None,
        }
    }

    fn parse(text: &[u8]) -> Option<Record> {
        let mut fields = text.split(|byte| *byte == b' ');
        let (x, s, n) = (fields.next()?, fields.next()?, fields.next()?);
        if fields.next().is_some() {
            return None;
        }
        Some(Record {
            marks: Marks {
                exclusive: decimal(x, true)?,
                shared: decimal(s, true)?,
            },
            seq: integer(n)?,
        })
    }

    /// Writes the record over `key`, in place.
    fn write(self, key: &Key, out: &mut Out) {
        out.wrote = true;
        let (text, len) = self.text();
        key.overwrite(&text[..len], c"set");
    }

    /// The record's text, on the stack: two u64s, an i64 and two spaces
    /// are at most 62 bytes.
    fn text(self) -> ([u8; 62], usize) {
        let (mut x, mut s, mut n) = (
            itoa::Buffer::new(),
            itoa::Buffer::new(),
            itoa::Buffer::new(),
        );
        let fields = [
            x.format(self.marks.exclusive),
            s.format(self.marks.shared),
            n.format(self.seq),
        ];
        let mut text = [0u8; 62];
        let mut len = 0;
        for (index, field) in fields.iter().enumerate() {
            if index > 0 {
                text[len] = b' ';
                len += 1;
            }
            text[len..len + field.len()].copy_from_slice(field.as_bytes());
            len += field.len();
        }
        (text, len)
    }
}

/// A key's kind as the ops so far leave it; a string's value once a
/// counter op has read it.
#[derive(Clone, Copy)]
enum Kind {
    None,
    String(Counter),
    Hash,
    Other,
}

#[derive(Clone, Copy)]
enum Counter {
    Unread,
    Int(i64),
    NotInt,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::None => "none",
            Kind::String(_) => "string",
            Kind::Hash => "hash",
            Kind::Other => "other",
        }
    }

    /// What `key` holds, as far as `op` needs to know: a counter's value
    /// comes with its kind.
    fn of(key: &Key, op: &OpKind<'_>) -> Kind {
        match key.kind() {
            KeyType::Empty => Kind::None,
            KeyType::String if matches!(op, OpKind::Incr { .. }) => Kind::String(counter(key)),
            KeyType::String => Kind::String(Counter::Unread),
            KeyType::Hash => Kind::Hash,
            _ => Kind::Other,
        }
    }
}

fn counter(key: &Key) -> Counter {
    match key.string().and_then(integer) {
        Some(value) => Counter::Int(value),
        None => Counter::NotInt,
    }
}

/// What the plan decided for an op, before anything is written.
enum Planned {
    Text(&'static str),
    Counter(i64),
    Later,
}

/// A key a request touches: opened once, its kind as the ops planned so
/// far leave it.
struct Touched<'a> {
    name: &'a [u8],
    key: Key,
    kind: Kind,
}

/// One request: the rule, then every op checked against what the ops
/// before it leave behind, then (only if all pass) the writes.
fn apply(
    ctx: &Context,
    names: &[RedisString],
    keys: &[&[u8]],
    request: &Request<'_>,
    out: &mut Out,
) {
    let writes = request.ops.iter().any(|op| op.kind.writes());
    if writes && request.mode != Mode::Exclusive {
        out.word("shared_on_write");
        out.end();
        return;
    }
    let marks_name = &names[request.marks];
    let marks_key = Key::open(ctx, marks_name);
    let Some(record) = Record::read(&marks_key) else {
        out.error("corrupt marks record");
        return;
    };
    // Put back what Redis lost: the floors are marks this client saw.
    let floor = request.floor;
    let restored = record.marks.exclusive < floor.exclusive || record.marks.shared < floor.shared;
    let before = Marks {
        exclusive: record.marks.exclusive.max(floor.exclusive),
        shared: record.marks.shared.max(floor.shared),
    };
    let Some(after) = before.admit(request.mode, request.generation) else {
        if restored {
            Record {
                marks: before,
                seq: record.seq,
            }
            .write(&marks_key, out);
        }
        out.word("stale");
        out.number(before.exclusive);
        out.number(before.shared);
        out.number(u8::from(restored));
        out.end();
        return;
    };

    let mut touched: Vec<Touched<'_>> = Vec::with_capacity(request.ops.len());
    let mut plan = Vec::with_capacity(request.ops.len());
    for (index, op) in request.ops.iter().enumerate() {
        let name = keys[op.key];
        let at = match touched.iter().position(|key| key.name == name) {
            Some(at) => at,
            None => {
                let key = Key::open(ctx, &names[op.key]);
                let kind = Kind::of(&key, &op.kind);
                touched.push(Touched { name, key, kind });
                touched.len() - 1
            }
        };
        let Touched { key, kind, .. } = &mut touched[at];
        if let Some(needs) = op.kind.needs() {
            if !matches!(kind, Kind::None) && kind.name() != needs {
                return out.refusal("wrongtype", index);
            }
        }
        let planned = match &op.kind {
            OpKind::Set(value) => {
                let result = if matches!(kind, Kind::None) {
                    "created"
                } else {
                    "replaced"
                };
                *kind = Kind::String(match integer(value) {
                    Some(value) => Counter::Int(value),
                    None => Counter::NotInt,
                });
                Planned::Text(result)
            }
            OpKind::Del => {
                let result = if matches!(kind, Kind::None) {
                    "absent"
                } else {
                    "deleted"
                };
                *kind = Kind::None;
                Planned::Text(result)
            }
            OpKind::Incr { by, floor } => {
                if let Kind::String(value @ Counter::Unread) = kind {
                    *value = counter(key);
                }
                let current = match kind {
                    Kind::None => Some(0),
                    Kind::String(Counter::Int(value)) => Some(*value),
                    _ => None,
                };
                let Some(current) = current else {
                    return out.refusal("notinteger", index);
                };
                let new = current + by;
                if !(-EXACT..=EXACT).contains(&new) {
                    return out.refusal("notinteger", index);
                }
                if floor.is_some_and(|floor| new < floor) {
                    out.word("short");
                    out.number(index);
                    out.number(current);
                    out.end();
                    return;
                }
                *kind = Kind::String(Counter::Int(new));
                Planned::Counter(new)
            }
            OpKind::HSet(..) => {
                *kind = Kind::Hash;
                Planned::Later
            }
            OpKind::HDel(_) | OpKind::Get | OpKind::HGet(_) => Planned::Later,
        };
        plan.push((at, planned));
    }

    // Admitted, every op possible: write the marks, then the ops in order.
    let seq = record.seq + i64::from(writes);
    if restored || after != before || writes {
        Record { marks: after, seq }.write(&marks_key, out);
    }
    out.word("ok");
    out.number(after.exclusive);
    out.number(after.shared);
    out.number(seq);
    out.number(u8::from(restored));
    for (op, (at, planned)) in request.ops.iter().zip(plan) {
        let key = &touched[at].key;
        match (&op.kind, planned) {
            (OpKind::Set(value), Planned::Text(result)) => {
                key.set(value);
                out.bytes("$", result.as_bytes());
            }
            (OpKind::Del, Planned::Text(result)) => {
                if result == "deleted" {
                    key.delete();
                }
                out.bytes("$", result.as_bytes());
            }
            (OpKind::Incr { .. }, Planned::Counter(new)) => {
                key.overwrite(itoa::Buffer::new().format(new).as_bytes(), c"incrby");
                out.int(new);
            }
            (OpKind::HSet(field, value), _) => {
                let created = key.hash_set(field, value);
                out.bytes("$", if created { b"created" } else { b"replaced" });
            }
            (OpKind::HDel(field), _) => {
                let deleted = key.hash_del(field);
                out.bytes("$", if deleted { b"deleted" } else { b"absent" });
            }
            (OpKind::Get, _) => match key.string() {
                Some(value) => out.bytes("$", value),
                None => out.word("_"),
            },
            (OpKind::HGet(field), _) => match key.hash_get(field) {
                Some(value) => out.bytes("$", &value),
                None => out.word("_"),
            },
            // The plan made one of the above for each op.
            (_, _) => out.word("_"),
        }
    }
    out.end();
}

/// On load: keys this module opens but does not write signal no one
/// (see [`Key`]).
fn init(ctx: &Context, _args: &[RedisString]) -> redis_module::Status {
    ctx.set_module_options(redis_module::raw::ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED);
    redis_module::Status::Ok
}

/// The module's entry points (`RedisModule_OnLoad`), generated. The
/// system allocator, not Redis's: this crate is also an rlib (the fence's
/// tests depend on it to have it built), and its global allocator would be
/// that of any binary linking it. A call's allocations live only as long
/// as the call.
#[allow(missing_docs)]
mod entry {
    use crate::init;
    use redis_module::redis_module;

    redis_module! {
        name: "palisade",
        version: 2,
        allocator: (std::alloc::System, std::alloc::System),
        data_types: [],
        init: init,
        commands: [
            ["palisade.fence", crate::fence, "write deny-oom getkeys-api", 0, 0, 0, ""],
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_what_it_writes_and_the_longest_fits() {
        for (exclusive, shared, seq) in [(0, 0, 0), (7, 3, 12), (u64::MAX, u64::MAX, EXACT)] {
            let record = Record {
                marks: Marks { exclusive, shared },
                seq,
            };
            let (text, len) = record.text();
            let read = Record::parse(&text[..len]).expect("a canonical record");
            assert_eq!((read.marks, read.seq), (record.marks, seq));
        }
        let longest = Record {
            marks: Marks {
                exclusive: u64::MAX,
                shared: u64::MAX,
            },
            seq: i64::MIN,
        };
        assert_eq!(longest.text().1, 62);
    }
}
