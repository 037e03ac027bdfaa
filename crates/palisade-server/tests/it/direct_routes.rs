//! The lock routes are served without the router on a connection (the
//! server's `LockRoute`): every answer must be the router's, the same
//! status, headers and bytes, but for the date hyper adds on the wire.

use axum::http::Method;
use palisade_server::ServerLimits;
use palisade_store::Op;
use palisade_store::StoreConfig;
use palisade_wire::{BatchRequest, CasRequest};

use crate::common::server_with;
use crate::tcp::{KeepAlive, excl, start};

/// One request of the script: method, path, headers, body.
type Step = (Method, &'static str, Vec<(&'static str, String)>, Vec<u8>);

/// Every lock route, accepted and refused, each refusal one that reads
/// the whole body (so the connection stays open).
fn script() -> Vec<Step> {
    let seq = |generation| vec![("palisade-sequencer", excl("same", generation))];
    vec![
        (Method::PUT, "/v1/locks/same/keys/k", seq(1), b"v1".to_vec()),
        (Method::GET, "/v1/locks/same/keys/k", vec![], vec![]),
        (Method::GET, "/v1/locks/same/keys/k", seq(1), vec![]),
        (
            Method::POST,
            "/v1/locks/same/cas/k",
            seq(2),
            serde_json::to_vec(&CasRequest::new(Some(b"v1"), Some(b"v2"))).unwrap(),
        ),
        (
            Method::POST,
            "/v1/locks/same/batch",
            seq(2),
            serde_json::to_vec(&BatchRequest::new(&[Op::put("a", "1"), Op::delete("b")])).unwrap(),
        ),
        (
            Method::PUT,
            "/v1/locks/same/keys/k",
            seq(1),
            b"stale".to_vec(),
        ),
        (Method::DELETE, "/v1/locks/same/keys/k", seq(2), vec![]),
        (Method::GET, "/v1/locks/same/keys/k", vec![], vec![]),
        (Method::GET, "/v1/locks/same/marks", vec![], vec![]),
        (Method::PUT, "/v1/locks/same/keys/k", vec![], vec![]),
        (Method::GET, "/v1/locks/%ZZ/keys/k", vec![], vec![]),
        (
            Method::GET,
            "/v1/locks/same/keys/k%2Fwith%2Fslashes",
            vec![],
            vec![],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_routes_answer_exactly_as_the_router_does() {
    let running = start(ServerLimits::default()).await;
    let routed = server_with(StoreConfig::default(), |state| state);
    let mut direct = KeepAlive::open(running.addr).await;
    let mut statuses = Vec::new();
    for (method, path, headers, body) in script() {
        let what = format!("{method} {path}");
        let mut head = format!("{method} {path} HTTP/1.1");
        for (name, value) in &headers {
            head.push_str(&format!("\r\n{name}: {value}"));
        }
        let wire = direct.send(&head, &body).await;
        let header_refs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        let router = routed
            .send(method.clone(), path, &header_refs, body.clone())
            .await;

        assert_eq!(wire.status, router.status.as_u16(), "{what}");
        let mut wire_headers: Vec<(String, String)> = wire
            .headers
            .iter()
            .filter(|(name, _)| !name.eq_ignore_ascii_case("date"))
            .map(|(name, value)| (name.to_ascii_lowercase(), value.clone()))
            .collect();
        let mut router_headers: Vec<(String, String)> = router
            .headers
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
            .collect();
        wire_headers.sort();
        router_headers.sort();
        assert_eq!(wire_headers, router_headers, "{what}");
        assert_eq!(wire.body, router.body.to_vec(), "{what}");
        statuses.push(wire.status);
    }
    // The script covers answers of every kind, not one kind many times.
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 409, 200, 404, 200, 400, 400, 404],
        "the script's answers"
    );
    running.shut_down().await;
}
