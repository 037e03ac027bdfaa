//! The OpenAPI document: the committed copy is the generated one, the
//! server serves it, and every documented operation answers as the
//! document says (a listed status, a body that matches the listed schema).

use std::path::PathBuf;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use palisade_server::{TokenTable, openapi_document};
use palisade_store::StoreConfig;
use serde_json::{Value, json};

use crate::common;
use common::{Answer, server_with};

/// Setting it rewrites the committed openapi.json from the code.
const REWRITE_VARIABLE: &str = "PALISADE_WRITE_OPENAPI";

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("openapi.json")
}

#[test]
fn committed_document_is_the_generated_one() {
    let generated = openapi_document();
    if std::env::var_os(REWRITE_VARIABLE).is_some() {
        std::fs::write(committed_path(), generated).unwrap();
    }
    let committed = std::fs::read_to_string(committed_path()).unwrap_or_default();
    assert!(
        committed == generated,
        "crates/palisade-server/openapi.json differs from the document the code generates; \
         rewrite it with `{REWRITE_VARIABLE}=1 cargo test -p palisade-server --test it openapi` \
         and review the diff"
    );
}

#[tokio::test]
async fn the_server_serves_the_document() {
    let server = server_with(StoreConfig::default(), |state| state);
    let answer = server
        .send(Method::GET, "/openapi.json", &[], Body::empty())
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert_eq!(&answer.body[..], openapi_document().as_bytes());
    assert_eq!(&answer.body[..], palisade_server::OPENAPI_JSON.as_bytes());
    let document: Value = answer.json();
    assert_eq!(document["openapi"], "3.1.0");
}

/// One request the conformance test sends: which documented operation it
/// exercises, and the status the server must answer.
struct Case {
    method: Method,
    template: &'static str,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: String,
    expected: StatusCode,
}

fn case(method: Method, template: &'static str, path: &str, expected: u16) -> Case {
    Case {
        method,
        template,
        path: path.to_owned(),
        headers: vec![("authorization", format!("Bearer {TOKEN}"))],
        body: String::new(),
        expected: StatusCode::from_u16(expected).unwrap(),
    }
}

impl Case {
    fn sequencer(mut self, lock: &str, mode: &str, generation: u64) -> Self {
        self.headers.push((
            "palisade-sequencer",
            format!("v1;lock={lock};mode={mode};gen={generation}"),
        ));
        self
    }

    fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.retain(|(n, _)| *n != name);
        self.headers.push((name, value.to_owned()));
        self
    }

    fn body(mut self, body: impl Into<String>) -> Self {
        self.body = body.into();
        self
    }
}

const TOKEN: &str = "Zs8AkP2v1nQxWm4rT7yBk3Lp";
const KEYS: &str = "/v1/locks/{lock}/keys/{key}";
const CAS: &str = "/v1/locks/{lock}/cas/{key}";
const BATCH: &str = "/v1/locks/{lock}/batch";
const MARKS: &str = "/v1/locks/{lock}/marks";

/// In order: later cases rely on earlier writes (marks at 5 on `orders/a`,
/// key `k` present).
fn cases() -> Vec<Case> {
    let key = "/v1/locks/orders%2Fa/keys/k";
    vec![
        case(Method::GET, "/healthz", "/healthz", 200),
        case(Method::GET, "/metrics", "/metrics", 200),
        case(Method::GET, "/openapi.json", "/openapi.json", 200),
        case(Method::GET, "/ui", "/ui", 200),
        // A 200 here is an endless stream: tests/it/events.rs reads those.
        case(Method::GET, "/v1/events", "/v1/events", 401).header("authorization", ""),
        case(Method::PUT, KEYS, key, 200)
            .sequencer("orders/a", "exclusive", 5)
            .body("v"),
        case(Method::PUT, KEYS, key, 409)
            .sequencer("orders/a", "exclusive", 4)
            .body("v"),
        case(Method::PUT, KEYS, key, 400).body("v"),
        case(Method::PUT, KEYS, key, 401)
            .header("authorization", "Bearer wrong-token-wrong-token")
            .sequencer("orders/a", "exclusive", 6),
        case(
            Method::PUT,
            "/v1/locks/{lock}/keys/{key}",
            "/v1/locks/other/keys/k",
            403,
        )
        .sequencer("other", "exclusive", 6),
        case(Method::PUT, KEYS, key, 403).sequencer("orders/a", "shared", 6),
        case(Method::PUT, KEYS, key, 422).sequencer("orders/b", "exclusive", 6),
        case(Method::PUT, KEYS, key, 413)
            .sequencer("orders/a", "exclusive", 5)
            .body("x".repeat(2048)),
        case(Method::PUT, KEYS, key, 501)
            .sequencer("orders/a", "exclusive", 5)
            .header("transfer-encoding", "gzip, chunked")
            .body("v"),
        case(Method::GET, KEYS, key, 200),
        case(Method::GET, KEYS, "/v1/locks/orders%2Fa/keys/absent", 404),
        case(Method::GET, KEYS, key, 409).sequencer("orders/a", "exclusive", 1),
        case(Method::GET, KEYS, key, 400).header("palisade-sequencer", "garbage"),
        case(Method::POST, CAS, "/v1/locks/orders%2Fa/cas/k", 200)
            .sequencer("orders/a", "exclusive", 5)
            .body(json!({"expected": "v", "new": "w"}).to_string()),
        case(Method::POST, CAS, "/v1/locks/orders%2Fa/cas/k", 412)
            .sequencer("orders/a", "exclusive", 5)
            .body(json!({"expected": "v", "new": "w"}).to_string()),
        case(Method::POST, CAS, "/v1/locks/orders%2Fa/cas/k", 400)
            .sequencer("orders/a", "exclusive", 5)
            .body("{not json"),
        case(Method::POST, BATCH, "/v1/locks/orders%2Fa/batch", 200)
            .sequencer("orders/a", "exclusive", 5)
            .body(
                json!({"ops": [
                    {"op": "put", "key": "b", "value": {"base64": "AAE="}},
                    {"op": "cas", "key": "b", "expected": {"base64": "AAE="}, "new": "c"},
                    {"op": "delete", "key": "b"},
                ]})
                .to_string(),
            ),
        case(Method::POST, BATCH, "/v1/locks/orders%2Fa/batch", 400)
            .sequencer("orders/a", "exclusive", 5)
            .body(json!({"ops": [{"op": "rename", "key": "b"}]}).to_string()),
        case(Method::DELETE, KEYS, key, 409).sequencer("orders/a", "exclusive", 3),
        case(Method::DELETE, KEYS, key, 200).sequencer("orders/a", "exclusive", 5),
        case(Method::GET, MARKS, "/v1/locks/orders%2Fa/marks", 200),
        case(Method::GET, MARKS, "/v1/locks/orders%2Fa/marks", 401).header("authorization", ""),
        case(Method::GET, MARKS, "/v1/locks/%FF/marks", 400),
    ]
}

#[tokio::test]
async fn every_documented_operation_answers_as_documented() {
    let document: Value = serde_json::from_str(openapi_document()).unwrap();
    let tokens: TokenTable = format!("{TOKEN} orders/").parse().unwrap();
    let server = server_with(
        StoreConfig {
            limits: palisade_store::Limits {
                max_value_bytes: 1024,
                ..palisade_store::Limits::default()
            },
            ..StoreConfig::default()
        },
        |state| state.with_tokens(tokens),
    );
    let cases = cases();

    let operations = documented_operations(&document);
    for (template, method) in &operations {
        assert!(
            cases
                .iter()
                .any(|c| c.template == template && c.method.as_str().eq_ignore_ascii_case(method)),
            "no case sends {method} {template}"
        );
    }

    for case in cases {
        let label = format!(
            "{} {} (expecting {})",
            case.method, case.path, case.expected
        );
        let operation = &document["paths"][case.template][case.method.as_str().to_lowercase()];
        assert!(operation.is_object(), "{label}: not in the document");
        let headers: Vec<(&str, &str)> = case
            .headers
            .iter()
            .filter(|(_, value)| !value.is_empty())
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        let answer = server
            .send(case.method.clone(), &case.path, &headers, case.body.clone())
            .await;
        assert_eq!(
            answer.status,
            case.expected,
            "{label}: {}",
            String::from_utf8_lossy(&answer.body)
        );
        let documented = &operation["responses"][answer.status.as_str()];
        assert!(
            documented.is_object(),
            "{label}: status {} is not documented",
            answer.status
        );
        check_body(&document, documented, &answer, &label);
        if answer.status.as_u16() >= 400 {
            let code = answer.code();
            assert!(
                documented["content"]["application/json"]["examples"]
                    .get(&code)
                    .is_some(),
                "{label}: code `{code}` is not documented for this status"
            );
        }
    }
}

/// Every `(path, method)` the document lists.
fn documented_operations(document: &Value) -> Vec<(String, String)> {
    let mut operations = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in ["get", "put", "post", "delete", "patch", "head"] {
            if item.get(method).is_some() {
                operations.push((path.clone(), method.to_owned()));
            }
        }
    }
    assert!(operations.len() >= 9, "{operations:?}");
    operations
}

/// The answer's content type is one the response documents, and a JSON
/// body matches its schema.
fn check_body(document: &Value, documented: &Value, answer: &Answer, label: &str) {
    let content_type = answer.header("content-type").unwrap_or_default();
    let content = documented["content"].as_object().unwrap();
    let (media_type, media) = content
        .iter()
        .find(|(media_type, _)| content_type.starts_with(media_type.as_str()))
        .unwrap_or_else(|| panic!("{label}: content type {content_type} not documented"));
    if media_type == "application/json" {
        let body = answer.json();
        if let Err(error) = validate(document, &media["schema"], &body) {
            panic!("{label}: body {body} does not match the documented schema: {error}");
        }
    }
}

/// Validates `value` against the subset of JSON Schema the document uses:
/// `$ref`, `allOf`, `oneOf`, `type` (one or several), `enum`, `required`,
/// `properties`, `additionalProperties` (`false` or a schema), `items`,
/// `minimum`.
fn validate(document: &Value, schema: &Value, value: &Value) -> Result<(), String> {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.trim_start_matches("#/components/schemas/");
        let target = &document["components"]["schemas"][name];
        if target.is_null() {
            return Err(format!("no schema `{name}`"));
        }
        return validate(document, target, value);
    }
    for part in schema["allOf"].as_array().into_iter().flatten() {
        validate(document, part, value)?;
    }
    if let Some(choices) = schema["oneOf"].as_array() {
        let matching = choices
            .iter()
            .filter(|choice| validate(document, choice, value).is_ok())
            .count();
        if matching != 1 {
            return Err(format!("{value} matches {matching} of oneOf {schema}"));
        }
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.iter().any(|kind| has_type(value, kind)) {
        return Err(format!("{value} is not of type {types:?}"));
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        return Err(format!("{value} is not one of {allowed:?}"));
    }
    if let (Some(minimum), Some(number)) = (schema["minimum"].as_f64(), value.as_f64())
        && number < minimum
    {
        return Err(format!("{value} is below {minimum}"));
    }
    if let Some(object) = value.as_object() {
        for required in schema["required"].as_array().into_iter().flatten() {
            let name = required.as_str().unwrap();
            if !object.contains_key(name) {
                return Err(format!("`{name}` is missing from {value}"));
            }
        }
        let properties = schema["properties"].as_object();
        for (name, field) in object {
            match properties.and_then(|p| p.get(name)) {
                Some(property) => {
                    validate(document, property, field).map_err(|e| format!("`{name}`: {e}"))?
                }
                None if schema["additionalProperties"] == Value::Bool(false) => {
                    return Err(format!("`{name}` is not a documented field"));
                }
                None if schema["additionalProperties"].is_object() => {
                    validate(document, &schema["additionalProperties"], field)
                        .map_err(|e| format!("`{name}`: {e}"))?
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for item in array {
            validate(document, items, item)?;
        }
    }
    Ok(())
}

fn has_type(value: &Value, kind: &str) -> bool {
    match kind {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => false,
    }
}

#[test]
fn the_validator_refuses_what_the_schema_forbids() {
    let document: Value = serde_json::from_str(openapi_document()).unwrap();
    let error = json!({"$ref": "#/components/schemas/ErrorBody"});
    assert!(
        validate(
            &document,
            &error,
            &json!({"code": "bad_key", "message": "m", "x": 1})
        )
        .is_ok(),
        "fields may be added"
    );
    assert!(validate(&document, &error, &json!({"code": "bad_key"})).is_err());
    assert!(
        validate(&document, &error, &json!({"code": "stale", "message": "m"})).is_err(),
        "a stale answer has its fields"
    );
    assert!(
        validate(
            &document,
            &error,
            &json!({"code": "no_such_code", "message": "m"})
        )
        .is_err()
    );
    let stale = json!({
        "code": "stale", "message": "m", "lock": "a", "mode": "exclusive", "presented": 3,
        "required": 4, "marks": {"exclusive": 4, "shared": 0}, "regression": false,
        "recovery": "palisade raise-floor a",
    });
    assert!(validate(&document, &error, &stale).is_ok());
    let mut bad = stale.clone();
    bad["mode"] = json!("Exclusive");
    assert!(
        validate(&document, &error, &bad).is_err(),
        "modes are an enum"
    );
    let write = json!({"$ref": "#/components/schemas/WriteAnswer"});
    let marks = json!({"exclusive": 1, "shared": 0});
    let good = json!({"lock": "a", "results": ["created"], "marks": marks, "commit_seq": 3, "replayed": false});
    assert!(validate(&document, &write, &good).is_ok());
    let mut bad = good.clone();
    bad["marks"]["exclusive"] = json!("1");
    assert!(validate(&document, &write, &bad).is_err());
    let mut bad = good.clone();
    bad["results"] = json!(["put"]);
    assert!(
        validate(&document, &write, &bad).is_err(),
        "results are an enum"
    );
}

/// The one value of the `code` property of each alternative of the
/// document's `ErrorKind`.
fn documented_codes(document: &Value) -> Vec<String> {
    fn code_in(schema: &Value) -> Option<String> {
        if let Some(code) = schema["properties"]["code"]["enum"][0].as_str() {
            return Some(code.to_owned());
        }
        schema["allOf"].as_array()?.iter().find_map(code_in)
    }
    document["components"]["schemas"]["ErrorKind"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|alternative| code_in(alternative).expect("every alternative has a code"))
        .collect()
}

/// Every example of an error answer in the document: (path, method,
/// status, example name, body); the `ErrorBody` schema's own examples
/// have no path, method, status or name.
fn documented_error_examples(document: &Value) -> Vec<(String, String, u16, String, Value)> {
    let mut examples: Vec<_> = document["components"]["schemas"]["ErrorBody"]["examples"]
        .as_array()
        .expect("ErrorBody has examples")
        .iter()
        .map(|body| {
            let code = body["code"].as_str().unwrap_or_default().to_owned();
            (String::new(), String::new(), 0, code, body.clone())
        })
        .collect();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            for (status, response) in operation["responses"].as_object().unwrap() {
                let status: u16 = status.parse().unwrap();
                if status < 400 {
                    continue;
                }
                let named = response["content"]["application/json"]["examples"]
                    .as_object()
                    .unwrap_or_else(|| panic!("{method} {path} {status} has no examples"));
                for (name, example) in named {
                    examples.push((
                        path.clone(),
                        method.clone(),
                        status,
                        name.clone(),
                        example["value"].clone(),
                    ));
                }
            }
        }
    }
    examples
}

/// Every error code the server can answer (the `reason`s of its refusal
/// counter, created for every code at start-up) is one of the document's
/// codes and has an example, and every example body decodes with the wire
/// decoder into its own code, under its own status.
#[tokio::test]
async fn every_code_the_server_answers_is_documented_and_every_example_decodes() {
    let document: Value = serde_json::from_str(openapi_document()).unwrap();
    let server = server_with(StoreConfig::default(), |state| state);
    let metrics = server.metrics().await;
    let answered: Vec<&str> = metrics
        .lines()
        .filter_map(|line| line.strip_prefix("palisade_requests_rejected_total{reason=\""))
        .filter_map(|rest| rest.split('"').next())
        .filter(|reason| *reason != "other")
        .collect();
    assert!(answered.len() >= 30, "{answered:?}");
    let documented = documented_codes(&document);
    let examples = documented_error_examples(&document);
    for code in &answered {
        assert!(
            documented.iter().any(|documented| documented == code),
            "`{code}` is answered but not in the document's codes {documented:?}"
        );
        assert!(
            examples.iter().any(|(.., name, _)| name == code),
            "`{code}` has no example in the document"
        );
    }
    assert_eq!(
        documented.len(),
        answered.len(),
        "{documented:?} / {answered:?}"
    );
    for (path, method, status, name, body) in examples {
        let label = format!("{method} {path} {status} `{name}`");
        let decoded = palisade_wire::ErrorBody::decode(body.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(decoded.code(), name, "{label}");
        if status != 0 {
            assert_eq!(decoded.status(), status, "{label}");
        }
        assert!(decoded.kind.to_refused().is_ok(), "{label}");
        validate(
            &document,
            &json!({"$ref": "#/components/schemas/ErrorBody"}),
            &body,
        )
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    }
}
