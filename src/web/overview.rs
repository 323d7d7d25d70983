//! The overview page (`/`): every queue of the tenant with its depths by state, its
//! deliveries in the last five minutes, the age of its oldest READY task, paused and limits; filtered by a name prefix and
//! sorted by any column (server-side, so it needs no script); and headline numbers:
//! tasks in flight, READY and DEAD, locks held, schedules.

use std::sync::Arc;

use axum::{
    extract::{Query, State},
    response::Response,
};
use serde::Deserialize;

use super::{
    html::{live_region, Html, Url},
    wording::{age, limits},
    Asking, Dashboard,
};
use crate::{
    auth::Viewer, error::Result, queue::QueueSummary, redis::TenantScoped, time::now_ms, validate,
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
    asking: Asking,
    Query(query): Query<OverviewQuery>,
) -> Response {
    let main = render(&dashboard, asking.viewer.clone(), &query).await;
    asking.page("Queues", main)
}

pub(super) async fn render(
    dashboard: &Dashboard,
    viewer: Viewer,
    query: &OverviewQuery,
) -> Result<Html> {
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
    let mut main = Html::new();
    html!(main;
        "<h1>Queues</h1>\n<form class=\"filter\" method=\"get\" action=\"/\" role=\"search\">\n\
         <label for=\"prefix\">Queues whose name starts with</label>\n\
         <input id=\"prefix\" name=\"prefix\" value=\"",
        prefix,
        "\" autocomplete=\"off\">\n<input type=\"hidden\" name=\"sort\" value=\"",
        sort,
        "\">\n<button type=\"submit\">Filter</button>\n</form>\n"
    );
    let mut region = Html::new();
    html!(region;
        "<dl class=\"headline\">\n<div><dt>Ready</dt><dd>", total(|q| q.stats.ready),
        "</dd></div>\n<div><dt>In flight</dt><dd>", total(|q| q.stats.in_flight),
        "</dd></div>\n<div><dt>Dead</dt><dd>", total(|q| q.stats.dead),
        "</dd></div>\n<div><dt>Locks held</dt><dd>",
        counted(locks.locks.len(), locks.next_after.is_some()),
        "</dd></div>\n<div><dt>Schedules</dt><dd>",
        counted(schedules.schedules.len(), schedules.next_after.is_some()),
        "</dd></div>\n</dl>\n"
    );
    if listed.is_empty() {
        region.raw("<p class=\"muted\">No queues");
        if !prefix.is_empty() {
            html!(region; " whose name starts with “", prefix, "”");
        }
        region.raw(".</p>\n");
    } else {
        table(&mut region, &listed, prefix, sort, more);
    }
    let mut query = Html::new();
    html!(query; "prefix=", Url(prefix), "&amp;sort=", Url(sort));
    html!(main; live_region("overview", &query, &region));
    Ok(main)
}

/// The table of queues.
fn table(region: &mut Html, listed: &[QueueSummary], prefix: &str, sort: &str, more: bool) {
    let now = now_ms();
    let sorted_by = COLUMNS
        .iter()
        .find(|(key, _)| *key == sort)
        .map_or("name", |(_, heading)| heading)
        .to_lowercase();
    html!(region;
        "<div class=\"table-wrap\"><table>\n<caption class=\"muted\">",
        listed.len(),
        if listed.len() == 1 { " queue" } else { " queues" },
        if more { " (the first ones)" } else { "" },
        ", sorted by ", sorted_by, "</caption>\n<thead><tr>"
    );
    for (key, heading) in COLUMNS {
        region.raw("<th scope=\"col\"");
        if key == sort {
            region.raw(" aria-sort=\"descending\"");
        }
        html!(region;
            "><a href=\"/?prefix=", Url(prefix), "&amp;sort=", Url(key), "\">", heading, "</a></th>"
        );
    }
    region.raw("</tr></thead>\n<tbody>\n");
    for queue in listed {
        let stats = &queue.stats;
        let oldest = stats
            .oldest_ready_at_ms
            .map_or_else(|| "–".to_owned(), |at| age(now - at));
        html!(region;
            "<tr><td><a href=\"/queue?name=", Url(&queue.queue), "\">", &queue.queue,
            "</a></td><td>", stats.ready, "</td><td>", stats.delayed, "</td><td>",
            stats.in_flight, "</td>"
        );
        if stats.dead > 0 {
            html!(region; "<td class=\"dead\">", stats.dead, "</td>");
        } else {
            region.raw("<td>0</td>");
        }
        html!(region; "<td>", stats.delivered_5m, "</td><td>", oldest, "</td>");
        if stats.config.paused {
            region.raw("<td class=\"paused\">paused</td>");
        } else {
            region.raw("<td class=\"muted\">no</td>");
        }
        html!(region; "<td>", limits(&stats.config), "</td></tr>\n");
    }
    region.raw("</tbody>\n</table></div>\n");
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
