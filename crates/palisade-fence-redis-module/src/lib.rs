//! Palisade's fence for data kept in Redis, as a Redis module:
//! `PALISADE.FENCE` applies core's fencing rule ([`Marks::admit`] itself,
//! not a restatement) to a lock's marks record and does the write in the
//! same atomic command.
//!
//! It is the native form of the `palisade_fence` functions library's
//! `palisade_fence_apply` (crate `palisade-fence-redis`): the same
//! arguments in the same places (`PALISADE.FENCE numkeys key... arg...`,
//! as `FCALL palisade_fence_apply numkeys key... arg...`), the same
//! answers, the same marks record (hash fields `x`, `s`, `n`, decimal
//! strings), so the library and the module serve the same data and a
//! client uses whichever the server has. The module costs a native
//! command where the function pays for the Lua interpreter.
//!
//! Load it with `redis-server --loadmodule
//! target/<profile>/libpalisade_fence_redis_module.so` (or `MODULE LOAD`).
//! Its writes reach replicas and the append-only file as the plain
//! commands they are (`HSET`, `INCRBY`, ... in one `MULTI`), so replicas
//! and an AOF replay do not need the module.

use palisade_core::Mode;
use palisade_core::marks::Marks;
use redis_module::{
    CallOptions, CallOptionsBuilder, CallReply, CallResult, Context, KeyType, RedisError,
    RedisResult, RedisString, RedisValue,
};

mod request;

use request::{EXACT, OpKind, Request, decimal, integer};

/// The version of the argument layout taken (the function's `PROTOCOL`).
const PROTOCOL: &[u8] = b"2";

fn fail(message: &str) -> RedisError {
    RedisError::String(format!("PALISADE {message}"))
}

fn text(value: impl Into<Vec<u8>>) -> RedisValue {
    RedisValue::StringBuffer(value.into())
}

fn number(value: u64) -> RedisValue {
    text(value.to_string())
}

/// A request's own error (the call's other requests go on).
fn bad(message: &str) -> RedisValue {
    RedisValue::Array(vec![text("error"), text(format!("PALISADE {message}"))])
}

/// `PALISADE.FENCE numkeys key... 2 count (size base arg...)...`: one
/// answer per request, in order (see `palisade_fence.lua`, `apply`).
/// Redis learns the keys through the keys position API (`getkeys-api`):
/// the key specs Redis 7.0 accepts from a module cannot be set through
/// the module API's safe surface.
fn fence(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_slice()).collect();
    let key_count = args
        .get(1)
        .and_then(|count| decimal(count, true))
        .and_then(|count| usize::try_from(count).ok())
        .filter(|count| 2 + count <= args.len());
    if ctx.is_keys_position_request() {
        // Where the keys are (`getkeys-api`): Redis Cluster checks that
        // they share a slot and that this node serves it, ACLs check them.
        for position in 2..2 + key_count.unwrap_or(0) {
            ctx.key_at_pos(i32::try_from(position).unwrap_or(i32::MAX));
        }
        return Ok(RedisValue::NoReply);
    }
    let key_count = key_count.ok_or_else(|| fail("bad key count"))?;
    let (keys, args) = args[2..].split_at(key_count);
    if args.first() != Some(&PROTOCOL) {
        return Err(fail("protocol is not 2"));
    }
    let count = args
        .get(1)
        .and_then(|count| decimal(count, false))
        .and_then(|count| usize::try_from(count).ok())
        .ok_or_else(|| fail("bad request count"))?;
    let mut requests = Vec::with_capacity(count.min(args.len()));
    let mut at = 2;
    for index in 0..count {
        let size = args.get(at).and_then(|size| decimal(size, true));
        let base = args.get(at + 1).and_then(|base| decimal(base, true));
        let bounds = size.zip(base).and_then(|(size, base)| {
            let size = usize::try_from(size).ok().filter(|size| *size >= 6)?;
            let end = (at + 2)
                .checked_add(size)
                .filter(|end| *end <= args.len())?;
            Some((usize::try_from(base).ok()?, end))
        });
        let Some((base, end)) = bounds else {
            return Err(fail(&format!("request {index}: bad size or key base")));
        };
        requests.push((base, &args[at + 2..end]));
        at = end;
    }
    if at != args.len() {
        return Err(fail("arguments do not match the requests"));
    }
    let mut fence = Fence::new(ctx);
    Ok(RedisValue::Array(
        requests
            .into_iter()
            .map(
                |(base, request)| match request::parse(keys, base, request) {
                    Ok(request) => fence.apply(&request),
                    Err(message) => bad(&message),
                },
            )
            .collect(),
    ))
}

/// The commands a call sends, as the function sends them with
/// `redis.call`: writes replicated as themselves, errors as replies.
struct Fence<'ctx> {
    ctx: &'ctx Context,
    write: CallOptions,
    read: CallOptions,
}

/// A reply's content, copied out of Redis's reply object.
enum Reply {
    Int(i64),
    Bytes(Vec<u8>),
    Null,
    Array(Vec<Reply>),
    Error(String),
}

impl Reply {
    fn bytes(self) -> Option<Vec<u8>> {
        match self {
            Reply::Bytes(bytes) => Some(bytes),
            _ => None,
        }
    }

    fn into_value(self) -> RedisValue {
        match self {
            Reply::Int(value) => RedisValue::Integer(value),
            Reply::Bytes(bytes) => RedisValue::StringBuffer(bytes),
            Reply::Null => RedisValue::Null,
            Reply::Array(items) => {
                RedisValue::Array(items.into_iter().map(Reply::into_value).collect())
            }
            Reply::Error(message) => RedisValue::SimpleString(message),
        }
    }
}

fn copy(result: CallResult<'_>) -> Reply {
    match result {
        Ok(CallReply::I64(value)) => Reply::Int(value.to_i64()),
        Ok(CallReply::String(value)) => Reply::Bytes(value.as_bytes().to_vec()),
        Ok(CallReply::Array(items)) => Reply::Array(
            (0..items.len())
                .filter_map(|at| items.get(at))
                .map(copy)
                .collect(),
        ),
        Ok(CallReply::Null(_)) => Reply::Null,
        Ok(_) => Reply::Error("unexpected reply".into()),
        Err(error) => Reply::Error(error.to_utf8_string().unwrap_or_default()),
    }
}

/// The marks record as read: `None` when it does not hold canonical
/// marks.
struct Record {
    marks: Marks,
    seq: i64,
}

impl<'ctx> Fence<'ctx> {
    fn new(ctx: &'ctx Context) -> Self {
        Fence {
            ctx,
            write: CallOptionsBuilder::new()
                .replicate()
                .errors_as_replies()
                .build(),
            read: CallOptionsBuilder::new().errors_as_replies().build(),
        }
    }

    fn call(&self, command: &str, args: &[&[u8]]) -> Reply {
        copy(
            self.ctx
                .call_ext::<_, CallResult<'_>>(command, &self.read, args),
        )
    }

    fn call_write(&self, command: &str, args: &[&[u8]]) -> Reply {
        copy(
            self.ctx
                .call_ext::<_, CallResult<'_>>(command, &self.write, args),
        )
    }

    /// Reads the marks record through the key API (an `RM_Call` makes a
    /// temporary client and parses its reply back).
    fn read_marks(&self, key: &[u8]) -> Option<Record> {
        let record = self.ctx.open_key(&self.ctx.create_string(key));
        let field = |name: &str| -> Option<Vec<u8>> {
            match record.hash_get(name).ok()? {
                Some(value) => Some(value.as_slice().to_vec()),
                None => Some(b"0".to_vec()),
            }
        };
        let (x, s, n) = match record.key_type() {
            KeyType::Empty => (b"0".to_vec(), b"0".to_vec(), b"0".to_vec()),
            KeyType::Hash => (field("x")?, field("s")?, field("n")?),
            _ => return None,
        };
        Some(Record {
            marks: Marks {
                exclusive: decimal(&x, true)?,
                shared: decimal(&s, true)?,
            },
            seq: integer(&n)?,
        })
    }

    /// Sets fields of the marks record (key API), replicated as `HSET`.
    fn write_record(&self, key: &[u8], fields: &[(&str, String)]) {
        let name = self.ctx.create_string(key);
        let record = self.ctx.open_key_writable(&name);
        let mut replicated: Vec<&[u8]> = vec![key];
        for (field, value) in fields {
            record.hash_set(field, self.ctx.create_string(value.as_str()));
            replicated.push(field.as_bytes());
            replicated.push(value.as_bytes());
        }
        self.ctx.replicate("HSET", replicated.as_slice());
    }

    fn write_marks(&self, key: &[u8], marks: Marks) {
        self.write_record(
            key,
            &[
                ("x", marks.exclusive.to_string()),
                ("s", marks.shared.to_string()),
            ],
        );
    }

    /// One request: the rule, then every op checked against what the ops
    /// before it leave behind, then (only if all pass) the writes.
    fn apply(&mut self, request: &Request<'_>) -> RedisValue {
        let writes = request.ops.iter().any(|op| op.kind.writes());
        if writes && request.mode != Mode::Exclusive {
            return RedisValue::Array(vec![text("shared_on_write")]);
        }
        let Some(record) = self.read_marks(request.marks_key) else {
            return bad("corrupt marks record");
        };
        // Put back what Redis lost: the floors are marks this client saw.
        let floor = request.floor;
        let restored =
            record.marks.exclusive < floor.exclusive || record.marks.shared < floor.shared;
        let before = Marks {
            exclusive: record.marks.exclusive.max(floor.exclusive),
            shared: record.marks.shared.max(floor.shared),
        };
        let Some(after) = before.admit(request.mode, request.generation) else {
            if restored {
                self.write_marks(request.marks_key, before);
            }
            return RedisValue::Array(vec![
                text("stale"),
                number(before.exclusive),
                number(before.shared),
                RedisValue::Integer(restored.into()),
            ]);
        };

        // Each key's kind and (counters) value as the ops so far leave it.
        let mut state: Vec<(&[u8], Kind)> = Vec::new();
        let mut results: Vec<RedisValue> = Vec::with_capacity(request.ops.len());
        for (index, op) in request.ops.iter().enumerate() {
            let at = match state.iter().position(|(key, _)| *key == op.key) {
                Some(at) => at,
                None => {
                    state.push((op.key, self.kind(op.key, &op.kind)));
                    state.len() - 1
                }
            };
            let kind = &mut state[at].1;
            if let Some(needs) = op.kind.needs() {
                if !matches!(kind, Kind::None) && kind.name() != needs {
                    return answer("wrongtype", index);
                }
            }
            let result = match &op.kind {
                OpKind::Set(value) => {
                    let result = if matches!(kind, Kind::None) {
                        "created"
                    } else {
                        "replaced"
                    };
                    *kind = Kind::String(Some(value.to_vec()));
                    text(result)
                }
                OpKind::Del => {
                    let result = if matches!(kind, Kind::None) {
                        "absent"
                    } else {
                        "deleted"
                    };
                    *kind = Kind::None;
                    text(result)
                }
                OpKind::Incr { by, floor } => {
                    if let Kind::String(value @ None) = kind {
                        *value = self.call("GET", &[op.key]).bytes();
                    }
                    let current = match kind {
                        Kind::None => Some(0),
                        Kind::String(Some(value)) => integer(value),
                        _ => None,
                    };
                    let Some(current) = current else {
                        return answer("notinteger", index);
                    };
                    let new = current + by;
                    if !(-EXACT..=EXACT).contains(&new) {
                        return answer("notinteger", index);
                    }
                    if floor.is_some_and(|floor| new < floor) {
                        return RedisValue::Array(vec![
                            text("short"),
                            RedisValue::Integer(index as i64),
                            RedisValue::Integer(current),
                        ]);
                    }
                    *kind = Kind::String(Some(new.to_string().into_bytes()));
                    RedisValue::Integer(new)
                }
                OpKind::HSet(..) => {
                    *kind = Kind::Other("hash".into());
                    RedisValue::Null
                }
                OpKind::HDel(_) | OpKind::Get | OpKind::HGet(_) => RedisValue::Null,
            };
            results.push(result);
        }

        let marks_key = request.marks_key;
        if restored || after != before {
            self.write_marks(marks_key, after);
        }
        let seq = if writes {
            let seq = record.seq + 1;
            self.write_record(marks_key, &[("n", seq.to_string())]);
            RedisValue::Integer(seq)
        } else {
            text(record.seq.to_string())
        };
        for (op, result) in request.ops.iter().zip(&mut results) {
            let key = op.key;
            match &op.kind {
                OpKind::Set(value) => {
                    self.call_write("SET", &[key, value]);
                }
                OpKind::Del => {
                    self.call_write("DEL", &[key]);
                }
                OpKind::Incr { by, .. } => {
                    self.call_write("INCRBY", &[key, by.to_string().as_bytes()]);
                }
                OpKind::HSet(field, value) => {
                    let created =
                        matches!(self.call_write("HSET", &[key, field, value]), Reply::Int(1));
                    *result = text(if created { "created" } else { "replaced" });
                }
                OpKind::HDel(field) => {
                    let deleted = matches!(self.call_write("HDEL", &[key, field]), Reply::Int(1));
                    *result = text(if deleted { "deleted" } else { "absent" });
                }
                OpKind::Get => *result = self.call("GET", &[key]).into_value(),
                OpKind::HGet(field) => *result = self.call("HGET", &[key, field]).into_value(),
            }
        }
        let mut reply = vec![
            text("ok"),
            number(after.exclusive),
            number(after.shared),
            seq,
            RedisValue::Integer(restored.into()),
        ];
        reply.extend(results);
        RedisValue::Array(reply)
    }

    /// What `key` holds, as far as `op` needs to know: a counter's value
    /// comes with its kind (one `GET`).
    fn kind(&self, key: &[u8], op: &OpKind<'_>) -> Kind {
        let data = self.ctx.open_key(&self.ctx.create_string(key));
        match data.key_type() {
            KeyType::Empty => Kind::None,
            KeyType::String if matches!(op, OpKind::Incr { .. }) => {
                Kind::String(data.read().ok().flatten().map(<[u8]>::to_vec))
            }
            KeyType::String => Kind::String(None),
            KeyType::Hash => Kind::Other("hash".into()),
            _ => Kind::Other("other".into()),
        }
    }
}

/// A key's kind; a string's value once a counter op has read it.
enum Kind {
    None,
    String(Option<Vec<u8>>),
    Other(String),
}

impl Kind {
    fn name(&self) -> &str {
        match self {
            Kind::None => "none",
            Kind::String(_) => "string",
            Kind::Other(name) => name,
        }
    }
}

/// A request's refusal that names its op.
fn answer(code: &str, index: usize) -> RedisValue {
    RedisValue::Array(vec![text(code), RedisValue::Integer(index as i64)])
}

/// The module's entry points (`RedisModule_OnLoad`), generated. The
/// system allocator, not Redis's: this crate is also an rlib (the fence's
/// tests depend on it to have it built), and its global allocator would be
/// that of any binary linking it. A call's allocations live only as long
/// as the call.
#[allow(missing_docs)]
mod entry {
    use redis_module::redis_module;

    redis_module! {
        name: "palisade",
        version: 1,
        allocator: (std::alloc::System, std::alloc::System),
        data_types: [],
        commands: [
            ["palisade.fence", crate::fence, "write deny-oom getkeys-api", 0, 0, 0, ""],
        ],
    }
}
