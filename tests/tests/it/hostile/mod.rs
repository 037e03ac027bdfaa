//! The hostile corpus (`tests/corpus/hostile/`): every file is one request
//! a careless or malicious client could send, with the answer the resource
//! server must give. Each is sent to `palisade_server::app` in-process (and
//! the `over tcp` ones also through a real socket and hyper's HTTP/1.1
//! parser), and for each this test asserts:
//!
//! - the status and the JSON `code` the file names (always a 4xx);
//! - that nothing was written: a full listing of every record the store's
//!   engine holds (sled: every tree; marks, data, idempotency records) is
//!   byte-for-byte the same after the request as before it.
//!
//! The store is seeded first, so that marks are non-zero (a stale case
//! needs them) and a path trick has something to reach for: lock
//! `orders/42` holds `stock` = `7` at generation 10, lock `a` holds
//! `secret` at generation 5. Every failing case is listed at the end, not
//! just the first.
//!
//! The corpus also seeds the fuzz targets: `http_request` reads these very
//! files, and the parser targets' seeds (`fuzz/seeds/sequencer/`) hold
//! every `palisade-sequencer` value of the corpus, which
//! [`the_parser_fuzz_seeds_follow_the_corpus`] keeps true
//! (`PALISADE_WRITE_SEEDS=1` writes the missing ones).

mod request_file;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, Request, Uri, header};
use palisade::server::{AppState, app, run};
use palisade::store::{Store, StoreConfig, StoredRecord};
use palisade::{Sequencer, SigningKey, Verifier};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt as _;

use request_file::RequestFile;

/// Where the corpus lives.
const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/corpus/hostile");

/// The seeds of the `sequencer_parse` and `signature_verify` fuzz targets.
const SEQUENCER_SEEDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/seeds/sequencer");

/// The body limit the corpus is written for (`README.md`): small, so the
/// over-the-limit case stays a small file.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// The most any `{repeat}` in a corpus file may expand to.
const MAX_EXPANDED: usize = 1 << 20;

/// How long one request over TCP may take before the test gives up.
const TCP_LIMIT: Duration = Duration::from_secs(30);

/// A store on sled behind a resource server's state. The test keeps its
/// own handle on the store to list every record the engine holds.
struct Harness {
    store: Store,
    state: AppState,
    _dir: tempfile::TempDir,
}

impl Harness {
    async fn start() -> anyhow::Result<Harness> {
        let dir = tempfile::tempdir()?;
        let store = Store::open(dir.path(), StoreConfig::default())?;
        let state = AppState::new(store.clone()).with_max_body_bytes(MAX_BODY_BYTES);
        let harness = Harness {
            store,
            state,
            _dir: dir,
        };
        harness
            .seed(
                "orders%2F42",
                "stock",
                "v1;lock=orders/42;mode=exclusive;gen=10",
                "7",
            )
            .await?;
        harness
            .seed("a", "secret", "v1;lock=a;mode=exclusive;gen=5", "s3cr3t")
            .await?;
        Ok(harness)
    }

    async fn seed(
        &self,
        lock: &str,
        key: &str,
        sequencer: &str,
        value: &str,
    ) -> anyhow::Result<()> {
        let request = Request::put(format!("/v1/locks/{lock}/keys/{key}"))
            .header("palisade-sequencer", sequencer)
            .body(Body::from(value.to_owned()))?;
        let response = app(self.state.clone()).oneshot(request).await?;
        anyhow::ensure!(
            response.status().is_success(),
            "seeding {lock}/{key}: {}",
            response.status()
        );
        Ok(())
    }

    /// Every record of every sled tree, in order.
    async fn scan(&self) -> anyhow::Result<Vec<StoredRecord>> {
        Ok(self.store.dump().await?)
    }
}

/// What the server answered.
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: Option<String>,
    body: Vec<u8>,
}

impl Answer {
    /// The JSON `code`, if the body is an error object.
    fn code(&self) -> Option<String> {
        let json: Value = serde_json::from_slice(&self.body).ok()?;
        json.get("code")?.as_str().map(str::to_owned)
    }
}

/// `request` as an `http::Request`, with a `content-length` added for a
/// body when the file gives none (as any HTTP/1.1 client would).
fn http_request(request: &RequestFile) -> anyhow::Result<Request<Body>> {
    let method = Method::from_bytes(&request.method)?;
    let uri = Uri::try_from(request.target.as_slice())?;
    let mut builder = Request::builder().method(method).uri(uri);
    for (name, value) in &request.headers {
        builder = builder.header(
            HeaderName::from_bytes(name)?,
            HeaderValue::from_bytes(value)?,
        );
    }
    if !request.body.is_empty() && !has_header(request, "content-length") {
        builder = builder.header(header::CONTENT_LENGTH, request.body.len());
    }
    Ok(builder.body(Body::from(request.body.clone()))?)
}

fn has_header(request: &RequestFile, name: &str) -> bool {
    request
        .headers
        .iter()
        .any(|(header, _)| header.eq_ignore_ascii_case(name.as_bytes()))
}

async fn in_process(state: &AppState, request: &RequestFile) -> anyhow::Result<Answer> {
    let response = app(state.clone()).oneshot(http_request(request)?).await?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let body = axum::body::to_bytes(response.into_body(), usize::MAX).await?;
    Ok(Answer {
        status,
        content_type,
        body: body.to_vec(),
    })
}

/// Sends `request` as raw HTTP/1.1 bytes on a new connection and reads the
/// answer to the end (`connection: close`).
async fn over_tcp(address: std::net::SocketAddr, request: &RequestFile) -> anyhow::Result<Answer> {
    let mut wire = Vec::new();
    wire.extend_from_slice(&request.method);
    wire.push(b' ');
    wire.extend_from_slice(&request.target);
    wire.extend_from_slice(b" HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n");
    for (name, value) in &request.headers {
        wire.extend_from_slice(name);
        wire.extend_from_slice(b": ");
        wire.extend_from_slice(value);
        wire.extend_from_slice(b"\r\n");
    }
    if !has_header(request, "content-length") {
        wire.extend_from_slice(format!("content-length: {}\r\n", request.body.len()).as_bytes());
    }
    wire.extend_from_slice(b"\r\n");
    wire.extend_from_slice(&request.body);

    let exchange = async {
        let mut stream = TcpStream::connect(address).await?;
        stream.write_all(&wire).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        anyhow::Ok(answer)
    };
    let answer = tokio::time::timeout(TCP_LIMIT, exchange).await??;
    let split = answer
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no end of headers in {:?}",
                String::from_utf8_lossy(&answer)
            )
        })?;
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|status| status.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no status line in {head:?}"))?;
    let content_type = lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-type")
            .then(|| value.trim().to_owned())
    });
    // The error bodies are small JSON objects; with chunked encoding the
    // object sits between the chunk sizes.
    let body = &answer[split + 4..];
    let body = match (
        body.iter().position(|&byte| byte == b'{'),
        body.iter().rposition(|&byte| byte == b'}'),
    ) {
        (Some(start), Some(end)) if start <= end => body[start..=end].to_vec(),
        _ => body.to_vec(),
    };
    Ok(Answer {
        status,
        content_type,
        body,
    })
}

/// Checks one answer against the file's expectation; `None` if it matches.
fn mismatch(answer: &Answer, status: u16, code: &str) -> Option<String> {
    let json = answer
        .content_type
        .as_deref()
        .is_some_and(|content_type| content_type.starts_with("application/json"));
    if answer.status == status && json && answer.code().as_deref() == Some(code) {
        return None;
    }
    Some(format!(
        "expected {status} {code}, got {} {:?} with content-type {:?}",
        answer.status,
        String::from_utf8_lossy(&answer.body),
        answer.content_type
    ))
}

fn corpus_files() -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(CORPUS)?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|path| {
        path.extension()
            .is_some_and(|extension| extension == "http")
    });
    files.sort();
    Ok(files)
}

fn load(path: &Path) -> anyhow::Result<(RequestFile, u16, String)> {
    let bytes = std::fs::read(path)?;
    let request = request_file::parse(&bytes, MAX_EXPANDED)
        .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
    let (status, code) = request
        .expect
        .clone()
        .ok_or_else(|| anyhow::anyhow!("{}: no `expect` line", path.display()))?;
    // A refusal: a 4xx, or 501 for a transfer coding the server does not
    // implement (RFC 9112 §6.1).
    anyhow::ensure!(
        (400..500).contains(&status) || status == 501,
        "{}: every hostile case expects a 4xx or 501, not {status}",
        path.display()
    );
    Ok((request, status, code))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hostile_request_is_refused_with_its_code_and_writes_nothing() -> anyhow::Result<()> {
    let harness = Harness::start().await?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(run(listener, harness.state.clone(), async {
        let _ = stopped.await;
    }));

    let files = corpus_files()?;
    let mut failures = Vec::new();
    let mut n_tcp = 0;
    for path in &files {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let (request, status, code) = load(path)?;
        let mut transports = vec!["in-process"];
        if request.over_tcp {
            transports.push("tcp");
            n_tcp += 1;
        }
        for transport in transports {
            let before = harness.scan().await?;
            let answer = match transport {
                "tcp" => over_tcp(address, &request).await,
                _ => in_process(&harness.state, &request).await,
            };
            match answer {
                Ok(answer) => {
                    if let Some(problem) = mismatch(&answer, status, &code) {
                        failures.push(format!(
                            "{name} ({transport}; {}): {problem}",
                            request.description
                        ));
                    }
                }
                Err(error) => failures.push(format!("{name} ({transport}): {error:#}")),
            }
            if harness.scan().await? != before {
                failures.push(format!("{name} ({transport}): the store changed"));
            }
        }
    }
    let _ = stop.send(());
    server.await??;

    println!(
        "hostile corpus: {} files, {n_tcp} also over TCP, {} failures",
        files.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} hostile cases failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    // The corpus is the list; a directory that lost its files
    // would pass vacuously.
    assert!(files.len() >= 40, "only {} corpus files", files.len());
    assert!(n_tcp >= 1, "no case goes over TCP");
    Ok(())
}

/// The harness itself: a refusal leaves the scan unchanged, a write does
/// not, so "the store changed" is a check that can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_scan_sees_a_write() -> anyhow::Result<()> {
    let harness = Harness::start().await?;
    let before = harness.scan().await?;
    assert!(
        before
            .iter()
            .any(|record| record.value.as_slice() == b"s3cr3t"),
        "the seed is in the scan"
    );
    let refused = request_file::parse(
        b"PUT /v1/locks/a/keys/secret\npalisade-sequencer: v1;lock=a;mode=exclusive;gen=4\n\nstale\n",
        MAX_EXPANDED,
    )
    .expect("a valid request file");
    let answer = in_process(&harness.state, &refused).await?;
    assert_eq!(mismatch(&answer, 409, "stale"), None);
    assert_eq!(harness.scan().await?, before);

    let accepted = request_file::parse(
        b"PUT /v1/locks/a/keys/secret\npalisade-sequencer: v1;lock=a;mode=exclusive;gen=5\n\nchanged\n",
        MAX_EXPANDED,
    )
    .expect("a valid request file");
    let answer = in_process(&harness.state, &accepted).await?;
    assert_eq!(
        answer.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_ne!(harness.scan().await?, before);
    Ok(())
}

/// Every `palisade-sequencer` value of the corpus is a seed of the parser
/// fuzz targets, named `hostile-<case>-<n>`; the `valid-*` seeds parse, the
/// `valid-signed-*` ones verify under the fuzz targets' keys (`k1` = 32
/// bytes of 0x42, `k2` = 32 bytes of 0x43, issuer `fuzz-issuer`), and the
/// `signed-*` ones parse and do not verify.
#[test]
fn the_parser_fuzz_seeds_follow_the_corpus() -> anyhow::Result<()> {
    let mut seeds = BTreeMap::new();
    for entry in std::fs::read_dir(SEQUENCER_SEEDS)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        seeds.insert(name, std::fs::read(&path)?);
    }
    let write = std::env::var_os("PALISADE_WRITE_SEEDS").is_some();
    let mut missing = Vec::new();
    for path in corpus_files()? {
        let (request, _, _) = load(&path)?;
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        let values = request
            .headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case(b"palisade-sequencer"));
        for (n, (_, value)) in values.enumerate() {
            let name = format!("hostile-{stem}-{}", n + 1);
            if seeds.get(&name) != Some(value) {
                if write {
                    std::fs::write(Path::new(SEQUENCER_SEEDS).join(&name), value)?;
                } else {
                    missing.push(name);
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "fuzz/seeds/sequencer/ lacks or differs for {missing:?}; rerun with PALISADE_WRITE_SEEDS=1"
    );

    let verifier = Verifier::new()
        .with_key(SigningKey::new("k1", [0x42; 32])?)?
        .with_key(SigningKey::new("k2", [0x43; 32])?)?
        .with_issuer("fuzz-issuer")?;
    let mut n_valid = 0;
    for (name, bytes) in &seeds {
        let parsed = std::str::from_utf8(bytes)
            .map_err(anyhow::Error::from)
            .and_then(|text| Ok(text.parse::<Sequencer>()?));
        if name.starts_with("valid-") || name.starts_with("signed-") {
            let sequencer = parsed.map_err(|error| anyhow::anyhow!("seed {name}: {error}"))?;
            let verified = verifier.verify(&sequencer);
            if name.starts_with("valid-signed-") {
                assert_eq!(verified, Ok(()), "seed {name}");
            } else if name.starts_with("signed-") {
                assert!(verified.is_err(), "seed {name} verifies");
            }
            n_valid += 1;
        } else {
            assert!(name.starts_with("hostile-"), "unexpected seed {name}");
        }
    }
    assert!(n_valid >= 4, "only {n_valid} valid seeds");
    Ok(())
}
