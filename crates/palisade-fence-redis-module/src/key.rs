//! The key API calls the fence makes, each a direct read or write of one
//! key. `RM_Call` would cost a temporary client, argument objects and a
//! reply parsed back per command (most of a fenced write's time in Redis
//! when the module used it); the key API reads and writes in place.
//!
//! Every `unsafe` block here calls the module API on the command's own
//! context, on the thread Redis runs the command on, with pointers Redis
//! gave or that this module created and frees.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int};
use std::ptr;

use redis_module::{Context, KeyType, RedisString, raw};

/// A key opened once per request for reading and writing; closed when
/// dropped. The module opts out of Redis's implicit signal on closing a
/// key opened for writing (`NO_IMPLICIT_SIGNAL_MODIFIED`, set on load):
/// a key this module wrote signals `WATCH`ers and client-side caches when
/// closed, as a command's write does, and a key it only read does not.
pub(crate) struct Key {
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    inner: *mut raw::RedisModuleKey,
    written: Cell<bool>,
}

impl Drop for Key {
    fn drop(&mut self) {
        if self.written.get() {
            // SAFETY: the command's context and a live argument.
            unsafe {
                raw::RedisModule_SignalModifiedKey.expect("RedisModule_SignalModifiedKey")(
                    self.ctx, self.name,
                )
            };
        }
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
    /// Marks the key written (signalled when closed) and tells keyspace
    /// subscribers, as the command `event` names would.
    fn wrote(&self, class: raw::NotifyEvent, event: &CStr) {
        self.written.set(true);
        // SAFETY: a C event name and a live key name.
        unsafe {
            raw::RedisModule_NotifyKeyspaceEvent.expect("RedisModule_NotifyKeyspaceEvent")(
                self.ctx,
                class.bits(),
                event.as_ptr(),
                self.name,
            )
        };
    }

    pub(crate) fn open(ctx: &Context, name: &RedisString) -> Key {
        Key {
            ctx: ctx.get_raw(),
            name: name.inner,
            inner: raw::open_key(
                ctx.get_raw(),
                name.inner,
                raw::KeyMode::READ | raw::KeyMode::WRITE,
            ),
            written: Cell::new(false),
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

    /// A marks record of the first layout's fields `x`, `s` and `n` (one
    /// `HGET` of three fields), as `f` reads them (`None`: the field is
    /// not there).
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
        self.wrote(raw::NotifyEvent::HASH, c"hset");
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
        if deleted == 1 {
            self.wrote(raw::NotifyEvent::HASH, c"hdel");
        }
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
        self.replace(value);
        self.wrote(raw::NotifyEvent::STRING, c"set");
    }

    fn replace(&self, value: &[u8]) {
        let value = Owned::new(self.ctx, value);
        raw::string_set(self.inner, value.inner);
    }

    /// Writes a string key's new value in place, as `INCRBY` writes a
    /// counter: the key's TTL stays, no object is made (a key of another
    /// kind is replaced, a missing one created). `event` names the write
    /// for keyspace subscribers.
    pub(crate) fn overwrite(&self, value: &[u8], event: &CStr) {
        if !self.overwrite_in_place(value) {
            self.replace(value);
        }
        self.wrote(raw::NotifyEvent::STRING, event);
    }

    /// Rewrites a string key's (or no key's) bytes; `false` when it could
    /// not (a key of another kind).
    fn overwrite_in_place(&self, value: &[u8]) -> bool {
        if !matches!(self.kind(), KeyType::String | KeyType::Empty)
            || raw::string_truncate(self.inner, value.len()) != raw::Status::Ok
        {
            return false;
        }
        let mut len = 0;
        let at = raw::string_dma(self.inner, &mut len, raw::KeyMode::WRITE);
        if at.is_null() || len != value.len() {
            return false;
        }
        // SAFETY: the string's own buffer, `len` bytes, just sized.
        unsafe { std::slice::from_raw_parts_mut(at.cast::<u8>(), len) }.copy_from_slice(value);
        true
    }

    pub(crate) fn delete(&self) {
        // SAFETY: a key open for writing.
        unsafe { raw::RedisModule_DeleteKey.expect("RedisModule_DeleteKey")(self.inner) };
        self.wrote(raw::NotifyEvent::GENERIC, c"del");
    }
}
