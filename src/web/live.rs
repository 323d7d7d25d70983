//! Live pages: each page marks one region (`html::live_region`) that `static/live.js`
//! fetches again every [`LIVE_PERIOD`] from `/live/<page>?<the page's query>` and puts
//! in place. The region is cut from the page as the page renders it, so the two never
//! differ. Every tab of one view shares one render: [`Sampler`] keeps the last one per
//! tenant, permission and view for a period and renders it once when it is older
//! (callers that arrive meanwhile wait for that render), so Redis sees the same load
//! with twenty tabs open as with one.

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    extract::{Path, Query, State},
    http::{header, Uri},
    response::{IntoResponse, Response},
};

use super::{failure, html, lists, overview, queue, workers, Asking, Dashboard};
use crate::{auth::Viewer, error::Result};

/// How often an open page refreshes its live region, and how long one render serves
/// every tab.
pub const LIVE_PERIOD: Duration = Duration::from_secs(2);
/// A view nobody asked for in this long is forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(60);

type Slot = Arc<tokio::sync::Mutex<Option<(Instant, String)>>>;

/// The last render of each view, shared by every tab that shows it.
#[derive(Default)]
pub struct Sampler {
    /// View key -> its last render (and when), behind a lock that makes one caller
    /// render while the others wait for it.
    views: Mutex<HashMap<String, (Instant, Slot)>>,
}

impl Sampler {
    /// The render of `key` no older than [`LIVE_PERIOD`], rendering it if needed.
    async fn get<Fut>(&self, key: String, render: impl FnOnce() -> Fut) -> Result<String>
    where
        Fut: Future<Output = Result<String>>,
    {
        let slot = {
            let mut views = self.views.lock().expect("sampler lock");
            let now = Instant::now();
            if views.len() > 256 {
                views.retain(|_, (used, _)| now.duration_since(*used) < FORGET_AFTER);
            }
            let entry = views.entry(key).or_insert_with(|| (now, Slot::default()));
            entry.0 = now;
            entry.1.clone()
        };
        let mut last = slot.lock().await;
        if let Some((at, text)) = last.as_ref() {
            if at.elapsed() < LIVE_PERIOD {
                return Ok(text.clone());
            }
        }
        let text = render().await?;
        *last = Some((Instant::now(), text.clone()));
        Ok(text)
    }
}

/// `GET /live/<page>?…`: the page's live region, as HTML.
pub(super) async fn live(
    State(dashboard): State<Arc<Dashboard>>,
    Asking { viewer, .. }: Asking,
    Path(page): Path<String>,
    uri: Uri,
) -> Response {
    let key = format!(
        "{}\0{}\0{page}\0{}",
        viewer.tenant.as_str(),
        viewer.admin,
        uri.query().unwrap_or("")
    );
    let rendered = dashboard
        .sampler
        .get(key, || render(&dashboard, viewer, &page, &uri))
        .await;
    match rendered {
        Ok(main) => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            html::live_part(&main).to_owned(),
        )
            .into_response(),
        Err(err) => failure(&err),
    }
}

/// The whole page `page` as its own route renders it.
async fn render(dashboard: &Dashboard, viewer: Viewer, page: &str, uri: &Uri) -> Result<String> {
    let bad_query = |_| crate::error::Error::invalid("query", "does not parse");
    let main = match page {
        "overview" => {
            let Query(query) = Query::try_from_uri(uri).map_err(bad_query)?;
            overview::render(dashboard, viewer, &query).await
        }
        "queue" => {
            let Query(query) = Query::try_from_uri(uri).map_err(bad_query)?;
            queue::render(dashboard, viewer, &query).await
        }
        "locks" => {
            let Query(query) = Query::try_from_uri(uri).map_err(bad_query)?;
            lists::render_locks(dashboard, viewer, &query).await
        }
        "schedules" => lists::render_schedules(dashboard, viewer).await,
        "workers" => workers::render(dashboard, viewer).await,
        _ => Err(crate::error::Error::NotFound(format!(
            "no live page {page:?}"
        ))),
    };
    main.map(html::Html::into_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn tabs_of_one_view_share_a_render_within_the_period() {
        let sampler = Sampler::default();
        let renders = AtomicUsize::new(0);
        let render = || async {
            renders.fetch_add(1, Ordering::SeqCst);
            Ok("x".to_owned())
        };
        for _ in 0..20 {
            assert_eq!(sampler.get("a".into(), render).await.unwrap(), "x");
        }
        assert_eq!(renders.load(Ordering::SeqCst), 1);
        sampler.get("b".into(), render).await.unwrap();
        assert_eq!(renders.load(Ordering::SeqCst), 2, "another view renders");
    }
}
