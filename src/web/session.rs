//! Dashboard sessions and the sign-in page. A person signs in with a bearer token; the
//! server keeps, in Redis (so any replica knows the session), only the token's SHA-256
//! under a random session id, and the browser keeps the id in a cookie (`HttpOnly`,
//! `SameSite=Strict`, `Path=/`). Each request looks the hash up in the auth policy in
//! force, so a token removed on SIGHUP ends its sessions at their next request.
//! State-changing requests (sign-in, sign-out, later the actions) must come from this
//! origin ([`same_origin`]) unless they carry their own `Authorization` header.

use std::sync::Arc;

use axum::{
    extract::{Form, FromRequestParts, State},
    http::{header, request::Parts, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use serde::Deserialize;

use super::{failure, html, html::Html, Dashboard};
use crate::{
    auth::{self, Viewer},
    error::{Error, Result},
    token::new_token,
};

/// The session cookie's name.
pub const COOKIE: &str = "turnstile_session";
/// How long a session lasts (it does not outlive its token either).
const SESSION_SECONDS: u64 = 12 * 3600;

/// Who is asking: the `Authorization` header's token, else the session cookie's.
pub(super) async fn viewer(dashboard: &Dashboard, headers: &HeaderMap) -> Result<Viewer> {
    if let Some(authorization) = headers.get(header::AUTHORIZATION) {
        return dashboard.auth.viewer(Some(authorization.as_bytes()));
    }
    if !dashboard.auth.is_on() {
        return dashboard.auth.viewer(None);
    }
    let Some(id) = cookie(headers, COOKIE) else {
        return Err(Error::Unauthenticated("sign in with a bearer token".into()));
    };
    let stored: Option<String> = dashboard
        .redis
        .query(redis::cmd("GET").arg(dashboard.redis.keys.session(id)))
        .await?;
    let hash = stored
        .as_deref()
        .and_then(parse_hex)
        .ok_or_else(|| Error::Unauthenticated("the session ended; sign in again".into()))?;
    dashboard.auth.viewer_of(&hash)
}

/// `GET /sign-in`: the form (with auth off there is nothing to sign in to).
pub(super) async fn sign_in_page(State(dashboard): State<Arc<Dashboard>>) -> Response {
    if !dashboard.auth.is_on() {
        return see_other("/");
    }
    axum::response::Html(sign_in_form(None).into_string()).into_response()
}

/// The sign-in form, with what went wrong last time.
pub(super) fn sign_in_form(problem: Option<&str>) -> Html {
    let mut main = Html::new();
    main.raw("<h1>Sign in</h1>\n");
    if let Some(why) = problem {
        html!(main; "<p class=\"problem\" role=\"alert\">", why, "</p>\n");
    }
    main.raw(
        "<form method=\"post\" action=\"/sign-in\" class=\"sign-in\">\n\
         <label for=\"token\">Bearer token</label>\n\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" required autofocus>\n\
         <button type=\"submit\">Sign in</button>\n</form>\n\
         <p class=\"muted\">The token of the server's auth file; you will see its tenant only.</p>\n",
    );
    html::page("Sign in", "", false, &main)
}

#[derive(Deserialize)]
pub(super) struct SignIn {
    token: String,
}

/// `POST /sign-in`: a known token starts a session; anything else shows the form again.
pub(super) async fn sign_in(
    State(dashboard): State<Arc<Dashboard>>,
    _: SameOrigin,
    Form(form): Form<SignIn>,
) -> Response {
    let token = form.token.trim();
    if dashboard
        .auth
        .viewer(Some(format!("Bearer {token}").as_bytes()))
        .is_err()
        || token.is_empty()
    {
        return (
            StatusCode::UNAUTHORIZED,
            axum::response::Html(
                sign_in_form(Some("That token is not in the auth file.")).into_string(),
            ),
        )
            .into_response();
    }
    let id = new_token();
    let hash = hex(&auth::sha256(token));
    let stored: Result<()> = dashboard
        .redis
        .query(
            redis::cmd("SET")
                .arg(dashboard.redis.keys.session(&id))
                .arg(hash)
                .arg("EX")
                .arg(SESSION_SECONDS),
        )
        .await;
    if let Err(err) = stored {
        return failure(&err);
    }
    let mut response = see_other("/");
    set_cookie(
        &mut response,
        &format!("{COOKIE}={id}; Max-Age={SESSION_SECONDS}"),
        dashboard.tls.is_some(),
    );
    response
}

/// `POST /sign-out`: ends the session (in Redis, so on every replica) and the cookie.
pub(super) async fn sign_out(
    State(dashboard): State<Arc<Dashboard>>,
    _: SameOrigin,
    headers: HeaderMap,
) -> Response {
    if let Some(id) = cookie(&headers, COOKIE) {
        let ended: Result<i64> = dashboard
            .redis
            .query(redis::cmd("DEL").arg(dashboard.redis.keys.session(id)))
            .await;
        if let Err(err) = ended {
            return failure(&err);
        }
    }
    let mut response = see_other("/sign-in");
    set_cookie(
        &mut response,
        &format!("{COOKIE}=; Max-Age=0"),
        dashboard.tls.is_some(),
    );
    response
}

/// A state-changing request must come from a page of this origin: the browser says so
/// in `Sec-Fetch-Site`, or its `Origin` names the `Host` it was sent to. A request
/// with its own `Authorization` header (a script) needs neither: a browser never adds
/// that header to a cross-site request by itself.
pub(super) fn same_origin(headers: &HeaderMap) -> Result<()> {
    if headers.contains_key(header::AUTHORIZATION) {
        return Ok(());
    }
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        return match site {
            "same-origin" | "none" => Ok(()),
            _ => Err(cross_site()),
        };
    }
    match (text("origin"), text("host")) {
        (Some(origin), Some(host))
            if origin
                .split_once("://")
                .is_some_and(|(_, authority)| authority == host) =>
        {
            Ok(())
        }
        _ => Err(cross_site()),
    }
}

/// A request that passed [`same_origin`], checked before anything else about it
/// (refused with 403 otherwise): how a state-changing handler asks for the check.
pub(super) struct SameOrigin;

impl<S: Send + Sync> FromRequestParts<S> for SameOrigin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        same_origin(&parts.headers).map_err(|err| failure(&err))?;
        Ok(Self)
    }
}

fn cross_site() -> Error {
    Error::PermissionDenied("refused: a form of this dashboard must send it (same origin)".into())
}

/// The value of the cookie `name`, if the request carries it.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty())
}

fn see_other(to: &'static str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
}

/// Sets the session cookie `pair` (with its Max-Age): never readable by a script,
/// never sent by another site's request, and over TLS never sent without it.
fn set_cookie(response: &mut Response, pair: &str, secure: bool) {
    let secure = if secure { "; Secure" } else { "" };
    let value = format!("{pair}; Path=/; HttpOnly; SameSite=Strict{secure}");
    if let Ok(value) = HeaderValue::from_str(&value) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(text: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if text.len() != 64 {
        return None;
    }
    for (at, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(at * 2..at * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_forms_of_this_origin_or_scripts_with_a_token_may_change_state() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, HeaderValue::from_static(value));
            }
            map
        };
        assert!(same_origin(&headers(&[("sec-fetch-site", "same-origin")])).is_ok());
        assert!(same_origin(&headers(&[("sec-fetch-site", "cross-site")])).is_err());
        assert!(same_origin(&headers(&[("sec-fetch-site", "same-site")])).is_err());
        assert!(same_origin(&headers(&[
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080")
        ]))
        .is_ok());
        assert!(same_origin(&headers(&[
            ("origin", "http://evil.example"),
            ("host", "127.0.0.1:8080")
        ]))
        .is_err());
        assert!(same_origin(&headers(&[("host", "127.0.0.1:8080")])).is_err());
        assert!(same_origin(&headers(&[("authorization", "Bearer t")])).is_ok());
    }

    #[test]
    fn the_session_cookie_is_found_among_others_and_hashes_round_trip() {
        let mut map = HeaderMap::new();
        map.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; turnstile_session=abc; b=2"),
        );
        assert_eq!(cookie(&map, COOKIE), Some("abc"));
        assert_eq!(cookie(&map, "c"), None);
        let hash = auth::sha256("token");
        assert_eq!(parse_hex(&hex(&hash)), Some(hash));
        assert_eq!(parse_hex("zz"), None);
    }
}
