//! What the benchmarks share: their knobs come from the environment, and
//! the CPU time of the processes they measure from `/proc`.

use std::str::FromStr;

/// The value of the environment variable `name` (a round count, seconds,
/// clients), or `default` when it is unset or does not parse.
pub fn env_number<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// CPU time (user + system) of process `pid` so far, from
/// `/proc/<pid>/stat`; zero where `/proc` cannot tell (the process is
/// gone). This process: `process_cpu(std::process::id())`.
pub fn process_cpu(pid: u32) -> std::time::Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return std::time::Duration::ZERO;
    };
    // The fields after the command name in parentheses (which may hold
    // spaces): utime and stime are the line's 14th and 15th, in clock
    // ticks (the kernel's USER_HZ, 100 per second on Linux).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|field| field.parse::<u64>().ok())
        .sum();
    std::time::Duration::from_millis(ticks * 10)
}
