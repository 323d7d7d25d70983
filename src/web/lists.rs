//! The schedules page (`/schedules`: every schedule of the tenant with its spec, next
//! and last fire, paused and overlap) and the locks page (`/locks`: the held locks with
//! owner, fencing token and lease end, a page at a time; and one semaphore by name,
//! with its holders and line). Read only, like every page for now.

use std::sync::Arc;

use axum::{
    extract::{Query, State},
    response::Response,
};
use serde::Deserialize;

use super::{
    forms,
    html::{live_region, Html, Url},
    wording::instant,
    Asking, Dashboard,
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

pub(super) async fn schedules(State(dashboard): State<Arc<Dashboard>>, asking: Asking) -> Response {
    let main = render_schedules(&dashboard, asking.viewer.clone()).await;
    asking.page("Schedules", main)
}

pub(super) async fn render_schedules(dashboard: &Dashboard, viewer: Viewer) -> Result<Html> {
    let listed = dashboard
        .schedules
        .tenant(&viewer.tenant)
        .list(None, MAX_SCHEDULES)
        .await?;
    let mut region = Html::new();
    if listed.schedules.is_empty() {
        region.raw("<p class=\"muted\">No schedules.</p>\n");
    } else {
        html!(region;
            "<div class=\"table-wrap\"><table>\n<caption class=\"muted\">",
            listed.schedules.len(),
            if listed.schedules.len() == 1 { " schedule" } else { " schedules" },
            if listed.next_after.is_some() { " (the first ones)" } else { "" },
            "</caption>\n<thead><tr><th scope=\"col\">Schedule</th><th scope=\"col\">Queue</th>\
             <th scope=\"col\">When</th><th scope=\"col\">Next fire</th>\
             <th scope=\"col\">Last fire</th><th scope=\"col\">Paused</th>\
             <th scope=\"col\">Overlap</th>"
        );
        if viewer.admin {
            region.raw("<th scope=\"col\">Action</th>");
        }
        region.raw("</tr></thead>\n<tbody>\n");
        for view in &listed.schedules {
            let schedule = &view.schedule;
            let when = match &schedule.spec {
                Spec::Cron { expr, zone } if zone.is_empty() => format!("cron {expr} UTC"),
                Spec::Cron { expr, zone } => format!("cron {expr} {zone}"),
                Spec::Every(period) => format!("every {}s", period.as_secs_f64()),
            };
            let overlap = match schedule.overlap {
                Overlap::Allow => "allow",
                Overlap::Skip => "skip",
            };
            html!(region;
                "<tr><td>", &schedule.name, "</td><td>", &schedule.queue, "</td><td>", &when,
                "</td><td>", instant(view.next_fire_ms), "</td><td>", instant(view.last_fire_ms),
                "</td>"
            );
            if schedule.paused {
                region.raw("<td class=\"paused\">paused</td>");
            } else {
                region.raw("<td class=\"muted\">no</td>");
            }
            html!(region; "<td>", overlap, "</td>");
            if viewer.admin {
                html!(region; "<td>", forms::schedule_controls(&schedule.name, schedule.paused), "</td>");
            }
            region.raw("</tr>\n");
        }
        region.raw("</tbody>\n</table></div>\n");
    }
    let mut main = Html::new();
    html!(main; "<h1>Schedules</h1>\n", live_region("schedules", &Html::new(), &region));
    Ok(main)
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
    asking: Asking,
    Query(query): Query<LocksQuery>,
) -> Response {
    let main = render_locks(&dashboard, asking.viewer.clone(), &query).await;
    asking.page("Locks", main)
}

pub(super) async fn render_locks(
    dashboard: &Dashboard,
    viewer: Viewer,
    query: &LocksQuery,
) -> Result<Html> {
    let tenant = &viewer.tenant;
    let after = validate::optional_name("after", &query.after)?;
    let semaphore = validate::optional_name("semaphore", &query.semaphore)?;
    let page = dashboard
        .locks
        .tenant(tenant)
        .list("", Some(after).filter(|a| !a.is_empty()), LOCKS_PER_PAGE)
        .await?;
    let mut region = Html::new();
    if page.locks.is_empty() {
        region.raw("<p class=\"muted\">No lock is held.</p>\n");
    } else {
        region.raw(
            "<div class=\"table-wrap\"><table>\n<thead><tr><th scope=\"col\">Lock</th>\
             <th scope=\"col\">Owner</th><th scope=\"col\">Fencing token</th>\
             <th scope=\"col\">Lease ends</th></tr></thead>\n<tbody>\n",
        );
        for (name, holder) in &page.locks {
            html!(region;
                "<tr><td>", name, "</td><td>", &holder.owner, "</td><td>", holder.fencing_token,
                "</td><td>", instant(Some(holder.expires_at_ms)), "</td></tr>\n"
            );
        }
        region.raw("</tbody>\n</table></div>\n");
    }
    if let Some(next) = &page.next_after {
        html!(region; "<p><a href=\"/locks?after=", Url(next), "\">Next page</a></p>\n");
    }
    let mut query = Html::new();
    html!(query; "after=", Url(after));
    let mut main = Html::new();
    html!(main;
        "<h1>Held locks</h1>\n",
        live_region("locks", &query, &region),
        "<h2>A semaphore</h2>\n<form class=\"filter\" method=\"get\" action=\"/locks\">\n\
         <label for=\"semaphore\">Semaphore name</label>\n\
         <input id=\"semaphore\" name=\"semaphore\" value=\"",
        semaphore,
        "\" autocomplete=\"off\">\n<button type=\"submit\">Show</button>\n</form>\n"
    );
    if !semaphore.is_empty() {
        let seen = dashboard
            .semaphores
            .tenant(tenant)
            .describe(semaphore)
            .await?;
        html!(main;
            "<p><strong>", semaphore, "</strong>: ", seen.in_use, " of ", seen.limit,
            " permits in use, ", seen.waiting, " waiting in line.</p>\n"
        );
        if !seen.holders.is_empty() {
            main.raw(
                "<div class=\"table-wrap\"><table>\n<thead><tr><th scope=\"col\">Owner</th>\
                 <th scope=\"col\">Permits</th><th scope=\"col\">Fencing token</th>\
                 <th scope=\"col\">Lease ends</th></tr></thead>\n<tbody>\n",
            );
            for holder in &seen.holders {
                html!(main;
                    "<tr><td>", &holder.owner, "</td><td>", holder.permits, "</td><td>",
                    holder.fencing_token, "</td><td>", instant(Some(holder.expires_at_ms)),
                    "</td></tr>\n"
                );
            }
            main.raw("</tbody>\n</table></div>\n");
        }
    }
    Ok(main)
}
