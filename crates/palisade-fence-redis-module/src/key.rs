//! The key API calls the fence makes, each a direct read or write of one
//! key. `RM_Call` would cost a temporary client, argument objects and a
//! reply parsed back per command (most of a fenced write's time in Redis
//! when the module used it); the key API reads and writes in place.
//!
//! Every `unsafe` block here calls the module API on the command's own
//! context, on the thread Redis runs the command on, with pointers Redis
//! gave or that this module created and frees.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::os::raw::{c_char, c_int};
use std::ptr;

use redis_module::{Context, KeyType, RedisString, raw};

/// An open key; closed when dropped (a key opened for writing signals
/// `WATCH`ers then, as a command's write does).
pub(crate) struct Key {
    ctx: *mut raw::RedisModuleCtx,
    inner: *mut raw::RedisModuleKey,
}

impl Drop for Key {
    fn drop(&mut self) {
        raw::close_key(self.inner);
    }
}

/// A string the module created; freed when dropped.
struct Owned {
    ctx: *mut raw::RedisModuleCtx,
    inner: *mut raw::RedisModuleString,
}

impl Owned {
    fn new(ctx: *mut raw::RedisModuleCtx, bytes: &[u8]) -> Owned {
        // SAFETY: `bytes` is valid for its length; Redis copies it.
        let inner = unsafe {
            raw::RedisModule_CreateString.expect("RedisModule_CreateString")(
                ctx,
                bytes.as_ptr().cast::<c_char>(),
                bytes.len(),
            )
        };
        Owned { ctx, inner }
    }

    fn number(ctx: *mut raw::RedisModuleCtx, value: i128) -> Owned {
        Owned::new(ctx, itoa::Buffer::new().format(value).as_bytes())
    }

    /// A string the API created for this module (a `HashGet` value), to
    /// be freed here; `None` for a null pointer (no such field).
    fn adopt(ctx: *mut raw::RedisModuleCtx, inner: *mut raw::RedisModuleString) -> Option<Owned> {
        // Not `then_some`: an `Owned` of null, built and dropped, would be
        // freed.
        if inner.is_null() {
            None
        } else {
            Some(Owned { ctx, inner })
        }
    }

    fn bytes(&self) -> &[u8] {
        let mut len = 0;
        // SAFETY: a live string; the pointer is valid for `len` while it is.
        unsafe {
            let at = raw::RedisModule_StringPtrLen.expect("RedisModule_StringPtrLen")(
                self.inner, &mut len,
            );
            std::slice::from_raw_parts(at.cast::<u8>(), len)
        }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: created by this module on this context, freed once.
        unsafe {
            raw::RedisModule_FreeString.expect("RedisModule_FreeString")(self.ctx, self.inner)
        }
    }
}

impl Key {
    pub(crate) fn open(ctx: &Context, name: &RedisString, write: bool) -> Key {
        let mode = if write {
            raw::KeyMode::READ | raw::KeyMode::WRITE
        } else {
            raw::KeyMode::READ
        };
        Key {
            ctx: ctx.get_raw(),
            inner: raw::open_key(ctx.get_raw(), name.inner, mode),
        }
    }

    pub(crate) fn kind(&self) -> KeyType {
        // SAFETY: an open key.
        unsafe { raw::RedisModule_KeyType.expect("RedisModule_KeyType")(self.inner) }.into()
    }

    /// A string key's value (`None`: not a string, or no key).
    pub(crate) fn string(&self) -> Option<&[u8]> {
        if self.kind() != KeyType::String {
            return None;
        }
        let mut len = 0;
        let at = raw::string_dma(self.inner, &mut len, raw::KeyMode::READ);
        // SAFETY: a string key's buffer, valid for `len` while unchanged.
        (!at.is_null()).then(|| unsafe { std::slice::from_raw_parts(at.cast::<u8>(), len) })
    }

    /// The marks record's fields `x`, `s` and `n` (one `HGET` of three
    /// fields), as `f` reads them (`None`: the field is not there).
    pub(crate) fn marks_fields<T>(&self, f: impl Fn(&[u8]) -> T) -> [Option<T>; 3] {
        let mut values: [*mut raw::RedisModuleString; 3] = [ptr::null_mut(); 3];
        let [x, s, n] = &mut values;
        // SAFETY: three C field names, each with its out pointer, then
        // the terminator.
        unsafe {
            raw::RedisModule_HashGet.expect("RedisModule_HashGet")(
                self.inner,
                raw::REDISMODULE_HASH_CFIELDS as c_int,
                c"x".as_ptr(),
                x as *mut _,
                c"s".as_ptr(),
                s as *mut _,
                c"n".as_ptr(),
                n as *mut _,
                ptr::null::<c_char>(),
            )
        };
        values.map(|value| Owned::adopt(self.ctx, value).map(|value| f(value.bytes())))
    }

    /// Sets decimal fields of a hash (created if absent).
    pub(crate) fn hash_set_numbers(&self, fields: &[(&CStr, i128)]) {
        for (name, value) in fields {
            let value = Owned::number(self.ctx, *value);
            // SAFETY: one C field name, its value, the terminator.
            unsafe {
                raw::RedisModule_HashSet.expect("RedisModule_HashSet")(
                    self.inner,
                    raw::REDISMODULE_HASH_CFIELDS as c_int,
                    name.as_ptr(),
                    value.inner,
                    ptr::null::<c_char>(),
                )
            };
        }
    }

    /// `HSET key field value` on a hash (or no key): whether the field
    /// was new.
    pub(crate) fn hash_set(&self, field: &[u8], value: &[u8]) -> bool {
        let (field, value) = (Owned::new(self.ctx, field), Owned::new(self.ctx, value));
        // Without COUNT_ALL Redis counts updated fields only.
        // SAFETY: one field, its value, the terminator.
        let updated = unsafe {
            raw::RedisModule_HashSet.expect("RedisModule_HashSet")(
                self.inner,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.inner,
                value.inner,
                ptr::null::<c_char>(),
            )
        };
        updated == 0
    }

    /// `HDEL key field`: whether the field was there.
    pub(crate) fn hash_del(&self, field: &[u8]) -> bool {
        let field = Owned::new(self.ctx, field);
        // SAFETY: one field, the delete marker, the terminator.
        let deleted = unsafe {
            raw::RedisModule_HashSet.expect("RedisModule_HashSet")(
                self.inner,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.inner,
                raw::REDISMODULE_HASH_DELETE,
                ptr::null::<c_char>(),
            )
        };
        deleted == 1
    }

    /// `HGET key field`, copied out.
    pub(crate) fn hash_get(&self, field: &[u8]) -> Option<Vec<u8>> {
        if self.kind() != KeyType::Hash {
            return None;
        }
        let field = Owned::new(self.ctx, field);
        let mut value: *mut raw::RedisModuleString = ptr::null_mut();
        // SAFETY: one field, one out pointer, the terminator.
        unsafe {
            raw::RedisModule_HashGet.expect("RedisModule_HashGet")(
                self.inner,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.inner,
                &mut value as *mut _,
                ptr::null::<c_char>(),
            )
        };
        Owned::adopt(self.ctx, value).map(|value| value.bytes().to_vec())
    }

    /// `SET key value`: whatever was there (any type, any TTL) replaced.
    pub(crate) fn set(&self, value: &[u8]) {
        let value = Owned::new(self.ctx, value);
        raw::string_set(self.inner, value.inner);
    }

    /// Writes a counter's new value in place: the key's TTL stays, as
    /// with `INCRBY` (created when there is no key).
    pub(crate) fn set_counter(&self, value: i64) {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(value).as_bytes();
        let mut len = 0;
        if raw::string_truncate(self.inner, digits.len()) != raw::Status::Ok {
            return;
        }
        let at = raw::string_dma(self.inner, &mut len, raw::KeyMode::WRITE);
        if !at.is_null() && len == digits.len() {
            // SAFETY: the string's own buffer, `len` bytes, just sized.
            unsafe { std::slice::from_raw_parts_mut(at.cast::<u8>(), len) }.copy_from_slice(digits);
        }
    }

    pub(crate) fn delete(&self) {
        // SAFETY: a key open for writing.
        unsafe { raw::RedisModule_DeleteKey.expect("RedisModule_DeleteKey")(self.inner) };
    }
}

/// What a command replicates of its effect (to replicas and the AOF; all
/// of one call in one `MULTI`): the plain commands, so that neither needs
/// the module.
pub(crate) enum Effect<'a> {
    /// `HSET key field value ...` of decimal fields.
    Numbers(&'a RedisString, &'a [(&'a CStr, i128)]),
    Set(&'a RedisString, &'a [u8]),
    Del(&'a RedisString),
    IncrBy(&'a RedisString, i64),
    HSet(&'a RedisString, &'a [u8], &'a [u8]),
    HDel(&'a RedisString, &'a [u8]),
}

/// Replicates `effect` and tells keyspace subscribers, as the command it
/// stands for would.
pub(crate) fn propagate(ctx: &Context, effect: Effect<'_>) {
    // Room for the decimals of up to three fields.
    let mut digits = [itoa::Buffer::new(); 3];
    let (command, class, event, key, args): (_, _, _, _, Vec<&[u8]>) = match effect {
        Effect::Numbers(key, fields) => {
            let args = fields
                .iter()
                .zip(&mut digits)
                .flat_map(|((name, value), buffer)| {
                    [name.to_bytes(), buffer.format(*value).as_bytes()]
                })
                .collect();
            (c"HSET", raw::NotifyEvent::HASH, c"hset", key, args)
        }
        Effect::Set(key, value) => (c"SET", raw::NotifyEvent::STRING, c"set", key, vec![value]),
        Effect::Del(key) => (c"DEL", raw::NotifyEvent::GENERIC, c"del", key, vec![]),
        Effect::IncrBy(key, by) => {
            let by = digits[0].format(by).as_bytes();
            (
                c"INCRBY",
                raw::NotifyEvent::STRING,
                c"incrby",
                key,
                vec![by],
            )
        }
        Effect::HSet(key, field, value) => (
            c"HSET",
            raw::NotifyEvent::HASH,
            c"hset",
            key,
            vec![field, value],
        ),
        Effect::HDel(key, field) => (c"HDEL", raw::NotifyEvent::HASH, c"hdel", key, vec![field]),
    };
    replicate(ctx, command, key, &args);
    // SAFETY: a C event name and a live key name.
    unsafe {
        raw::RedisModule_NotifyKeyspaceEvent.expect("RedisModule_NotifyKeyspaceEvent")(
            ctx.get_raw(),
            class.bits(),
            event.as_ptr(),
            key.inner,
        )
    };
}

/// `RM_Replicate(command key args...)`, at most six arguments.
fn replicate(ctx: &Context, command: &CStr, key: &RedisString, args: &[&[u8]]) {
    const FORMATS: [&CStr; 7] = [
        c"s", c"sb", c"sbb", c"sbbb", c"sbbbb", c"sbbbbb", c"sbbbbbb",
    ];
    let format = FORMATS[args.len()];
    let arg = |at: usize| args.get(at).copied().unwrap_or_default();
    let (a, b, c, d, e, f) = (arg(0), arg(1), arg(2), arg(3), arg(4), arg(5));
    // SAFETY: the API's table is filled in when the module loads; the
    // format names the arguments that are read (`s` a live string, each
    // `b` a pointer and its length), the ones after it are not.
    unsafe {
        raw::RedisModule_Replicate.expect("RedisModule_Replicate")(
            ctx.get_raw(),
            command.as_ptr(),
            format.as_ptr(),
            key.inner,
            a.as_ptr(),
            a.len(),
            b.as_ptr(),
            b.len(),
            c.as_ptr(),
            c.len(),
            d.as_ptr(),
            d.len(),
            e.as_ptr(),
            e.len(),
            f.as_ptr(),
            f.len(),
        )
    };
}
