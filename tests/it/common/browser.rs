//! A real browser for the dashboard's tests: headless Chromium from the OS packages,
//! driven over W3C WebDriver by `chromedriver`, through a small client of our own (JSON
//! over HTTP/1.1 on a loopback port; no crate). [`Browser::start`] answers `None` with a
//! printed reason when the machine has no `chromedriver` (outside CI; in CI, where
//! `.ci/run` installs it, a missing one fails). Every step may save a screenshot under
//! `target/screenshots/` for a person to look at.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use base64::Engine;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use turnstile::embedded::free_port;

use super::TempDir;

/// How long a wait for something on a page may take (a loaded machine is slow to
/// start a browser, never this slow).
const PATIENCE: Duration = Duration::from_secs(30);

/// A headless Chromium session; ended and its driver killed on drop.
pub struct Browser {
    /// The driver process (killed on drop).
    driver: Child,
    port: u16,
    session: String,
    /// The browser's profile, removed on drop.
    _profile: TempDir,
    /// Where screenshots go.
    shots: PathBuf,
}

/// Where a program is on `PATH`, if it is.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| PathBuf::from(dir).join(name))
        .find(|path| path.is_file())
}

impl Browser {
    /// A new browser session, or `None` (with the reason printed) when this machine
    /// has no `chromedriver` and `chromium` and is not CI.
    pub async fn start(screenshots: &str) -> Option<Browser> {
        let (Some(driver), Some(chromium)) = (on_path("chromedriver"), on_path("chromium")) else {
            let reason =
                "no chromedriver/chromium on PATH (apt-get install chromium chromium-driver)";
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run the browser tests: {reason}"
            );
            eprintln!("skipping the browser test: {reason}");
            return None;
        };
        let port = free_port().expect("a free port");
        // Its own process group, which Chromium's processes join: the drop kills the
        // group, so a session whose DELETE timed out on a loaded machine leaves no
        // Chromium behind (one run of the suite left twelve).
        let driver = std::os::unix::process::CommandExt::process_group(
            Command::new(driver)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            0,
        )
        .spawn()
        .expect("start chromedriver");
        let profile = TempDir::new("chromium");
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
            shots: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("target/screenshots")
                .join(screenshots),
            _profile: profile,
        };
        std::fs::create_dir_all(&browser.shots).expect("screenshot dir");
        // The driver is up when it answers its status.
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(status) = browser.call("GET", "/status", None).await {
                if status["value"]["ready"] == json!(true) {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "chromedriver never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let created = browser
            .call(
                "POST",
                "/session",
                Some(json!({"capabilities": {"alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": chromium,
                        "args": [
                            "--headless=new", "--no-sandbox", "--disable-gpu",
                            "--disable-dev-shm-usage", "--window-size=1280,1000",
                            format!("--user-data-dir={}", browser._profile.0.display()),
                        ],
                    },
                }}})),
            )
            .await
            .expect("a browser session");
        browser.session = created["value"]["sessionId"]
            .as_str()
            .expect("a session id")
            .to_owned();
        Some(browser)
    }

    /// One WebDriver command; its JSON answer (an error status is an `Err` with the
    /// driver's message).
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .map_err(|err| err.to_string())?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.port,
            body.len()
        );
        socket
            .write_all(request.as_bytes())
            .await
            .map_err(|err| err.to_string())?;
        // chromedriver answers `Connection: close` but keeps the socket open: read
        // the head, then exactly Content-Length bytes.
        let read = async {
            let mut raw = Vec::new();
            let mut buf = [0u8; 16 * 1024];
            let head_end = loop {
                if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                    break at + 4;
                }
                let n = socket.read(&mut buf).await.map_err(|err| err.to_string())?;
                if n == 0 {
                    return Err("closed before the head".to_owned());
                }
                raw.extend_from_slice(&buf[..n]);
            };
            let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
            let length: usize = head
                .lines()
                .filter_map(|line| line.split_once(':'))
                .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
                .and_then(|(_, value)| value.trim().parse().ok())
                .ok_or("no Content-Length")?;
            while raw.len() < head_end + length {
                let n = socket.read(&mut buf).await.map_err(|err| err.to_string())?;
                if n == 0 {
                    return Err("closed before the body".to_owned());
                }
                raw.extend_from_slice(&buf[..n]);
            }
            Ok((
                head,
                String::from_utf8_lossy(&raw[head_end..head_end + length]).into_owned(),
            ))
        };
        let (head, body) = tokio::time::timeout(PATIENCE * 2, read)
            .await
            .map_err(|_| format!("{path}: no answer"))??;
        let ok = head.starts_with("HTTP/1.1 200");
        let value: Value = serde_json::from_str(&body).map_err(|err| format!("{err}: {body}"))?;
        if ok {
            Ok(value)
        } else {
            Err(format!("{path}: {}", value["value"]["message"]))
        }
    }

    fn at(&self, path: &str) -> String {
        format!("/session/{}{path}", self.session)
    }

    /// Opens `url` and waits for it to load.
    pub async fn goto(&self, url: &str) {
        self.call("POST", &self.at("/url"), Some(json!({ "url": url })))
            .await
            .expect("navigate");
    }

    /// The element `css` matches, waiting for it to appear.
    pub async fn find(&self, css: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let found = self
                .call(
                    "POST",
                    &self.at("/element"),
                    Some(json!({"using": "css selector", "value": css})),
                )
                .await;
            if let Ok(found) = found {
                let (_, id) = found["value"]
                    .as_object()
                    .and_then(|o| o.iter().next())
                    .expect("an element reference");
                return id.as_str().expect("an element id").to_owned();
            }
            assert!(Instant::now() < deadline, "no element matches {css}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Clicks the element `css` matches. A click that submits a form may return before
    /// the next page has loaded: wait for something only that page shows before the
    /// next step. An element that went stale (its page was replaced between the find
    /// and the click) is found again.
    pub async fn click(&self, css: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let id = self.find(css).await;
            let clicked = self
                .call(
                    "POST",
                    &self.at(&format!("/element/{id}/click")),
                    Some(json!({})),
                )
                .await;
            match clicked {
                Ok(_) => return,
                Err(err) if err.contains("stale element") && Instant::now() < deadline => {}
                Err(err) => panic!("click {css}: {err}"),
            }
        }
    }

    /// Waits for the dashboard's confirmation page (the page an action's first POST
    /// shows) and presses its Confirm button (the only button it focuses).
    pub async fn confirm(&self) {
        self.wait_for_text("Confirm").await;
        self.click("main button[autofocus]").await;
    }

    /// Replaces the text of the input `css` matches with `text`.
    pub async fn fill(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.call(
            "POST",
            &self.at(&format!("/element/{id}/clear")),
            Some(json!({})),
        )
        .await
        .expect("clear");
        self.call(
            "POST",
            &self.at(&format!("/element/{id}/value")),
            Some(json!({ "text": text })),
        )
        .await
        .expect("type");
    }

    /// The page's visible text.
    pub async fn text(&self) -> String {
        self.script("return document.body.innerText").await
    }

    /// Runs `script` in the page; what it returns, as text.
    pub async fn script(&self, script: &str) -> String {
        let value = self
            .call(
                "POST",
                &self.at("/execute/sync"),
                Some(json!({ "script": script, "args": [] })),
            )
            .await
            .expect("run a script");
        match &value["value"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        }
    }

    /// Waits until the page's visible text contains `wanted` (a live region may take
    /// a refresh period to show it); the text.
    pub async fn wait_for_text(&self, wanted: &str) -> String {
        self.wait_until_text(|text| text.contains(wanted), wanted)
            .await
    }

    /// Waits until `test` holds for the page's visible text; `what` names it.
    pub async fn wait_until_text(&self, test: impl Fn(&str) -> bool, what: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let text = self.text().await;
            if test(&text) {
                return text;
            }
            assert!(Instant::now() < deadline, "never saw {what:?} in:\n{text}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Saves what the page looks like now as `target/screenshots/<dir>/<name>.png`.
    pub async fn screenshot(&self, name: &str) {
        let shot = self
            .call("GET", &self.at("/screenshot"), None)
            .await
            .expect("a screenshot");
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["value"].as_str().expect("base64"))
            .expect("a PNG");
        std::fs::write(self.shots.join(format!("{name}.png")), png).expect("save a screenshot");
    }
}

impl Drop for Browser {
    /// Ends the session (which quits Chromium) with a blocking request, then stops
    /// the driver.
    fn drop(&mut self) {
        use std::io::{Read, Write};
        let mut ended = self.session.is_empty();
        if !ended {
            if let Ok(mut socket) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = socket.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = write!(
                    socket,
                    "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                    self.session
                );
                ended = socket.read(&mut [0u8; 4096]).is_ok_and(|n| n > 0);
            }
        }
        if !ended {
            // The session did not end (the DELETE timed out on a loaded machine): kill
            // the whole group, the driver and the Chromium it started.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.driver.id())])
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
