//! The timeline as a picture: hand-written SVG, one panel per run, four
//! swim lanes per panel (client A, client B, lock service, resource
//! server), a shared time axis in milliseconds, one marker and a short
//! label per event, the full sentence as a tooltip.
//!
//! Refused writes are red squares, stale writes the storage applied are
//! orange triangles, A's pause is a shaded band. Every marker is a
//! `<g class="event">` with `data-lane`, `data-kind` and `data-ms`
//! attributes, so the picture can be checked by a program as well as by a
//! person.

use std::fmt::Write as _;

use crate::timeline::{Event, EventKind, Lane};

/// One run, drawn as a panel.
#[derive(Debug, Clone, Copy)]
pub struct Panel<'a> {
    /// The panel's heading.
    pub title: &'a str,
    /// What the storage lane is called in this run.
    pub storage_label: &'a str,
    /// The verdict line, written under the panel.
    pub verdict: &'a str,
    /// The run's events.
    pub events: &'a [Event],
}

const WIDTH: f64 = 1500.0;
const LEFT: f64 = 150.0;
const RIGHT: f64 = 40.0;
const TOP: f64 = 56.0;
const PANEL_TITLE: f64 = 30.0;
const LANE_HEIGHT: f64 = 110.0;
const AXIS: f64 = 34.0;
const VERDICT: f64 = 30.0;
const PANEL_GAP: f64 = 24.0;
const LEGEND: f64 = 48.0;
/// Rough width of one character of the 11 px label font.
const CHAR_WIDTH: f64 = 6.1;
/// The least distance between two markers on one lane.
const MARKER_GAP: f64 = 15.0;
/// Label rows around a lane's centre line, tried in this order.
const LABEL_ROWS: [f64; 5] = [-16.0, 26.0, -31.0, 41.0, -46.0];

/// The label rows between the lane and `row`, on `row`'s side.
fn closer_rows(row: usize) -> impl Iterator<Item = usize> {
    let offset = LABEL_ROWS[row];
    (0..LABEL_ROWS.len()).filter(move |&closer| {
        LABEL_ROWS[closer].signum() == offset.signum() && LABEL_ROWS[closer].abs() < offset.abs()
    })
}

fn plot_width() -> f64 {
    WIDTH - LEFT - RIGHT
}

fn panel_height() -> f64 {
    PANEL_TITLE + LANE_HEIGHT * Lane::ALL.len() as f64 + AXIS + VERDICT
}

fn colour(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Note => "#4a5568",
        EventKind::Acquired => "#2b6cb0",
        EventKind::Read => "#718096",
        EventKind::WriteSent => "#2c7a7b",
        EventKind::WriteAccepted => "#2f855a",
        EventKind::StaleWriteAccepted => "#dd6b20",
        EventKind::WriteRefused => "#c53030",
        EventKind::LeaseLost => "#6b46c1",
        EventKind::PauseStart | EventKind::PauseEnd => "#b7791f",
        EventKind::Released => "#a0aec0",
    }
}

fn legend_name(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Note => "note",
        EventKind::Acquired => "lock granted",
        EventKind::Read => "read",
        EventKind::WriteSent => "write sent",
        EventKind::WriteAccepted => "write applied",
        EventKind::StaleWriteAccepted => "stale write applied",
        EventKind::WriteRefused => "write refused (409 stale)",
        EventKind::LeaseLost => "lease lost",
        EventKind::PauseStart | EventKind::PauseEnd => "pause",
        EventKind::Released => "release",
    }
}

/// Escapes text for XML content and attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&apos;"),
            // XML 1.0 allows no other control characters.
            c if c.is_control() && c != '\n' && c != '\t' => escaped.push(' '),
            c => escaped.push(c),
        }
    }
    escaped
}

/// A tick step that gives at most about a dozen ticks.
fn tick_step(span_ms: u64) -> u64 {
    [
        100, 200, 250, 500, 1_000, 2_000, 2_500, 5_000, 10_000, 20_000, 30_000, 60_000,
    ]
    .into_iter()
    .find(|step| span_ms / step <= 12)
    .unwrap_or(120_000)
}

/// The marker of one event at (`x`, `y`).
fn marker(kind: EventKind, x: f64, y: f64) -> String {
    let fill = colour(kind);
    match kind {
        EventKind::WriteRefused => format!(
            r##"<rect class="marker" x="{:.1}" y="{:.1}" width="14" height="14" fill="{fill}" stroke="#742a2a" stroke-width="1.5"/>"##,
            x - 7.0,
            y - 7.0
        ),
        EventKind::StaleWriteAccepted => format!(
            r##"<polygon class="marker" points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{fill}" stroke="#7b341e" stroke-width="1.5"/>"##,
            x,
            y - 9.0,
            x - 8.0,
            y + 6.0,
            x + 8.0,
            y + 6.0
        ),
        _ => format!(
            r##"<circle class="marker" cx="{x:.1}" cy="{y:.1}" r="6" fill="{fill}" stroke="white" stroke-width="1.5"/>"##
        ),
    }
}

/// Renders the panels as one SVG document.
pub fn render(title: &str, panels: &[Panel<'_>]) -> String {
    let span_ms = panels
        .iter()
        .flat_map(|panel| panel.events.iter())
        .map(|event| u64::try_from(event.at.as_millis()).unwrap_or(u64::MAX))
        .max()
        .unwrap_or(0);
    let step = tick_step(span_ms.max(1));
    // Round the axis up to a whole tick past the last event.
    let axis_end = (span_ms / step + 1) * step;
    let x_of = |ms: u64| LEFT + plot_width() * ms as f64 / axis_end as f64;

    let height = TOP + panels.len() as f64 * (panel_height() + PANEL_GAP) + LEGEND;
    let mut svg = String::new();
    let _ = writeln!(svg, r##"<?xml version="1.0" encoding="UTF-8"?>"##);
    let _ = writeln!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="DejaVu Sans, Verdana, sans-serif">"##
    );
    let _ = writeln!(svg, "<title>{}</title>", escape(title));
    let _ = writeln!(
        svg,
        r##"<rect x="0" y="0" width="{WIDTH}" height="{height:.0}" fill="white"/>"##
    );
    let _ = writeln!(
        svg,
        r##"<text x="20" y="32" font-size="20" font-weight="bold" fill="#1a202c">{}</text>"##,
        escape(title)
    );

    for (index, panel) in panels.iter().enumerate() {
        let top = TOP + index as f64 * (panel_height() + PANEL_GAP);
        render_panel(&mut svg, panel, top, axis_end, step, &x_of);
    }
    render_legend(&mut svg, height - LEGEND + 18.0);
    svg.push_str("</svg>\n");
    svg
}

fn render_panel(
    svg: &mut String,
    panel: &Panel<'_>,
    top: f64,
    axis_end: u64,
    step: u64,
    x_of: &dyn Fn(u64) -> f64,
) {
    let _ = writeln!(svg, r##"<g class="panel">"##);
    let _ = writeln!(
        svg,
        r##"<text x="20" y="{:.1}" font-size="15" font-weight="bold" fill="#2d3748">{}</text>"##,
        top + 20.0,
        escape(panel.title)
    );
    let lanes_top = top + PANEL_TITLE;
    let lane_mid = |lane: Lane| {
        let row = Lane::ALL.iter().position(|l| *l == lane).unwrap_or(0) as f64;
        lanes_top + row * LANE_HEIGHT + LANE_HEIGHT / 2.0
    };

    // Lanes: a band and a label each.
    for (row, lane) in Lane::ALL.into_iter().enumerate() {
        let y = lanes_top + row as f64 * LANE_HEIGHT;
        let label = match lane {
            Lane::ResourceServer => panel.storage_label,
            other => other.label(),
        };
        let fill = if row % 2 == 0 { "#f7fafc" } else { "#edf2f7" };
        let _ = writeln!(
            svg,
            r##"<g class="lane" data-lane="{}"><rect x="0" y="{y:.1}" width="{WIDTH}" height="{LANE_HEIGHT}" fill="{fill}"/><line x1="{LEFT}" y1="{mid:.1}" x2="{:.1}" y2="{mid:.1}" stroke="#cbd5e0" stroke-width="1"/><text x="14" y="{:.1}" font-size="13" font-weight="bold" fill="#2d3748">{}</text></g>"##,
            lane.id(),
            WIDTH - RIGHT,
            y + LANE_HEIGHT / 2.0 + 4.0,
            escape(label),
            mid = y + LANE_HEIGHT / 2.0,
        );
    }

    // A's pause: a shaded band on its lane.
    let millis = |event: &Event| u64::try_from(event.at.as_millis()).unwrap_or(u64::MAX);
    let pause_start = panel
        .events
        .iter()
        .find(|event| event.lane == Lane::ClientA && event.kind == EventKind::PauseStart);
    let pause_end = panel
        .events
        .iter()
        .find(|event| event.lane == Lane::ClientA && event.kind == EventKind::PauseEnd);
    if let (Some(start), Some(end)) = (pause_start, pause_end) {
        let (x1, x2) = (x_of(millis(start)), x_of(millis(end)));
        let mid = lane_mid(Lane::ClientA);
        let _ = writeln!(
            svg,
            r##"<g class="pause"><rect x="{x1:.1}" y="{:.1}" width="{:.1}" height="20" fill="#fefcbf" stroke="#d69e2e" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle" fill="#975a16">paused for {} ms</text></g>"##,
            mid - 10.0,
            (x2 - x1).max(1.0),
            (x1 + x2) / 2.0,
            mid + 4.0,
            millis(end).saturating_sub(millis(start))
        );
    }

    // Events: marker, leader line and label; labels take the first free
    // row of their lane.
    // Markers of events a few milliseconds apart on one lane are spread
    // MARKER_GAP apart so that none hides another (the tooltip and
    // `data-ms` keep the exact time); refused and stale writes are drawn
    // last, on top.
    // Per lane and label row, the horizontal extents already taken.
    let mut taken: Vec<Vec<Vec<(f64, f64)>>> =
        vec![vec![Vec::new(); LABEL_ROWS.len()]; Lane::ALL.len()];
    let lane_of = |event: &Event| Lane::ALL.iter().position(|l| *l == event.lane).unwrap_or(0);
    let mut last_marker = vec![f64::MIN; Lane::ALL.len()];
    let xs: Vec<f64> = panel
        .events
        .iter()
        .map(|event| {
            let lane_row = lane_of(event);
            let x = x_of(millis(event)).max(last_marker[lane_row] + MARKER_GAP);
            last_marker[lane_row] = x;
            x
        })
        .collect();
    let mut drawn = Vec::with_capacity(panel.events.len());
    for (index, event) in panel.events.iter().enumerate() {
        let lane_row = lane_of(event);
        let x = xs[index];
        let width = event.label.chars().count() as f64 * CHAR_WIDTH;
        // The next marker on this lane: a label to the right of this one's
        // marker would lie over it, and that marker's leader would run
        // through the label; such a label goes to the left if it fits.
        let next_on_lane = panel.events[index + 1..]
            .iter()
            .zip(&xs[index + 1..])
            .find(|(later, _)| lane_of(later) == lane_row)
            .map(|(_, later_x)| *later_x);
        let crowded = next_on_lane.is_some_and(|next| next < x + 8.0 + width + 3.0);
        let fits_left = x - 8.0 - width >= 8.0;
        let anchor_end = x + 8.0 + width > WIDTH - 8.0 || (crowded && fits_left);
        let (start, end) = if anchor_end {
            (x - 8.0 - width, x - 8.0)
        } else {
            (x + 8.0, x + 8.0 + width)
        };
        let rows = &mut taken[lane_row];
        let overlaps = |row: usize| {
            rows[row]
                .iter()
                .filter(|(taken_start, taken_end)| {
                    start < taken_end + 6.0 && *taken_start < end + 6.0
                })
                .count()
        };
        // A label's leader line runs from the marker through the rows
        // nearer the lane on its side: it must cross no label there.
        let crossed = |row: usize| {
            closer_rows(row)
                .flat_map(|closer| rows[closer].iter())
                .any(|(taken_start, taken_end)| x >= taken_start - 3.0 && x <= taken_end + 3.0)
        };
        // The first free row, or else the least crowded one.
        let row = (0..LABEL_ROWS.len())
            .find(|row| overlaps(*row) == 0 && !crossed(*row))
            .or_else(|| (0..LABEL_ROWS.len()).find(|row| overlaps(*row) == 0))
            .unwrap_or_else(|| {
                (0..LABEL_ROWS.len())
                    .min_by_key(|row| overlaps(*row))
                    .unwrap_or(0)
            });
        rows[row].push((start, end));
        // Its leader keeps later labels off the rows it crosses.
        for closer in closer_rows(row).collect::<Vec<_>>() {
            rows[closer].push((x - 1.0, x + 1.0));
        }
        drawn.push((event, x, row, anchor_end));
    }
    drawn.sort_by_key(|(event, ..)| {
        matches!(
            event.kind,
            EventKind::WriteRefused | EventKind::StaleWriteAccepted
        )
    });
    for (event, x, row, anchor_end) in drawn {
        let mid = lane_mid(event.lane);
        let label_y = mid + LABEL_ROWS[row];
        let leader_y = if LABEL_ROWS[row] < 0.0 {
            label_y + 3.0
        } else {
            label_y - 10.0
        };
        let text_colour = match event.kind {
            EventKind::WriteRefused | EventKind::StaleWriteAccepted => colour(event.kind),
            _ => "#1a202c",
        };
        let weight = match event.kind {
            EventKind::WriteRefused | EventKind::StaleWriteAccepted => "bold",
            _ => "normal",
        };
        let _ = writeln!(
            svg,
            r##"<g class="event" data-lane="{}" data-kind="{}" data-ms="{}"><title>{} ms, {}: {}</title><line x1="{x:.1}" y1="{mid:.1}" x2="{x:.1}" y2="{leader_y:.1}" stroke="{}" stroke-width="1"/>{}<text x="{:.1}" y="{label_y:.1}" font-size="11" font-weight="{weight}" text-anchor="{}" fill="{text_colour}">{}</text></g>"##,
            event.lane.id(),
            event.kind.id(),
            millis(event),
            millis(event),
            escape(match event.lane {
                Lane::ResourceServer => panel.storage_label,
                other => other.label(),
            }),
            escape(&event.detail),
            colour(event.kind),
            marker(event.kind, x, mid),
            if anchor_end { x - 8.0 } else { x + 8.0 },
            if anchor_end { "end" } else { "start" },
            escape(&event.label),
        );
    }

    // The time axis.
    let axis_y = lanes_top + LANE_HEIGHT * Lane::ALL.len() as f64;
    let _ = writeln!(
        svg,
        r##"<g class="axis"><line x1="{LEFT}" y1="{axis_y:.1}" x2="{:.1}" y2="{axis_y:.1}" stroke="#4a5568" stroke-width="1"/>"##,
        WIDTH - RIGHT
    );
    let mut tick = 0;
    while tick <= axis_end {
        let x = x_of(tick);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{axis_y:.1}" x2="{x:.1}" y2="{:.1}" stroke="#4a5568"/><text x="{x:.1}" y="{:.1}" font-size="10" text-anchor="middle" fill="#4a5568">{tick}</text>"##,
            axis_y + 5.0,
            axis_y + 17.0
        );
        tick += step;
    }
    let _ = writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end" fill="#4a5568">time since the run started (ms)</text></g>"##,
        WIDTH - RIGHT,
        axis_y + 30.0
    );

    let verdict_colour = if panel.verdict.starts_with("SAFE") {
        "#276749"
    } else if panel.verdict.contains("NOT reproduced") {
        "#4a5568"
    } else if panel.verdict.starts_with("FENCING FAILED") {
        "#c53030"
    } else {
        "#c05621"
    };
    let _ = writeln!(
        svg,
        r##"<text class="verdict" x="20" y="{:.1}" font-size="13" font-weight="bold" fill="{verdict_colour}">{}</text>"##,
        axis_y + AXIS + 14.0,
        escape(panel.verdict)
    );
    let _ = writeln!(svg, "</g>");
}

fn render_legend(svg: &mut String, y: f64) {
    let kinds = [
        EventKind::Acquired,
        EventKind::Read,
        EventKind::WriteSent,
        EventKind::WriteAccepted,
        EventKind::StaleWriteAccepted,
        EventKind::WriteRefused,
        EventKind::LeaseLost,
        EventKind::PauseStart,
        EventKind::Released,
        EventKind::Note,
    ];
    let _ = writeln!(svg, r##"<g class="legend">"##);
    let mut x = 24.0;
    for kind in kinds {
        let name = legend_name(kind);
        let _ = writeln!(
            svg,
            r##"{}<text x="{:.1}" y="{:.1}" font-size="11" fill="#2d3748">{}</text>"##,
            marker(kind, x, y),
            x + 12.0,
            y + 4.0,
            escape(name)
        );
        x += 30.0 + name.len() as f64 * CHAR_WIDTH;
    }
    let _ = writeln!(svg, "</g>");
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn event(ms: u64, lane: Lane, kind: EventKind, label: &str) -> Event {
        Event {
            at: Duration::from_millis(ms),
            lane,
            kind,
            label: label.into(),
            detail: format!("{label} <in detail> & \"quoted\""),
        }
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape(r##"a < b & "c" > 'd'"##),
            "a &lt; b &amp; &quot;c&quot; &gt; &apos;d&apos;"
        );
        assert_eq!(escape("bell\u{7}"), "bell ");
    }

    #[test]
    fn one_group_per_event_and_lane_with_escaped_text() {
        let events = vec![
            event(0, Lane::ClientA, EventKind::Acquired, "holds 3"),
            event(10, Lane::ClientA, EventKind::PauseStart, "paused"),
            event(2500, Lane::ClientB, EventKind::Acquired, "holds 4"),
            event(3000, Lane::ClientA, EventKind::PauseEnd, "wakes"),
            event(
                3010,
                Lane::ResourceServer,
                EventKind::WriteRefused,
                "409: 3 < 4",
            ),
        ];
        let picture = render(
            "t <1>",
            &[Panel {
                title: "run",
                storage_label: "resource server",
                verdict: "SAFE",
                events: &events,
            }],
        );
        assert!(picture.starts_with("<?xml"));
        assert!(picture.trim_end().ends_with("</svg>"));
        assert_eq!(picture.matches(r##"<g class="event""##).count(), 5);
        assert_eq!(picture.matches(r##"<g class="lane""##).count(), 4);
        assert_eq!(picture.matches(r##"data-kind="write-refused""##).count(), 1);
        assert!(picture.contains("409: 3 &lt; 4"));
        assert!(picture.contains("t &lt;1&gt;"));
        assert!(!picture.contains("<in detail>"));
        assert!(picture.contains(r##"<g class="pause">"##));
    }

    /// The picture of the demo: A wakes and at once sends its late write.
    /// The write's leader line must not run through the word "wakes".
    #[test]
    fn no_leader_line_crosses_a_label() {
        let events = vec![
            event(0, Lane::ClientA, EventKind::Acquired, "holds 2"),
            event(10, Lane::ClientA, EventKind::PauseStart, "pauses"),
            event(3000, Lane::ClientA, EventKind::PauseEnd, "wakes"),
            event(
                3001,
                Lane::ClientA,
                EventKind::LeaseLost,
                "guard: lease lost",
            ),
            event(
                3002,
                Lane::ClientA,
                EventKind::WriteSent,
                "writes 130 (generation 2)",
            ),
        ];
        let picture = render(
            "t",
            &[Panel {
                title: "run",
                storage_label: "resource server",
                verdict: "SAFE",
                events: &events,
            }],
        );
        // Every label's box on the lane, and every leader line.
        let mut labels = Vec::new();
        let mut leaders = Vec::new();
        for group in picture.split(r##"<g class="event""##).skip(1) {
            let number = |key: &str, from: &str| -> f64 {
                let rest = &from[from.find(key).expect(key) + key.len()..];
                rest[..rest.find('"').expect("quote")]
                    .parse()
                    .expect("number")
            };
            let line = &group[group.find("<line").expect("leader")..];
            let (x, from_y, to_y) = (
                number("x1=\"", line),
                number("y1=\"", line),
                number("y2=\"", line),
            );
            let text = &group[group.find("<text").expect("label")..];
            let (text_x, text_y) = (number("x=\"", text), number("y=\"", text));
            let label = &text[text.find('>').expect(">") + 1..text.find("</text>").expect("end")];
            let width = label.chars().count() as f64 * CHAR_WIDTH;
            let (left, right) = if text.contains(r#"text-anchor="end""#) {
                (text_x - width, text_x)
            } else {
                (text_x, text_x + width)
            };
            labels.push((label.to_owned(), left, right, text_y - 10.0, text_y + 2.0));
            leaders.push((label.to_owned(), x, from_y.min(to_y), from_y.max(to_y)));
        }
        for (owner, x, top, bottom) in &leaders {
            for (label, left, right, label_top, label_bottom) in &labels {
                let crosses = label != owner
                    && x > left
                    && x < right
                    && top < label_bottom
                    && bottom > label_top;
                assert!(!crosses, "the leader of `{owner}` runs through `{label}`");
            }
        }
    }

    #[test]
    fn tick_steps_stay_readable() {
        assert_eq!(tick_step(900), 100);
        assert_eq!(tick_step(4_000), 500);
        assert_eq!(tick_step(11_000), 1_000);
        assert_eq!(tick_step(50_000), 5_000);
    }
}
