//! The web dashboard (`--dashboard-listen`): server-rendered pages over the same stores
//! as the RPCs, under the same tenants and permissions; one small script of our own
//! (`static/live.js`) refreshes each page's live region (`live.rs`).
//! It owns the HTTP side (routes, who is asking, the security headers every answer
//! carries); the numbers come from the stores, never from Redis directly.
//!
//! Who is asking: without `--auth-file`, the tenant `default` (the address is
//! loopback-only, as the gRPC port's, unless `--insecure-no-auth`); with it, a person
//! signed in with a bearer token (`session.rs`), or a script's own
//! `Authorization: Bearer <token>`; either sees only the token's tenant.

// First, so that every page module below has its `html!` macro.
#[macro_use]
mod html;
mod actions;
mod chart;
mod forms;
mod lists;
mod live;
mod overview;
mod queue;
mod session;
mod task;
pub mod tls;
mod wording;
mod workers;

pub use live::Sampler;

use std::sync::Arc;

use axum::{
    extract::{FromRequestParts, Request},
    http::{header, request::Parts, HeaderMap, HeaderValue, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post},
    Router,
};
use tokio::net::TcpListener;

use crate::{
    auth::{Auth, Viewer},
    error::Error,
    lock::LockStore,
    queue::QueueStore,
    redis::Redis,
    schedule::ScheduleStore,
    semaphore::SemaphoreStore,
    shutdown::Shutdown,
};

/// The stores the pages read, and who may read them.
#[derive(Clone)]
pub struct Dashboard {
    /// Queues: the overview's table and its headline numbers.
    pub queues: QueueStore,
    /// Held locks: the headline count and the locks page.
    pub locks: LockStore,
    /// Semaphores, looked up by name on the locks page.
    pub semaphores: SemaphoreStore,
    /// Schedules, for the headline count.
    pub schedules: ScheduleStore,
    /// The bearer tokens (`--auth-file`), re-read on SIGHUP like the gRPC port's.
    pub auth: Auth,
    /// Where sessions live (so that every replica knows them).
    pub redis: Redis,
    /// The last render of each live view, shared by every open tab.
    pub sampler: Arc<Sampler>,
    /// TLS (the gRPC port's certificate and key), if on: pages over HTTPS and the
    /// session cookie `Secure`.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

/// The stylesheet and the one script (`live.js`: the live regions), inside the binary.
const STYLESHEET: &str = include_str!("static/app.css");
const SCRIPT: &str = include_str!("static/live.js");

/// Serves the dashboard on `listener` until shutdown, on the shutdown tracker.
pub fn spawn(listener: TcpListener, dashboard: Dashboard, shutdown: &Shutdown) {
    let router = Router::new()
        .route("/", get(overview::overview))
        .route("/queue", get(queue::queue))
        .route("/task", get(task::task))
        .route("/action", post(actions::action))
        .route("/schedules", get(lists::schedules))
        .route("/locks", get(lists::locks))
        .route("/workers", get(workers::workers))
        .route("/static/app.css", get(stylesheet))
        .route("/static/live.js", get(script))
        .route("/live/{page}", get(live::live))
        .route(
            "/sign-in",
            get(session::sign_in_page).post(session::sign_in),
        )
        .route("/sign-out", post(session::sign_out))
        .layer(middleware::from_fn(security_headers));
    let tls = dashboard.tls.clone();
    let router = router.with_state(Arc::new(dashboard));
    let stop = shutdown.clone();
    // Over TLS, the listener that hands over finished handshakes; else the socket.
    enum Bound {
        Tls(tls::TlsListener),
        Plain(TcpListener),
    }
    let bound = match tls {
        Some(acceptor) => match tls::TlsListener::new(listener, acceptor, shutdown) {
            Ok(tls) => Bound::Tls(tls),
            Err(err) => {
                tracing::error!(cause = %err, "dashboard listener failed");
                return;
            }
        },
        None => Bound::Plain(listener),
    };
    shutdown.spawn(async move {
        let stopped = async move { stop.cancelled().await };
        let served = match bound {
            Bound::Tls(tls) => {
                axum::serve(tls, router)
                    .with_graceful_shutdown(stopped)
                    .await
            }
            Bound::Plain(plain) => {
                axum::serve(plain, router)
                    .with_graceful_shutdown(stopped)
                    .await
            }
        };
        if let Err(err) = served {
            tracing::error!(cause = %err, "dashboard server failed");
        }
    });
}

async fn stylesheet() -> Response {
    asset("text/css; charset=utf-8", STYLESHEET)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

/// The page's policy: this origin's stylesheet and `live.js`, which may fetch only
/// from this origin; no inline script or style, no frames, no form posted elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self'; connect-src 'self'; \
                   style-src 'self'; img-src 'self'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// Every answer: the CSP, no MIME sniffing, no referrer, no framing, and not cached
/// unless the route said otherwise (pages carry task payloads and tenant data).
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

impl Dashboard {
    /// Who is asking: the `Authorization` header's token, else the session's
    /// (UNAUTHENTICATED, a 401 with the sign-in form, when nobody known is).
    async fn viewer(&self, headers: &HeaderMap) -> Result<Viewer, Error> {
        session::viewer(self, headers).await
    }

    /// Whether a page shows the sign-out button: auth is on and the person came with
    /// a session (not a script with its own header).
    fn signed_in(&self, headers: &HeaderMap) -> bool {
        self.auth.is_on() && !headers.contains_key(header::AUTHORIZATION)
    }
}

/// Who is asking for a page, resolved before its handler runs: the viewer (from the
/// request's own token or its session) and whether the page shows the sign-out
/// button. A request from nobody known is answered with the sign-in form (401).
pub(super) struct Asking {
    pub viewer: Viewer,
    signed_in: bool,
}

impl FromRequestParts<Arc<Dashboard>> for Asking {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        dashboard: &Arc<Dashboard>,
    ) -> Result<Self, Response> {
        let viewer = dashboard
            .viewer(&parts.headers)
            .await
            .map_err(|err| failure(&err))?;
        Ok(Self {
            viewer,
            signed_in: dashboard.signed_in(&parts.headers),
        })
    }
}

impl Asking {
    /// The page titled `title` around the `main` its handler rendered for this viewer
    /// (an error as its own page, with its status).
    fn page(&self, title: &str, main: Result<html::Html, Error>) -> Response {
        match main {
            Ok(main) => axum::response::Html(
                html::page(title, self.viewer.tenant.as_str(), self.signed_in, &main).into_string(),
            )
            .into_response(),
            Err(err) => failure(&err),
        }
    }
}

/// An error as a small page with its HTTP status.
fn failure(err: &Error) -> Response {
    let status = match err {
        Error::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        Error::PermissionDenied(_) => StatusCode::FORBIDDEN,
        Error::InvalidArgument { .. } => StatusCode::BAD_REQUEST,
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::Unavailable(_) | Error::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let body = if status == StatusCode::UNAUTHORIZED {
        session::sign_in_form(Some(&err.to_string()))
    } else {
        let mut main = html::Html::new();
        html!(main; "<h1>", status.as_u16(), "</h1>\n<p>", err, "</p>\n");
        html::page("error", "", false, &main)
    };
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body.into_string(),
    )
        .into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"turnstile\""),
        );
    }
    response
}
