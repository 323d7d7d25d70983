//! HTML the dashboard writes: every value from a request or from Redis goes through
//! [`Escaped`] (a queue named `<script>` is text), and every page through [`page`].

use std::fmt::{self, Display, Write};

/// Text made safe to place in HTML, in an element or a quoted attribute.
pub struct Escaped<'a>(pub &'a str);

impl Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                '&' => f.write_str("&amp;")?,
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&#39;")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// `text`, escaped.
pub fn esc(text: &str) -> Escaped<'_> {
    Escaped(text)
}

/// Text made safe to place in a URL's query string (then in an attribute).
pub struct UrlPart<'a>(pub &'a str);

impl Display for UrlPart<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0.bytes() {
            match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    f.write_char(byte as char)?
                }
                other => write!(f, "%{other:02X}")?,
            }
        }
        Ok(())
    }
}

/// A Unix-ms instant as RFC 3339 (UTC), or a dash.
pub fn instant(ms: Option<i64>) -> String {
    ms.and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| "–".to_owned(), |at| at.to_string())
}

/// Where a page's live region starts and ends (`live.rs` cuts it out).
const LIVE_START: &str = "<!--live-->";
const LIVE_END: &str = "<!--/live-->";

/// The region of a page that refreshes itself: `static/live.js` fetches `/live/<page>`
/// with `query` (already URL-encoded parts) and puts the answer in its place.
pub fn live_region(page: &str, query: &str, inner: &str) -> String {
    format!(
        "<div data-live=\"/live/{page}?{}\">{LIVE_START}\n{inner}{LIVE_END}</div>\n",
        esc(query)
    )
}

/// The live region of a rendered `main` (all of it when it has none).
pub fn live_part(main: &str) -> &str {
    match (main.find(LIVE_START), main.find(LIVE_END)) {
        (Some(start), Some(end)) if start < end => &main[start + LIVE_START.len()..end],
        _ => main,
    }
}

/// A whole page: the shared head (the stylesheet and `live.js`, no inline script), a header naming the
/// tenant (and a sign-out button for a signed-in person), and `main`, which the caller
/// built with escaped values.
pub fn page(title: &str, tenant: &str, sign_out: bool, main: &str) -> String {
    let sign_out = if sign_out {
        "<form method=\"post\" action=\"/sign-out\" class=\"sign-out\">\
         <button type=\"submit\">Sign out</button></form>"
    } else {
        ""
    };
    let tenant = if tenant.is_empty() {
        String::new()
    } else {
        format!(
            "<span class=\"tenant\">tenant <strong>{}</strong></span>",
            esc(tenant)
        )
    };
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title} · turnstile</title>\n\
         <link rel=\"stylesheet\" href=\"/static/app.css\">\n\
         <script src=\"/static/live.js\" defer></script>\n</head>\n<body>\n\
         <header><a class=\"brand\" href=\"/\">turnstile</a>\
         <nav aria-label=\"pages\"><a href=\"/\">Queues</a> <a href=\"/schedules\">Schedules</a> \
         <a href=\"/locks\">Locks</a> <a href=\"/workers\">Workers</a></nav>{tenant}{sign_out}</header>\n\
         <main id=\"main\">\n{main}</main>\n</body>\n</html>\n",
        title = esc(title),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_is_escaped_and_query_parts_encoded() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"q\"").to_string(),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(UrlPart("a b&c=d/é").to_string(), "a%20b%26c%3Dd%2F%C3%A9");
        let page = page("<t>", "<tenant>", true, "");
        assert!(page.contains("&lt;t&gt;") && page.contains("&lt;tenant&gt;"));
        assert_eq!(page.matches("<script").count(), 1, "only live.js");
        let region = live_region("queue", "name=a&b", "<p>n</p>");
        assert!(region.contains("data-live=\"/live/queue?name=a&amp;b\""));
        assert_eq!(
            live_part(&format!("<h1>x</h1>{region}<p>after</p>")),
            "\n<p>n</p>"
        );
    }
}
