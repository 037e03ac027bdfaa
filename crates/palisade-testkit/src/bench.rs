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

/// CPU time and switches-in (how often the scheduler ran one of its
/// threads) of every thread of process `pid` so far, from
/// `/proc/<pid>/task/*/schedstat` (nanoseconds on CPU, time waiting for
/// it, times run); zeros once the process is gone. Switches-in per
/// request tell how often a request woke a thread that had gone to sleep.
pub fn process_usage(pid: u32) -> (std::time::Duration, u64) {
    thread_usage(pid, |_| true)
}

/// [`process_usage`] of the threads of `pid` whose name (`comm`) `which`
/// accepts: a runtime's workers, say, named by its builder.
pub fn thread_usage(pid: u32, which: impl Fn(&str) -> bool) -> (std::time::Duration, u64) {
    let mut on_cpu_ns = 0;
    let mut runs = 0;
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"));
    for task in tasks.into_iter().flatten().flatten() {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !which(name.trim_end()) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        let mut fields = text.split_whitespace();
        on_cpu_ns += fields
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0);
        runs += fields
            .nth(1)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0);
    }
    (std::time::Duration::from_nanos(on_cpu_ns), runs)
}
