//! The schedules page (`/schedules`: every schedule of the tenant with its spec, next
//! and last fire, paused and overlap) and the locks page (`/locks`: the held locks with
//! owner, fencing token and lease end, a page at a time; and one semaphore by name,
//! with its holders and line). Read only, like every page for now.

use std::{fmt::Write, sync::Arc};

use axum::{
    extract::{Query, State},
    http::HeaderMap,
    response::Response,
};
use serde::Deserialize;

use super::{
    actions,
    html::{esc, instant, live_region, UrlPart},
    Dashboard,
};
use crate::{
    auth::Viewer,
    error::Result,
    redis::TenantScoped,
    schedule::{Overlap, Spec},
    validate,
};

/// Held locks per page.
const LOCKS_PER_PAGE: usize = 100;
/// Schedules the page lists (then it says so).
const MAX_SCHEDULES: usize = 1000;

pub(super) async fn schedules(
    State(dashboard): State<Arc<Dashboard>>,
    headers: HeaderMap,
) -> Response {
    dashboard
        .respond(&headers, "Schedules", |viewer| {
            render_schedules(&dashboard, viewer)
        })
        .await
}

pub(super) async fn render_schedules(dashboard: &Dashboard, viewer: Viewer) -> Result<String> {
    let listed = dashboard
        .schedules
        .tenant(&viewer.tenant)
        .list(None, MAX_SCHEDULES)
        .await?;
    let mut main = String::new();
    if listed.schedules.is_empty() {
        main.push_str("<p class=\"muted\">No schedules.</p>\n");
    } else {
        let _ = write!(
            main,
            "<div class=\"table-wrap\"><table>\n<caption class=\"muted\">{} schedule{}{}</caption>\n\
             <thead><tr><th scope=\"col\">Schedule</th><th scope=\"col\">Queue</th>\
             <th scope=\"col\">When</th><th scope=\"col\">Next fire</th>\
             <th scope=\"col\">Last fire</th><th scope=\"col\">Paused</th>\
             <th scope=\"col\">Overlap</th>{}</tr></thead>\n<tbody>\n",
            listed.schedules.len(),
            if listed.schedules.len() == 1 { "" } else { "s" },
            if listed.next_after.is_some() {
                " (the first ones)"
            } else {
                ""
            },
            if viewer.admin {
                "<th scope=\"col\">Action</th>"
            } else {
                ""
            },
        );
        for view in &listed.schedules {
            let schedule = &view.schedule;
            let when = match &schedule.spec {
                Spec::Cron { expr, zone } if zone.is_empty() => format!("cron {expr} UTC"),
                Spec::Cron { expr, zone } => format!("cron {expr} {zone}"),
                Spec::Every(period) => format!("every {}s", period.as_secs_f64()),
            };
            let paused = if schedule.paused {
                "<td class=\"paused\">paused</td>"
            } else {
                "<td class=\"muted\">no</td>"
            };
            let control = if viewer.admin {
                format!(
                    "<td>{}</td>",
                    actions::schedule_controls(&schedule.name, schedule.paused)
                )
            } else {
                String::new()
            };
            let overlap = match schedule.overlap {
                Overlap::Allow => "allow",
                Overlap::Skip => "skip",
            };
            let _ = writeln!(
                main,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>{paused}<td>{overlap}</td>{control}</tr>",
                esc(&schedule.name),
                esc(&schedule.queue),
                esc(&when),
                instant(view.next_fire_ms),
                instant(view.last_fire_ms),
            );
        }
        main.push_str("</tbody>\n</table></div>\n");
    }
    Ok(format!(
        "<h1>Schedules</h1>\n{}",
        live_region("schedules", "", &main)
    ))
}

/// `?after=…&semaphore=…`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct LocksQuery {
    #[serde(default)]
    after: String,
    #[serde(default)]
    semaphore: String,
}

pub(super) async fn locks(
    State(dashboard): State<Arc<Dashboard>>,
    headers: HeaderMap,
    Query(query): Query<LocksQuery>,
) -> Response {
    dashboard
        .respond(&headers, "Locks", |viewer| {
            render_locks(&dashboard, viewer, &query)
        })
        .await
}

pub(super) async fn render_locks(
    dashboard: &Dashboard,
    viewer: Viewer,
    query: &LocksQuery,
) -> Result<String> {
    let tenant = &viewer.tenant;
    let after = validate::optional_name("after", &query.after)?;
    let semaphore = validate::optional_name("semaphore", &query.semaphore)?;
    let page = dashboard
        .locks
        .tenant(tenant)
        .list("", Some(after).filter(|a| !a.is_empty()), LOCKS_PER_PAGE)
        .await?;
    let mut main = String::new();
    if page.locks.is_empty() {
        main.push_str("<p class=\"muted\">No lock is held.</p>\n");
    } else {
        main.push_str(
            "<div class=\"table-wrap\"><table>\n<thead><tr><th scope=\"col\">Lock</th>\
             <th scope=\"col\">Owner</th><th scope=\"col\">Fencing token</th>\
             <th scope=\"col\">Lease ends</th></tr></thead>\n<tbody>\n",
        );
        for (name, holder) in &page.locks {
            let _ = writeln!(
                main,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(name),
                esc(&holder.owner),
                holder.fencing_token,
                instant(Some(holder.expires_at_ms)),
            );
        }
        main.push_str("</tbody>\n</table></div>\n");
    }
    if let Some(next) = &page.next_after {
        let _ = writeln!(
            main,
            "<p><a href=\"/locks?after={}\">Next page</a></p>",
            UrlPart(next)
        );
    }
    let mut main = format!(
        "<h1>Held locks</h1>\n{}",
        live_region("locks", &format!("after={}", UrlPart(after)), &main)
    );
    let _ = write!(
        main,
        "<h2>A semaphore</h2>\n<form class=\"filter\" method=\"get\" action=\"/locks\">\n\
         <label for=\"semaphore\">Semaphore name</label>\n\
         <input id=\"semaphore\" name=\"semaphore\" value=\"{}\" autocomplete=\"off\">\n\
         <button type=\"submit\">Show</button>\n</form>\n",
        esc(semaphore)
    );
    if !semaphore.is_empty() {
        let seen = dashboard
            .semaphores
            .tenant(tenant)
            .describe(semaphore)
            .await?;
        let _ = writeln!(
            main,
            "<p><strong>{}</strong>: {} of {} permits in use, {} waiting in line.</p>",
            esc(semaphore),
            seen.in_use,
            seen.limit,
            seen.waiting
        );
        if !seen.holders.is_empty() {
            main.push_str(
                "<div class=\"table-wrap\"><table>\n<thead><tr><th scope=\"col\">Owner</th>\
                 <th scope=\"col\">Permits</th><th scope=\"col\">Fencing token</th>\
                 <th scope=\"col\">Lease ends</th></tr></thead>\n<tbody>\n",
            );
            for holder in &seen.holders {
                let _ = writeln!(
                    main,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&holder.owner),
                    holder.permits,
                    holder.fencing_token,
                    instant(Some(holder.expires_at_ms)),
                );
            }
            main.push_str("</tbody>\n</table></div>\n");
        }
    }
    Ok(main)
}
