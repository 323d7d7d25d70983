//! The Workers page (`/workers`): the tenant's open Subscribe streams over every
//! replica, each with its queue, worker_id, the replica it is open on, its deliveries
//! in flight and since when it is open, read through the queue store
//! (`QueueStore::open_streams`), and redrawn live.

use std::{fmt::Write, sync::Arc};

use axum::{extract::State, http::HeaderMap, response::Response};

use super::{
    html::{esc, instant, live_region, UrlPart},
    Dashboard,
};
use crate::{auth::Viewer, error::Result, queue::STREAMS_SHOWN, redis::TenantScoped};

pub(super) async fn workers(
    State(dashboard): State<Arc<Dashboard>>,
    headers: HeaderMap,
) -> Response {
    dashboard
        .respond(&headers, "Workers", |viewer| render(&dashboard, viewer))
        .await
}

pub(super) async fn render(dashboard: &Dashboard, viewer: Viewer) -> Result<String> {
    let streams = dashboard
        .queues
        .tenant(&viewer.tenant)
        .open_streams()
        .await?;
    let mut main = String::new();
    if streams.is_empty() {
        main.push_str("<p class=\"muted\">No worker is subscribed.</p>\n");
    } else {
        let _ = write!(
            main,
            "<div class=\"table-wrap\"><table>\n<caption class=\"muted\">{} open stream{}{}</caption>\n\
             <thead><tr><th scope=\"col\">Queue</th><th scope=\"col\">Worker</th>\
             <th scope=\"col\">Replica</th><th scope=\"col\">In flight</th>\
             <th scope=\"col\">Since</th></tr></thead>\n<tbody>\n",
            streams.len(),
            if streams.len() == 1 { "" } else { "s" },
            if streams.len() == STREAMS_SHOWN {
                " (the first ones)"
            } else {
                ""
            },
        );
        for stream in &streams {
            let worker = if stream.worker_id.is_empty() {
                "<span class=\"muted\">(no worker_id)</span>".to_owned()
            } else {
                esc(&stream.worker_id).to_string()
            };
            let _ = writeln!(
                main,
                "<tr><td><a href=\"/queue?name={}\">{}</a></td><td>{worker}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                UrlPart(&stream.queue),
                esc(&stream.queue),
                esc(&stream.replica),
                stream.in_flight,
                instant(Some(stream.since_ms)),
            );
        }
        main.push_str("</tbody>\n</table></div>\n");
    }
    Ok(format!(
        "<h1>Workers</h1>\n<p class=\"muted\">Open <code>Subscribe</code> streams, on every replica.</p>\n{}",
        live_region("workers", "", &main)
    ))
}
