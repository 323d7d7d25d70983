//! The overview page (`/`): every queue of the tenant with its depths by state, its
//! deliveries in the last five minutes, the age of its oldest READY task, paused and limits; filtered by a name prefix and
//! sorted by any column (server-side, so it needs no script); and headline numbers:
//! tasks in flight, READY and DEAD, locks held, schedules.

use std::{fmt::Write, sync::Arc};

use axum::{
    extract::{Query, State},
    http::HeaderMap,
    response::Response,
};
use serde::Deserialize;

use super::{
    html::{esc, live_region, UrlPart},
    Dashboard,
};
use crate::{
    auth::Viewer,
    error::Result,
    queue::{QueueConfig, QueueSummary, RateLimit},
    redis::TenantScoped,
    time::now_ms,
    validate,
};

/// The most queues the page lists (then it says so): a page a person reads, sorted
/// server-side over everything it lists.
const MAX_QUEUES: usize = 10_000;
/// Locks and schedules are counted up to this (then "1000+").
const MAX_COUNTED: usize = 1000;

/// `?prefix=…&sort=…`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct OverviewQuery {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    sort: String,
}

/// The columns, as `sort` names them, with their headings.
const COLUMNS: [(&str, &str); 9] = [
    ("name", "Queue"),
    ("ready", "Ready"),
    ("delayed", "Delayed"),
    ("in_flight", "In flight"),
    ("dead", "Dead"),
    ("delivered", "Delivered, 5 min"),
    ("oldest", "Oldest ready"),
    ("paused", "Paused"),
    ("limits", "Limits"),
];

pub(super) async fn overview(
    State(dashboard): State<Arc<Dashboard>>,
    headers: HeaderMap,
    Query(query): Query<OverviewQuery>,
) -> Response {
    dashboard
        .respond(&headers, "Queues", |viewer| {
            render(&dashboard, viewer, &query)
        })
        .await
}

pub(super) async fn render(
    dashboard: &Dashboard,
    viewer: Viewer,
    query: &OverviewQuery,
) -> Result<String> {
    let prefix = validate::optional_name("prefix", &query.prefix)?;
    let sort = COLUMNS
        .iter()
        .map(|(key, _)| *key)
        .find(|key| *key == query.sort)
        .unwrap_or("name");
    let queues = dashboard.queues.tenant(&viewer.tenant);
    let mut listed: Vec<QueueSummary> = Vec::new();
    let mut after: Option<String> = None;
    let mut more = false;
    loop {
        let page = queues.list_queues(prefix, after.as_deref(), 1000).await?;
        listed.extend(page.items);
        match page.after {
            Some(next) if listed.len() < MAX_QUEUES => after = Some(next),
            Some(_) => {
                more = true;
                break;
            }
            None => break,
        }
    }
    let locks = dashboard
        .locks
        .tenant(&viewer.tenant)
        .list("", None, MAX_COUNTED)
        .await?;
    let schedules = dashboard
        .schedules
        .tenant(&viewer.tenant)
        .list(None, MAX_COUNTED)
        .await?;
    sort_queues(&mut listed, sort);

    let total = |f: fn(&QueueSummary) -> u64| listed.iter().map(f).sum::<u64>();
    let counted = |n: usize, more: bool| {
        if more {
            format!("{n}+")
        } else {
            n.to_string()
        }
    };
    let mut main = String::from("<h1>Queues</h1>\n");
    let _ = write!(
        main,
        "<form class=\"filter\" method=\"get\" action=\"/\" role=\"search\">\n\
         <label for=\"prefix\">Queues whose name starts with</label>\n\
         <input id=\"prefix\" name=\"prefix\" value=\"{}\" autocomplete=\"off\">\n\
         <input type=\"hidden\" name=\"sort\" value=\"{sort}\">\n\
         <button type=\"submit\">Filter</button>\n</form>\n",
        esc(prefix)
    );
    let mut region = String::new();
    let _ = write!(
        region,
        "<dl class=\"headline\">\n\
         <div><dt>Ready</dt><dd>{}</dd></div>\n\
         <div><dt>In flight</dt><dd>{}</dd></div>\n\
         <div><dt>Dead</dt><dd>{}</dd></div>\n\
         <div><dt>Locks held</dt><dd>{}</dd></div>\n\
         <div><dt>Schedules</dt><dd>{}</dd></div>\n</dl>\n",
        total(|q| q.stats.ready),
        total(|q| q.stats.in_flight),
        total(|q| q.stats.dead),
        counted(locks.locks.len(), locks.next_after.is_some()),
        counted(schedules.schedules.len(), schedules.next_after.is_some()),
    );
    if listed.is_empty() {
        region.push_str("<p class=\"muted\">No queues");
        if !prefix.is_empty() {
            let _ = write!(region, " whose name starts with “{}”", esc(prefix));
        }
        region.push_str(".</p>\n");
    } else {
        table(&mut region, &listed, prefix, sort, more);
    }
    main.push_str(&live_region(
        "overview",
        &format!("prefix={}&sort={sort}", UrlPart(prefix)),
        &region,
    ));
    Ok(main)
}

/// The table of queues.
fn table(region: &mut String, listed: &[QueueSummary], prefix: &str, sort: &str, more: bool) {
    let now = now_ms();
    let _ = write!(
        region,
        "<div class=\"table-wrap\"><table>\n<caption class=\"muted\">{} queue{}{}, sorted by {}</caption>\n<thead><tr>",
        listed.len(),
        if listed.len() == 1 { "" } else { "s" },
        if more { " (the first ones)" } else { "" },
        COLUMNS.iter().find(|(key, _)| *key == sort).map_or("name", |(_, h)| h).to_lowercase(),
    );
    for (key, heading) in COLUMNS {
        let sorted = if key == sort {
            " aria-sort=\"descending\""
        } else {
            ""
        };
        let _ = write!(
            region,
            "<th scope=\"col\"{sorted}><a href=\"/?prefix={}&amp;sort={key}\">{heading}</a></th>",
            UrlPart(prefix)
        );
    }
    region.push_str("</tr></thead>\n<tbody>\n");
    for queue in listed {
        let stats = &queue.stats;
        let dead = if stats.dead > 0 {
            format!("<td class=\"dead\">{}</td>", stats.dead)
        } else {
            "<td>0</td>".to_owned()
        };
        let oldest = stats
            .oldest_ready_at_ms
            .map_or_else(|| "–".to_owned(), |at| age(now - at));
        let paused = if stats.config.paused {
            "<td class=\"paused\">paused</td>"
        } else {
            "<td class=\"muted\">no</td>"
        };
        let _ = writeln!(
            region,
            "<tr><td><a href=\"/queue?name={}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td>{dead}<td>{}</td><td>{oldest}</td>{paused}<td>{}</td></tr>",
            UrlPart(&queue.queue),
            esc(&queue.queue),
            stats.ready,
            stats.delayed,
            stats.in_flight,
            stats.delivered_5m,
            esc(&limits(&stats.config)),
        );
    }
    region.push_str("</tbody>\n</table></div>\n");
}

/// Sorts by the column `sort`: names ascending, counts and ages largest first.
fn sort_queues(queues: &mut [QueueSummary], sort: &str) {
    let key = |q: &QueueSummary| -> i128 {
        let s = &q.stats;
        match sort {
            "ready" => i128::from(s.ready),
            "delayed" => i128::from(s.delayed),
            "in_flight" => i128::from(s.in_flight),
            "dead" => i128::from(s.dead),
            "delivered" => i128::from(s.delivered_5m),
            // The oldest first: the smallest due time.
            "oldest" => -i128::from(s.oldest_ready_at_ms.unwrap_or(i64::MAX)),
            "paused" => i128::from(s.config.paused),
            "limits" => i128::from(s.config.max_in_flight > 0 || s.config.rate_limit.is_some()),
            _ => 0,
        }
    };
    if sort == "name" {
        queues.sort_by(|a, b| a.queue.cmp(&b.queue));
    } else {
        queues.sort_by(|a, b| key(b).cmp(&key(a)).then_with(|| a.queue.cmp(&b.queue)));
    }
}

/// A queue's caps and rate limits in a few words ("–" for none).
pub(super) fn limits(config: &QueueConfig) -> String {
    let mut parts = Vec::new();
    if config.max_in_flight > 0 {
        parts.push(format!("{} in flight", config.max_in_flight));
    }
    if let Some(rate) = &config.rate_limit {
        parts.push(rate_text(rate));
    }
    if config.group_max_in_flight > 0 {
        parts.push(format!("{} per group", config.group_max_in_flight));
    }
    if let Some(rate) = &config.group_rate_limit {
        parts.push(format!("{} per group", rate_text(rate)));
    }
    if parts.is_empty() {
        "–".to_owned()
    } else {
        parts.join(" · ")
    }
}

fn rate_text(rate: &RateLimit) -> String {
    format!("{}/{}", rate.limit, age(rate.period.as_millis() as i64))
}

/// A span of milliseconds the way a person reads it: `850ms`, `42s`, `7m`, `3h`, `2d`.
pub(super) fn age(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{}s", ms / 1000),
        60_000..3_600_000 => format!("{}m", ms / 60_000),
        3_600_000..86_400_000 => format!("{}h", ms / 3_600_000),
        _ => format!("{}d", ms / 86_400_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_a_person_reads_them() {
        assert_eq!(age(-5), "0ms");
        assert_eq!(age(850), "850ms");
        assert_eq!(age(42_000), "42s");
        assert_eq!(age(7 * 60_000), "7m");
        assert_eq!(age(3 * 3_600_000), "3h");
        assert_eq!(age(2 * 86_400_000), "2d");
    }
}
