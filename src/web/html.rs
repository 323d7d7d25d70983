//! HTML the dashboard writes, safe by construction: a page is an [`Html`], and the only
//! unescaped text an `Html` takes is a `&'static str` (markup written in our source).
//! Every other value, a queue named `<script>` as much as a count, goes in escaped
//! ([`Html::text`]) or percent-encoded ([`Url`]); a fragment joins another as the
//! markup it already is. [`html!`] writes a run of parts: string literals as markup,
//! anything else as a [`Part`]. So no page can forget to escape: there is no way to
//! write a `String` into a page unescaped.

use std::fmt::{self, Display, Write};

/// Markup built from source literals and escaped values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Html(String);

impl Html {
    pub fn new() -> Self {
        Self::default()
    }

    /// Markup from our source: a `&'static str`, never a value read at run time.
    pub fn raw(&mut self, markup: &'static str) -> &mut Self {
        self.0.push_str(markup);
        self
    }

    /// `value` as text: `&`, `<`, `>`, `"` and `'` escaped, so that it is safe in an
    /// element and in a quoted attribute.
    pub fn text(&mut self, value: impl Display) -> &mut Self {
        let _ = write!(Escaping(&mut self.0), "{value}");
        self
    }

    /// Itself, to write into: how [`html!`] takes an `Html` or a `&mut Html` alike.
    pub fn writer(&mut self) -> &mut Self {
        self
    }

    /// One part of [`html!`].
    pub fn put(&mut self, part: impl Part) -> &mut Self {
        part.put_into(self);
        self
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// Writes `out`'s parts in order: a string literal as markup ([`Html::raw`]), any other
/// expression as a [`Part`] (escaped text, a URL part, or a fragment). A number written
/// as a literal does not compile: literals are markup; name the number.
///
/// ```ignore
/// html!(out; "<td><a href=\"/queue?name=", Url(&name), "\">", &name, "</a></td>");
/// ```
macro_rules! html {
    (@ $out:ident;) => {};
    (@ $out:ident; $markup:literal $(, $($rest:tt)*)?) => {
        $out.raw($markup);
        html!(@ $out; $($($rest)*)?);
    };
    (@ $out:ident; $part:expr $(, $($rest:tt)*)?) => {
        $out.put($part);
        html!(@ $out; $($($rest)*)?);
    };
    ($out:expr; $($parts:tt)*) => {{
        let out: &mut $crate::web::html::Html = $out.writer();
        html!(@ out; $($parts)*);
    }};
}

/// What [`html!`] writes for an expression.
pub trait Part {
    fn put_into(self, out: &mut Html);
}

/// Any value shown as text: escaped.
impl<T: Display> Part for T {
    fn put_into(self, out: &mut Html) {
        out.text(self);
    }
}

/// A fragment built the same way: markup already.
impl Part for &Html {
    fn put_into(self, out: &mut Html) {
        out.0.push_str(&self.0);
    }
}

/// A fragment built the same way: markup already.
impl Part for Html {
    fn put_into(self, out: &mut Html) {
        out.0.push_str(&self.0);
    }
}

/// Text for a URL's query string: percent-encoded, which leaves nothing to escape.
pub struct Url<'a>(pub &'a str);

impl Part for Url<'_> {
    fn put_into(self, out: &mut Html) {
        for byte in self.0.bytes() {
            match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    out.0.push(byte as char)
                }
                other => {
                    let _ = write!(out.0, "%{other:02X}");
                }
            }
        }
    }
}

/// A `fmt::Write` that escapes what it is given.
struct Escaping<'a>(&'a mut String);

impl Write for Escaping<'_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        for c in text.chars() {
            match c {
                '&' => self.0.push_str("&amp;"),
                '<' => self.0.push_str("&lt;"),
                '>' => self.0.push_str("&gt;"),
                '"' => self.0.push_str("&quot;"),
                '\'' => self.0.push_str("&#39;"),
                c => self.0.push(c),
            }
        }
        Ok(())
    }
}

/// Where a page's live region starts and ends (`live.rs` cuts it out).
const LIVE_START: &str = "<!--live-->";
const LIVE_END: &str = "<!--/live-->";

/// The region of a page that refreshes itself: `static/live.js` fetches `/live/<page>`
/// with `query` and puts the answer in its place.
pub fn live_region(page: &'static str, query: &Html, inner: &Html) -> Html {
    let mut out = Html::new();
    html!(out; "<div data-live=\"/live/", page, "?", query, "\">");
    out.raw(LIVE_START);
    html!(out; "\n", inner);
    out.raw(LIVE_END);
    out.raw("</div>\n");
    out
}

/// The live region of a rendered `main` (all of it when it has none).
pub fn live_part(main: &str) -> &str {
    match (main.find(LIVE_START), main.find(LIVE_END)) {
        (Some(start), Some(end)) if start < end => &main[start + LIVE_START.len()..end],
        _ => main,
    }
}

/// A whole page: the shared head (the stylesheet and `live.js`, no inline script), a
/// header naming the tenant (and a sign-out button for a signed-in person), and `main`.
pub fn page(title: &str, tenant: &str, sign_out: bool, main: &Html) -> Html {
    let mut out = Html::new();
    html!(out;
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>",
        title,
        " · turnstile</title>\n\
         <link rel=\"stylesheet\" href=\"/static/app.css\">\n\
         <script src=\"/static/live.js\" defer></script>\n</head>\n<body>\n\
         <header><a class=\"brand\" href=\"/\">turnstile</a>\
         <nav aria-label=\"pages\"><a href=\"/\">Queues</a> <a href=\"/schedules\">Schedules</a> \
         <a href=\"/locks\">Locks</a> <a href=\"/workers\">Workers</a></nav>"
    );
    if !tenant.is_empty() {
        html!(out; "<span class=\"tenant\">tenant <strong>", tenant, "</strong></span>");
    }
    if sign_out {
        out.raw(
            "<form method=\"post\" action=\"/sign-out\" class=\"sign-out\">\
             <button type=\"submit\">Sign out</button></form>",
        );
    }
    html!(out; "</header>\n<main id=\"main\">\n", main, "</main>\n</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_is_escaped_and_query_parts_encoded() {
        let hostile = "<script>alert('x')</script> & \"q\"".to_owned();
        let mut out = Html::new();
        html!(out; "<p title=\"", &hostile, "\">", &hostile, "</p>");
        assert_eq!(
            out.0.as_str(),
            "<p title=\"&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;\">\
             &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;</p>"
        );
        let mut url = Html::new();
        html!(url; Url("a b&c=d/é\"<"));
        assert_eq!(url.0.as_str(), "a%20b%26c%3Dd%2F%C3%A9%22%3C");
        let mut formatted = Html::new();
        let half = 2.5;
        html!(formatted; format_args!("{}<{}", 1, "b"), half);
        assert_eq!(formatted.0.as_str(), "1&lt;b2.5");

        let page = page("<t>", "<tenant>", true, &Html::new());
        assert!(
            page.0.as_str().contains("&lt;t&gt;") && page.0.as_str().contains("&lt;tenant&gt;")
        );
        assert_eq!(
            page.0.as_str().matches("<script").count(),
            1,
            "only live.js"
        );
        let mut query = Html::new();
        html!(query; "name=", Url("a&b"));
        let mut inner = Html::new();
        inner.raw("<p>n</p>");
        let region = live_region("queue", &query, &inner);
        assert!(region
            .0
            .as_str()
            .contains("data-live=\"/live/queue?name=a%26b\""));
        let mut main = Html::new();
        html!(main; "<h1>x</h1>", &region, "<p>after</p>");
        assert_eq!(live_part(main.0.as_str()), "\n<p>n</p>");
    }

    /// The dashboard's sources build no HTML outside [`Html`]: no `format!`, `write!`,
    /// `writeln!` or `push_str` call whose arguments hold markup.
    #[test]
    fn no_page_builds_markup_outside_html() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/web");
        let mut offences = Vec::new();
        for entry in std::fs::read_dir(dir).expect("src/web") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|ext| ext != "rs") || path.ends_with("html.rs") {
                continue;
            }
            let source = std::fs::read_to_string(&path).expect("source");
            for call in ["format!(", "write!(", "writeln!(", "push_str("] {
                for (at, _) in source.match_indices(call) {
                    let args = call_arguments(&source[at + call.len()..]);
                    if args.contains('<') {
                        offences.push(format!("{}: {call}{args})", path.display()));
                    }
                }
            }
        }
        assert!(
            offences.is_empty(),
            "markup outside Html:\n{}",
            offences.join("\n")
        );
    }

    /// The text up to the parenthesis that closes a call (string literals skipped
    /// when counting).
    fn call_arguments(after_open: &str) -> &str {
        let (mut depth, mut in_string, mut escaped) = (1, false, false);
        for (i, c) in after_open.char_indices() {
            match (in_string, escaped, c) {
                (true, true, _) => escaped = false,
                (true, false, '\\') => escaped = true,
                (_, false, '"') => in_string = !in_string,
                (false, _, '(') => depth += 1,
                (false, _, ')') => {
                    depth -= 1;
                    if depth == 0 {
                        return &after_open[..i];
                    }
                }
                _ => {}
            }
        }
        after_open
    }
}
