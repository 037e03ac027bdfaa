//! The OpenAPI 3.1 document of the HTTP API, generated with `utoipa` from
//! the handlers' `#[utoipa::path]` attributes and the body types, so it
//! cannot drift from them. Served at `GET /openapi.json` and committed as
//! docs/openapi.json (a test keeps the two equal).

use std::borrow::Cow;
use std::sync::LazyLock;

use serde::Serialize;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{AdditionalProperties, Object, ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{IntoResponses, Modify, OpenApi, PartialSchema, ToSchema};

use crate::dto::{BatchBody, CasBody, WriteResponse};
use crate::metrics::CODES;

/// Codes answered outside the store's and the checks' refusals, which
/// [`CODES`] (the metric labels) folds into `other`.
const EXTRA_CODES: [&str; 2] = ["connection_shed", "refused"];

/// Every error answer: `{"code": ..., "message": ..., ...extra}`; the extra
/// fields depend on the code (docs/http-api.md lists them).
#[derive(Debug, Serialize)]
pub(crate) struct ErrorBody;

impl PartialSchema for ErrorBody {
    fn schema() -> RefOr<Schema> {
        let codes = CODES
            .iter()
            .chain(EXTRA_CODES.iter())
            .filter(|code| **code != "other");
        ObjectBuilder::new()
            .description(Some(
                "An error: a stable `code`, a message for people, and fields that depend on the code.",
            ))
            .property(
                "code",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(codes.copied())),
            )
            .required("code")
            .property("message", Object::with_type(Type::String))
            .required("message")
            .additional_properties(Some(AdditionalProperties::FreeForm(true)))
            .into()
    }
}

impl ToSchema for ErrorBody {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Error")
    }
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

/// A lock's two marks: the newest exclusive and shared generations
/// honoured.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Marks)]
#[allow(dead_code)] // Documents the JSON that `marks_json` writes.
pub(crate) struct MarksBody {
    exclusive: u64,
    shared: u64,
}

/// `GET /v1/locks/{lock}/marks`.
#[derive(Debug, Serialize, ToSchema)]
#[allow(dead_code)] // Documents the JSON the handler writes.
pub(crate) struct MarksResponse {
    lock: String,
    marks: MarksBody,
}

/// `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
#[allow(dead_code)] // Documents the JSON the handler writes.
pub(crate) struct HealthResponse {
    /// Always `ok` on a 200.
    status: String,
    /// The store's durability mode: `flushed` or `buffered`.
    durability: String,
}

/// The refusals a read (`GET` of a key, the marks) can meet.
#[derive(IntoResponses)]
#[allow(dead_code)] // Documents statuses; never built.
pub(crate) enum ReadErrors {
    /// A malformed lock name, key or sequencer.
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// No valid bearer token, or an unsigned / unverifiable sequencer.
    #[response(status = 401)]
    Unauthenticated(ErrorBody),
    /// The token does not cover this lock, or the issuer is not trusted.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// No such key.
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// The sequencer is stale, no longer held, or raises the mark too far.
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// The key is over the size limit.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// The sequencer is for another lock.
    #[response(status = 422)]
    Unprocessable(ErrorBody),
    /// Overloaded, storage unavailable, or the live check unreachable.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// The refusals a write can meet.
#[derive(IntoResponses)]
#[allow(dead_code)] // Documents statuses; never built.
pub(crate) enum WriteErrors {
    /// A malformed lock name, key, sequencer, idempotency key or body; or
    /// no sequencer.
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// No valid bearer token, or an unsigned / unverifiable sequencer.
    #[response(status = 401)]
    Unauthenticated(ErrorBody),
    /// The token does not cover this lock, the issuer is not trusted, or
    /// the sequencer is shared.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// The body did not arrive in time.
    #[response(status = 408)]
    BodyTimeout(ErrorBody),
    /// The sequencer is stale, no longer held, or raises the mark too far.
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// A compare-and-swap found another value; nothing was written.
    #[response(status = 412)]
    CasMismatch(ErrorBody),
    /// The key, value, body or batch is over a limit.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// The sequencer is for another lock, or the idempotency key was used
    /// for another request.
    #[response(status = 422)]
    Unprocessable(ErrorBody),
    /// Overloaded, storage unavailable, or the live check unreachable.
    #[response(status = 503)]
    Unavailable(ErrorBody),
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
    components(schemas(ErrorBody, RawBytes, MarksBody, MarksResponse, HealthResponse, WriteResponse, CasBody, BatchBody)),
    modifiers(&BearerToken),
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
