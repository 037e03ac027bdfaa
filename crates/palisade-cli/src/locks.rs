//! `palisade locks ls [PREFIX]` and `palisade locks show NAME`: who holds a
//! lock, in which mode and generation, how long its lease has left, who
//! waits, and whether a lock-delay is in force, as a table or as JSON.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use clap::{Args, Subcommand};
use palisade_core::{Holder, Inspect as _, LockInfo, LockName};
use serde_json::{Value, json};

use palisade_lock_any::{AnyInspector, BackendArgs, lock_error_text};

/// `palisade locks` arguments.
#[derive(Debug, Args)]
pub(crate) struct LocksArgs {
    #[command(subcommand)]
    command: LocksCommand,
}

#[derive(Debug, Subcommand)]
enum LocksCommand {
    /// List the locks that are held, waited for or in a lock-delay, one
    /// line per holder.
    Ls(LsArgs),
    /// Show one lock: its holders, its waiters in order, its lock-delay.
    Show(ShowArgs),
}

/// `palisade locks ls` arguments.
#[derive(Debug, Args)]
struct LsArgs {
    /// Only names starting with this text (a plain string prefix: `a/`
    /// lists `a/b` and `a/bc`, never `ab`).
    #[arg(default_value = "", value_name = "PREFIX")]
    name_prefix: String,

    /// One JSON array of locks instead of the table.
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    backend: BackendArgs,
}

/// `palisade locks show` arguments.
#[derive(Debug, Args)]
struct ShowArgs {
    /// The lock.
    name: String,

    /// One JSON object instead of the text.
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    backend: BackendArgs,
}

/// Runs `palisade locks ...`.
pub(crate) async fn run(args: LocksArgs) -> anyhow::Result<()> {
    match args.command {
        LocksCommand::Ls(args) => ls(args).await,
        LocksCommand::Show(args) => show(args).await,
    }
}

async fn ls(args: LsArgs) -> anyhow::Result<()> {
    let inspector = AnyInspector::connect(&crate::service::spec_of(&args.backend)?).await?;
    let locks = inspector
        .list(&args.name_prefix)
        .await
        .map_err(|error| anyhow::anyhow!("cannot list locks: {}", lock_error_text(&error)))?;
    let text = if args.json {
        let all: Vec<Value> = locks.iter().map(info_json).collect();
        format!("{}\n", Value::Array(all))
    } else {
        table(&locks)
    };
    print(&text)
}

async fn show(args: ShowArgs) -> anyhow::Result<()> {
    let name = LockName::new(args.name.as_str())
        .map_err(|error| anyhow::anyhow!("invalid lock name {:?}: {error}", args.name))?;
    let inspector = AnyInspector::connect(&crate::service::spec_of(&args.backend)?).await?;
    let info = inspector.inspect(&name).await.map_err(|error| {
        anyhow::anyhow!("cannot inspect lock `{name}`: {}", lock_error_text(&error))
    })?;
    let text = if args.json {
        format!("{}\n", info_json(&info))
    } else {
        detail(&info)
    };
    print(&text)
}

fn print(text: &str) -> anyhow::Result<()> {
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}

/// The JSON form of one lock; `null` stands for "the backend cannot know".
pub(crate) fn info_json(info: &LockInfo) -> Value {
    json!({
        "name": info.name.as_str(),
        "holders": info.holders.iter().map(holder_json).collect::<Vec<_>>(),
        "waiters": info.waiters.as_ref().map(|waiters| waiters
            .iter()
            .map(|waiter| json!({
                "mode": waiter.mode.as_str(),
                "lease": waiter.lease,
                "holder": waiter.holder,
            }))
            .collect::<Vec<_>>()),
        "lock_delay_left_ms": info.lock_delay_left.map(millis),
    })
}

fn holder_json(holder: &Holder) -> Value {
    json!({
        "mode": holder.mode.as_str(),
        "generation": holder.generation.get(),
        "lease_left_ms": holder.lease_left.map(millis),
        "lease": holder.lease,
        "holder": holder.holder,
    })
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The `ls` table: one row per holder (a lock with only waiters or a
/// lock-delay gets one row with `-` for the holder).
fn table(locks: &[LockInfo]) -> String {
    let header = [
        "LOCK",
        "MODE",
        "GENERATION",
        "LEASE LEFT",
        "HOLDER",
        "WAITERS",
        "LOCK-DELAY",
    ];
    let mut rows: Vec<[String; 7]> = Vec::new();
    for info in locks {
        let waiters = info
            .waiters
            .as_ref()
            .map_or_else(|| "?".to_owned(), |waiters| waiters.len().to_string());
        let delay = info.lock_delay_left.map_or_else(|| "-".to_owned(), seconds);
        if info.holders.is_empty() {
            rows.push([
                info.name.to_string(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                waiters.clone(),
                delay.clone(),
            ]);
        }
        for holder in &info.holders {
            rows.push([
                info.name.to_string(),
                holder.mode.as_str().into(),
                holder.generation.to_string(),
                left(holder.lease_left),
                who(holder),
                waiters.clone(),
                delay.clone(),
            ]);
        }
    }
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (index, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if index + 1 == cells.len() {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}  ");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in &rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// The `show` text.
fn detail(info: &LockInfo) -> String {
    let mut out = format!("lock:       {}\n", info.name);
    if info.holders.is_empty() {
        out.push_str("holders:    none\n");
    }
    for holder in &info.holders {
        let _ = writeln!(
            out,
            "holder:     {} generation {}, lease left {}, {}",
            holder.mode,
            holder.generation,
            left(holder.lease_left),
            who(holder)
        );
    }
    match &info.waiters {
        None => out.push_str("waiters:    unknown (this backend cannot see them)\n"),
        Some(waiters) if waiters.is_empty() => out.push_str("waiters:    none\n"),
        Some(waiters) => {
            let _ = writeln!(
                out,
                "waiters:    {} (in the order they are granted)",
                waiters.len()
            );
            for (place, waiter) in waiters.iter().enumerate() {
                let id = match (&waiter.holder, &waiter.lease) {
                    (Some(holder), Some(lease)) => format!("{holder} (lease {lease})"),
                    (Some(holder), None) => holder.clone(),
                    (None, Some(lease)) => format!("lease {lease}"),
                    (None, None) => "unknown".into(),
                };
                let _ = writeln!(out, "  {}. {} {id}", place + 1, waiter.mode);
            }
        }
    }
    let delay = info.lock_delay_left.map_or_else(
        || "none".to_owned(),
        |left| format!("{} left", seconds(left)),
    );
    let _ = writeln!(out, "lock-delay: {delay}");
    out
}

fn left(lease_left: Option<Duration>) -> String {
    lease_left.map_or_else(|| "unknown".to_owned(), seconds)
}

fn seconds(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}

fn who(holder: &Holder) -> String {
    match (&holder.holder, &holder.lease) {
        (Some(id), Some(lease)) => format!("{id} (lease {lease})"),
        (Some(id), None) => id.clone(),
        (None, Some(lease)) => format!("lease {lease}"),
        (None, None) => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use palisade_core::{Generation, Mode, Waiter};

    use super::*;

    #[test]
    fn the_table_has_one_row_per_holder_and_says_unknown() {
        let mut held = LockInfo::free(LockName::new("orders/42").unwrap());
        held.holders.push(
            Holder::new(Mode::Exclusive, Generation::new(7).unwrap())
                .with_lease_left(Some(Duration::from_millis(8_900)))
                .with_holder(Some("host/1".into()))
                .with_lease(Some("694d".into())),
        );
        held.waiters = Some(vec![Waiter::new(Mode::Shared, None, None)]);
        let mut delayed = LockInfo::free(LockName::new("b").unwrap());
        delayed.lock_delay_left = Some(Duration::from_secs(2));
        delayed.waiters = None;
        let text = table(&[held.clone(), delayed.clone()]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("LOCK "), "{text}");
        assert!(
            lines[1].contains("orders/42")
                && lines[1].contains("exclusive")
                && lines[1].contains(" 7 ")
                && lines[1].contains("8.9s")
                && lines[1].contains("host/1 (lease 694d)"),
            "{text}"
        );
        assert!(
            lines[2].contains("?") && lines[2].ends_with("2.0s"),
            "{text}"
        );
        let json = info_json(&delayed);
        assert_eq!(json["waiters"], Value::Null);
        assert_eq!(json["lock_delay_left_ms"], 2000);
        assert_eq!(info_json(&held)["holders"][0]["generation"], 7);
        assert!(detail(&delayed).contains("waiters:    unknown"));
    }
}
