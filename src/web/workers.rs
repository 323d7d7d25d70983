//! The Workers page (`/workers`): the tenant's open Subscribe streams over every
//! replica, each with its queue, worker_id, the replica it is open on, its deliveries
//! in flight and since when it is open, read through the queue store
//! (`QueueStore::open_streams`), and redrawn live.

use std::sync::Arc;

use axum::{extract::State, response::Response};

use super::{
    html::{live_region, Html, Url},
    wording::instant,
    Asking, Dashboard,
};
use crate::{auth::Viewer, error::Result, queue::STREAMS_SHOWN, redis::TenantScoped};

pub(super) async fn workers(State(dashboard): State<Arc<Dashboard>>, asking: Asking) -> Response {
    let main = render(&dashboard, asking.viewer.clone()).await;
    asking.page("Workers", main)
}

pub(super) async fn render(dashboard: &Dashboard, viewer: Viewer) -> Result<Html> {
    let streams = dashboard
        .queues
        .tenant(&viewer.tenant)
        .open_streams()
        .await?;
    let mut region = Html::new();
    if streams.is_empty() {
        region.raw("<p class=\"muted\">No worker is subscribed.</p>\n");
    } else {
        html!(region;
            "<div class=\"table-wrap\"><table>\n<caption class=\"muted\">",
            streams.len(),
            if streams.len() == 1 { " open stream" } else { " open streams" },
            if streams.len() == STREAMS_SHOWN { " (the first ones)" } else { "" },
            "</caption>\n<thead><tr><th scope=\"col\">Queue</th><th scope=\"col\">Worker</th>\
             <th scope=\"col\">Replica</th><th scope=\"col\">In flight</th>\
             <th scope=\"col\">Since</th></tr></thead>\n<tbody>\n"
        );
        for stream in &streams {
            html!(region;
                "<tr><td><a href=\"/queue?name=", Url(&stream.queue), "\">", &stream.queue,
                "</a></td><td>"
            );
            if stream.worker_id.is_empty() {
                region.raw("<span class=\"muted\">(no worker_id)</span>");
            } else {
                region.text(&stream.worker_id);
            }
            html!(region;
                "</td><td>", &stream.replica, "</td><td>", stream.in_flight, "</td><td>",
                instant(Some(stream.since_ms)), "</td></tr>\n"
            );
        }
        region.raw("</tbody>\n</table></div>\n");
    }
    let mut main = Html::new();
    html!(main;
        "<h1>Workers</h1>\n<p class=\"muted\">Open <code>Subscribe</code> streams, on every replica.</p>\n",
        live_region("workers", &Html::new(), &region)
    );
    Ok(main)
}
