//! What the resource server's benchmarks share: external load generators
//! (`wrk` for HTTP, `redis-benchmark` for Redis) run as child processes
//! with their output parsed, and the process figures (RSS, load average,
//! bytes on disk).
//!
//! An external generator written in C takes far less CPU per request than
//! any client we could write in the benchmark process, and it does not
//! share the server's tokio runtime: on two cores that is the difference
//! between measuring the server and measuring the load generator.

#![allow(dead_code)] // Each bench uses part of this module.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// What one `wrk` or `redis-benchmark` run reports.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LoadFigures {
    pub(crate) per_second: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    /// CPU µs the load generator itself spent per request (its threads
    /// share the machine's cores with the server under test).
    pub(crate) generator_cpu_us: f64,
}

/// CPU time of this process's children that have ended and been waited
/// for: read before and after a load generator runs, the difference is
/// the load generator's own (the server and Redis are still running).
fn ended_children_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_CHILDREN)
        .map(|usage| {
            let micros = |t: nix::sys::time::TimeVal| {
                Duration::from_micros(t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64)
            };
            micros(usage.user_time()) + micros(usage.system_time())
        })
        .unwrap_or_default()
}

/// One HTTP request in wire form, for a `wrk` script.
pub(crate) fn raw_request(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> String {
    let mut request = format!("{method} {path} HTTP/1.1\r\nhost: bench\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    request.push_str(std::str::from_utf8(body).expect("bench bodies are ASCII"));
    request
}

/// A `wrk` script that sends the prepared requests in turn: `wrk` thread
/// `t` cycles through `per_thread[t % len]`. The requests are built once,
/// so the script costs `wrk` one table lookup per request.
pub(crate) fn cycling_script(per_thread: &[Vec<String>]) -> String {
    let mut script = String::from("local prepared = {\n");
    for requests in per_thread {
        script.push_str("  {\n");
        for request in requests {
            // Rust's escapes of an ASCII string (\r, \n, \", \\) are Lua's.
            script.push_str(&format!("    {request:?},\n"));
        }
        script.push_str("  },\n");
    }
    script.push_str(
        "}\n\
         local threads = 0\n\
         function setup(thread)\n  thread:set(\"tid\", threads)\n  threads = threads + 1\nend\n\
         function init(args)\n  mine = prepared[tid % #prepared + 1]\n  next_index = 0\nend\n\
         function request()\n  next_index = next_index % #mine + 1\n  return mine[next_index]\nend\n",
    );
    script
}

/// Runs `wrk -t threads -c connections -d duration --latency url`, with
/// `script` if given, and parses its report. Panics if any answer was not
/// 2xx/3xx or a socket failed: a benchmark of refused requests measures
/// nothing.
pub(crate) fn wrk(
    url: &str,
    script: Option<&Path>,
    threads: usize,
    connections: usize,
    duration: Duration,
) -> LoadFigures {
    let mut command = Command::new("wrk");
    command
        .arg(format!("-t{threads}"))
        .arg(format!("-c{connections}"))
        // Whole seconds: `wrk` takes no finer unit.
        .arg(format!("-d{}s", duration.as_secs_f64().round().max(1.0)))
        .arg("--latency")
        .arg("--timeout")
        .arg("10s");
    if let Some(script) = script {
        command.arg("-s").arg(script);
    }
    let cpu_before = ended_children_cpu();
    let output = command
        .arg(url)
        .output()
        .expect("wrk runs (Debian package `wrk`)");
    let cpu = ended_children_cpu().saturating_sub(cpu_before);
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "wrk failed: {report}");
    assert!(
        !report.contains("Non-2xx or 3xx responses") && !report.contains("Socket errors"),
        "wrk saw errors:\n{report}"
    );
    let mut figures = LoadFigures::default();
    for line in report.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", rate] => figures.per_second = rate.parse().unwrap_or(f64::NAN),
            ["50%", latency] => figures.p50_us = wrk_latency_us(latency),
            ["99%", latency] => figures.p99_us = wrk_latency_us(latency),
            _ => {}
        }
    }
    assert!(
        figures.per_second > 0.0,
        "no rate in wrk's report:\n{report}"
    );
    figures.generator_cpu_us =
        cpu.as_secs_f64() * 1e6 / (figures.per_second * duration.as_secs_f64());
    figures
}

/// `wrk` prints latencies as `812.00us`, `1.93ms` or `1.02s`.
fn wrk_latency_us(text: &str) -> f64 {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().unwrap_or(f64::NAN);
    match unit {
        "us" => number,
        "ms" => number * 1e3,
        "s" => number * 1e6,
        "m" => number * 60e6,
        _ => f64::NAN,
    }
}

/// Runs `redis-benchmark` for `SET` of `value_bytes`-byte values over
/// random keys at `port`, and parses its CSV report.
///
/// Single-threaded, its default: with `--threads` it notices the end of
/// the run only at its next 250 ms tick and counts the wait in its time
/// (a 2.4 s run reported as 2.76 s), which understates Redis by up to a
/// tenth. One thread costs it 4 to 5 µs per request, far from a
/// bottleneck at these rates.
pub(crate) fn redis_benchmark_set(
    port: u16,
    clients: usize,
    requests: usize,
    value_bytes: usize,
) -> LoadFigures {
    let cpu_before = ended_children_cpu();
    let output = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &clients.to_string()])
        .args(["-n", &requests.to_string()])
        .args(["-d", &value_bytes.to_string()])
        .args(["-r", "100000", "-t", "set", "--csv"])
        .output()
        .expect("redis-benchmark runs (Debian package `redis-tools`)");
    let cpu = ended_children_cpu().saturating_sub(cpu_before);
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "redis-benchmark failed: {report}");
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let row = report
        .lines()
        .find(|line| line.starts_with("\"SET\""))
        .unwrap_or_else(|| panic!("no SET row in redis-benchmark's report:\n{report}"));
    let fields: Vec<f64> = row
        .split(',')
        .map(|field| field.trim_matches('"').parse().unwrap_or(f64::NAN))
        .collect();
    LoadFigures {
        per_second: fields[1],
        p50_us: fields[4] * 1e3,
        p99_us: fields[6] * 1e3,
        generator_cpu_us: cpu.as_secs_f64() * 1e6 / requests as f64,
    }
}

/// The resident set size of process `pid` (`"self"` for this one), in KiB.
pub(crate) fn rss_kib(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The one-minute load average, as `uptime` shows it.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| {
            let words: Vec<&str> = text.split_whitespace().take(3).collect();
            Some(words.join(" ")).filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Bytes allocated on disk under `path` (as `du` counts them).
pub(crate) fn disk_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => disk_bytes(&entry.path()),
            Ok(meta) => meta.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// The median of `values` (NaN when empty).
pub(crate) fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The `palisade-server` binary of this build, run as a child process: the
/// resource server exactly as deployed (its own runtime, its logging), and
/// nothing else of the benchmark's in its process.
pub(crate) struct ServerProcess {
    child: std::process::Child,
    pub(crate) addr: std::net::SocketAddr,
}

impl ServerProcess {
    /// Starts the server on `127.0.0.1:0` over `data_dir` (`flushed`
    /// durability, every other setting its default) and waits for it to
    /// listen.
    pub(crate) fn start(data_dir: &Path) -> ServerProcess {
        use std::io::BufRead as _;
        let mut child = Command::new(env!("CARGO_BIN_EXE_palisade-server"))
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen", "127.0.0.1:0", "--durability", "flushed"])
            // The default log level (info), as deployed.
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("palisade-server starts");
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("palisade-server prints its address");
        let addr = line
            .trim()
            .strip_prefix("palisade-server listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from palisade-server: {line:?}"))
            .parse()
            .expect("a socket address");
        ServerProcess { child, addr }
    }

    pub(crate) fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// The server process's CPU time and switches-in so far
    /// ([`palisade_testkit::bench::process_usage`]).
    pub(crate) fn usage(&self) -> (Duration, u64) {
        palisade_testkit::bench::process_usage(self.child.id())
    }

    /// CPU time and switches-in so far of the server's threads whose name
    /// starts with `prefix` (`tokio-rt-worker`, `palisade-commit`,
    /// `sled-io`; [`palisade_testkit::bench::thread_usage`]).
    pub(crate) fn thread_usage(&self, prefix: &str) -> (Duration, u64) {
        palisade_testkit::bench::thread_usage(self.child.id(), |name| name.starts_with(prefix))
    }

    /// `palisade_store_flushes_total` and `palisade_store_flush_tickets_total`
    /// from `/metrics`.
    pub(crate) fn flush_counters(&self) -> (u64, u64) {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(self.addr).expect("connects");
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nhost: bench\r\nconnection: close\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        let counter = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
                .unwrap_or(0)
        };
        (
            counter("palisade_store_flushes_total "),
            counter("palisade_store_flush_tickets_total "),
        )
    }

    /// Stops the server with SIGTERM (it finishes what is in flight and
    /// flushes) and waits for it.
    pub(crate) fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Only reached without `stop` (a panic): do not leave it running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
