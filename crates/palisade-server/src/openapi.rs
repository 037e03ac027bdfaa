//! The OpenAPI 3.1 document of the HTTP API, generated with `utoipa` from
//! the handlers' `#[utoipa::path]` attributes and the wire types the
//! handlers write (`palisade-wire`), so it cannot drift from them. Committed
//! as the crate's `openapi.json`, which `GET /openapi.json` serves (a test
//! keeps the two equal).
//!
//! Error answers are listed per operation by code: each status an
//! operation can answer, with one example body per code (the wire crate's
//! [`ErrorBody::examples`], serialised), all under the one `ErrorBody`
//! schema, whose `code` is one of [`ErrorKind`]'s variants.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::LazyLock;

use palisade_wire::{
    BatchOp, BatchRequest, CasRequest, Decision, ErrorBody, ErrorKind, HealthAnswer, JsonBytes,
    MarksAnswer, MarksBody, Snapshot, WriteAnswer,
};
use utoipa::openapi::example::ExampleBuilder;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr};
use utoipa::{IntoParams, IntoResponses, Modify, OpenApi, PartialSchema, ToSchema};

// The parameters the routes share. Only their names, types and docs are
// read (by utoipa), never their values.

/// `{lock}` in a route's path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(crate) struct LockPath {
    /// The lock's name, percent-encoded.
    lock: String,
}

/// `{lock}` and `{key}` in a key's routes.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(crate) struct KeyPath {
    /// The lock's name, percent-encoded.
    lock: String,
    /// The key, percent-encoded (any bytes).
    key: String,
}

/// The headers of every write.
#[derive(IntoParams)]
#[into_params(parameter_in = Header, rename_all = "kebab-case")]
#[allow(dead_code)]
pub(crate) struct WriteHeaders {
    /// The caller's exclusive sequencer (`v1;lock=NAME;mode=exclusive;gen=N`, optionally signed).
    palisade_sequencer: String,
    /// Makes a retry of this write answer as the first attempt did.
    idempotency_key: Option<String>,
}

/// Raw bytes: a key's value, as sent and as answered.
#[derive(Debug)]
pub(crate) struct RawBytes;

impl PartialSchema for RawBytes {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .content_media_type("application/octet-stream")
            .into()
    }
}

impl ToSchema for RawBytes {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Bytes")
    }
}

/// What any route may answer: a body framed with a transfer coding the
/// server does not implement, a connection shed just as the request came.
const COMMON: &[&str] = &["unsupported_transfer_coding", "connection_shed"];

/// What every `/v1/locks/...` request may meet before its own checks.
const LOCK_ROUTE: &[&str] = &[
    "overloaded",
    "unauthenticated",
    "bad_lock_name",
    "forbidden",
    "storage_unavailable",
    "deadline_exceeded",
];

/// The checks of a sequencer a request carries.
const SEQUENCER: &[&str] = &[
    "malformed_sequencer",
    "lock_mismatch",
    "unsigned",
    "unknown_key",
    "bad_signature",
    "wrong_issuer",
    "raise_too_large",
    "live_check_unavailable",
    "stale",
    "not_held",
];

/// A read of a key, beyond the lock route's and the sequencer's.
const READ: &[&str] = &["bad_key", "too_large", "not_found"];

/// A write, beyond the lock route's and the sequencer's.
const WRITE: &[&str] = &[
    "bad_key",
    "too_large",
    "missing_sequencer",
    "shared_on_write",
    "bad_request",
    "body_timeout",
    "cas_mismatch",
    "idempotency_key_reused",
];

/// The error answers for `codes`, by status: each with its codes in the
/// description and one example body per code.
fn error_responses(codes: &[&[&str]]) -> BTreeMap<String, RefOr<Response>> {
    let examples = ErrorBody::examples();
    let mut by_status: BTreeMap<u16, Vec<&ErrorBody>> = BTreeMap::new();
    for code in codes.iter().copied().flatten() {
        let example = examples
            .iter()
            .find(|example| example.code() == *code)
            .unwrap_or_else(|| panic!("`{code}` is not an error code of palisade-wire"));
        by_status.entry(example.status()).or_default().push(example);
    }
    by_status
        .into_iter()
        .map(|(status, examples)| {
            let names: Vec<String> = examples
                .iter()
                .map(|example| format!("`{}`", example.code()))
                .collect();
            let content = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(ErrorBody::name())))
                .examples_from_iter(examples.iter().map(|example| {
                    let value = serde_json::to_value(example).expect("an error body serialises");
                    (
                        example.code(),
                        ExampleBuilder::new().value(Some(value)).build(),
                    )
                }))
                .build();
            let response = ResponseBuilder::new()
                .description(names.join(", "))
                .content("application/json", content)
                .build();
            (status.to_string(), response.into())
        })
        .collect()
}

/// Error answers of one group of operations.
macro_rules! error_group {
    ($(#[$doc:meta])* $name:ident = $($codes:expr),+) => {
        $(#[$doc])*
        pub(crate) struct $name;

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                error_responses(&[$($codes),+])
            }
        }
    };
}

error_group!(
    /// `GET` of a key.
    ReadErrors = COMMON, LOCK_ROUTE, SEQUENCER, READ
);
error_group!(
    /// Every write.
    WriteErrors = COMMON, LOCK_ROUTE, SEQUENCER, WRITE
);
error_group!(
    /// `GET .../marks`.
    MarksErrors = COMMON, LOCK_ROUTE
);
error_group!(
    /// `GET /healthz`.
    HealthErrors = COMMON, &["storage_unavailable", "deadline_exceeded"]
);
error_group!(
    /// `GET /v1/events`.
    EventsErrors = COMMON, &["unauthenticated", "overloaded"]
);
error_group!(
    /// The routes that touch no store and need no token.
    CommonErrors = COMMON
);

/// One example of every error code on the `ErrorBody` schema itself,
/// including the codes answered outside any operation (`no_route`,
/// `method_not_allowed`, `internal`).
struct ErrorExamples;

impl Modify for ErrorExamples {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let schemas = &mut openapi
            .components
            .get_or_insert_with(Default::default)
            .schemas;
        let Some(RefOr::T(Schema::AllOf(error_body))) = schemas.get_mut(ErrorBody::name().as_ref())
        else {
            panic!("ErrorBody's schema is an allOf of its kind and its message");
        };
        error_body.examples = ErrorBody::examples()
            .iter()
            .map(|example| serde_json::to_value(example).expect("an error body serialises"))
            .collect();
    }
}

/// The optional bearer-token scheme.
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Palisade resource server",
        description = "A fenced key-value store: every request names a lock and carries its sequencer; a sequencer older than the newest honoured for its lock is refused (409 `stale`). docs/http-api.md is the prose contract.",
        license(name = "MIT OR Apache-2.0", identifier = "MIT OR Apache-2.0"),
    ),
    paths(
        crate::routes::get_key,
        crate::routes::put_key,
        crate::routes::delete_key,
        crate::routes::cas_key,
        crate::routes::batch,
        crate::routes::marks,
        crate::routes::health,
        crate::routes::metrics,
        crate::routes::openapi_json,
        crate::events::events,
        crate::events::ui,
    ),
    components(schemas(
        ErrorBody,
        ErrorKind,
        RawBytes,
        JsonBytes,
        MarksBody,
        MarksAnswer,
        HealthAnswer,
        WriteAnswer,
        CasRequest,
        BatchRequest,
        BatchOp,
        Decision,
        Snapshot,
    )),
    modifiers(&BearerToken, &ErrorExamples),
)]
struct ApiDoc;

/// The document as pretty JSON with a final newline, built once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    let mut document = ApiDoc::openapi();
    // utoipa writes the crate version; the API's version is the path's
    // `v1`, and a document that changes with every release would defeat
    // the committed copy's drift test.
    document.info.version = "1".to_owned();
    let mut text = document
        .to_pretty_json()
        .expect("the OpenAPI document serialises");
    text.push('\n');
    text
});

/// The OpenAPI 3.1 document of the HTTP API (what `GET /openapi.json`
/// serves), as pretty JSON.
pub fn openapi_document() -> &'static str {
    &DOCUMENT
}
