//! The web dashboard over real HTTP against a real server and Redis (contract:
//! "Dashboard"): the overview lists the tenant's queues with their depths, filtered and
//! sorted on the server; every answer carries the security headers; hostile names are
//! text; with an auth file a bearer token sees only its tenant, and no token sees
//! nothing. (The browser tests come with the pages that need them.)

use crate::common;

use std::net::SocketAddr;

use common::{json_field, ms, write_auth_file, LoggedServer, TestRedis, TestResult, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use turnstile::pb::{ConfigureQueueRequest, EnqueueRequest, TaskSpec};

/// An HTTP answer: status, headers (lower-case names) and body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` over a fresh HTTP/1.1 connection, with a bearer token if given.
async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> Answer {
    let headers: Vec<String> = token
        .map(|token| format!("Authorization: Bearer {token}"))
        .into_iter()
        .collect();
    send(addr, "GET", path, &headers, "").await
}

/// A request with extra header lines and a form body.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[String],
    form: &str,
) -> Answer {
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    if method == "POST" {
        request.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            form.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(form);
    socket.write_all(request.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    socket.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8(raw).expect("utf-8 answer");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let mut lines = head.lines();
    let status = lines.next().expect("status line")[9..12]
        .parse()
        .expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        unchunk(body)
    } else {
        body.to_owned()
    };
    Answer {
        status,
        headers,
        body,
    }
}

/// The body of a chunked answer.
fn unchunk(mut rest: &str) -> String {
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if size == 0 {
            break;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    body
}

/// The cells of the table row whose first cell reads `name`, as text (tags taken out:
/// a queue's name is a link).
fn row(body: &str, name: &str) -> Option<Vec<String>> {
    body.split("<tr>").skip(1).find_map(|tr| {
        let tr = &tr[..tr.find("</tr>")?];
        // An admin's rows open with a checkbox to select the task: not a cell to read.
        let cells: Vec<String> = tr
            .split("<td")
            .skip(1)
            .filter(|cell| !cell.starts_with("><input type=\"checkbox\""))
            .map(|cell| {
                let inner = &cell[cell.find('>').unwrap() + 1..];
                strip_tags(&inner[..inner.find("</td>").unwrap()])
            })
            .collect();
        (cells.first().map(String::as_str) == Some(name)).then_some(cells)
    })
}

/// `html` without its tags.
fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

async fn enqueue(server: &TestServer, queue: &str, ids: &[&str], delay_ms: Option<i64>) {
    let tasks = ids
        .iter()
        .map(|id| TaskSpec {
            id: (*id).into(),
            schedule: delay_ms
                .map(|ms_| turnstile::pb::task_spec::Schedule::Delay(ms(ms_).unwrap())),
            ..Default::default()
        })
        .collect();
    server
        .queues()
        .await
        .enqueue(EnqueueRequest {
            queue: queue.into(),
            tasks,
            ..Default::default()
        })
        .await
        .expect("enqueue");
}

/// Enqueues one task into `queue` through gRPC with `token`.
pub(crate) async fn enqueue_as(server: &TestServer, token: &str, queue: &str) {
    let mut queues = turnstile::pb::queue_service_client::QueueServiceClient::with_interceptor(
        server.channel().await,
        common::bearer(token),
    );
    queues
        .enqueue(EnqueueRequest {
            queue: queue.into(),
            tasks: vec![TaskSpec {
                id: "t".into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .expect("enqueue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_lists_the_queues_with_their_depths_filtered_and_sorted() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let addr = server.dashboard.expect("a dashboard");
    enqueue(&server, "emails", &["e1", "e2", "e3"], None).await;
    enqueue(&server, "reports", &["r1"], Some(600_000)).await;
    let leased = server
        .queues()
        .await
        .lease(common::lease_of("emails", 1))
        .await?
        .into_inner();
    assert_eq!(leased.tasks.len(), 1);
    server
        .queues()
        .await
        .configure_queue(ConfigureQueueRequest {
            queue: "reports".into(),
            paused: Some(true),
            max_in_flight: Some(5),
            ..Default::default()
        })
        .await?;

    let page = get(addr, "/", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/html")));
    // Ready, delayed, in flight, dead, delivered in 5 min; then oldest ready, paused,
    // limits.
    let emails = row(&page.body, "emails").expect("emails listed");
    assert_eq!(&emails[1..6], ["2", "0", "1", "0", "1"], "{emails:?}");
    assert_eq!(emails[7], "no");
    let reports = row(&page.body, "reports").expect("reports listed");
    assert_eq!(&reports[1..6], ["0", "1", "0", "0", "0"], "{reports:?}");
    assert_eq!(
        (reports[7].as_str(), reports[8].as_str()),
        ("paused", "5 in flight")
    );
    assert!(
        page.body.contains("<dt>In flight</dt><dd>1</dd>"),
        "{}",
        page.body
    );

    // Filtered by a prefix on the server.
    let filtered = get(addr, "/?prefix=rep", None).await;
    assert!(row(&filtered.body, "reports").is_some());
    assert!(row(&filtered.body, "emails").is_none());
    // Sorted by a column: by name emails comes first, by delayed reports does.
    let by_name = get(addr, "/", None).await.body;
    assert!(by_name.find(">emails</a>") < by_name.find(">reports</a>"));
    let by_delayed = get(addr, "/?sort=delayed", None).await.body;
    assert!(by_delayed.find(">reports</a>") < by_delayed.find(">emails</a>"));
    assert!(by_delayed.contains("aria-sort=\"descending\""));
    // A prefix that is not a name is refused, naming it.
    let bad = get(addr, "/?prefix=%07", None).await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("prefix:"), "{}", bad.body);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_carries_the_security_headers_and_hostile_names_are_text() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let addr = server.dashboard.expect("a dashboard");
    let hostile = "<script>alert('x')</script>\"&";
    enqueue(&server, hostile, &["t1"], None).await;
    let page = get(addr, "/", None).await;
    assert_eq!(page.status, 200);
    // The one script is ours, from this origin; the name is text everywhere.
    assert_eq!(
        page.body.matches("<script").collect::<Vec<_>>(),
        ["<script"],
        "{}",
        page.body
    );
    assert!(page
        .body
        .contains("<script src=\"/static/live.js\" defer></script>"));
    assert!(page
        .body
        .contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&quot;&amp;"));
    let live = get(addr, "/live/overview?prefix=&sort=name", None).await;
    assert!(!live.body.contains("<script"), "{}", live.body);
    assert!(live.body.contains("&lt;script&gt;alert("));
    for answer in [&page, &get(addr, "/static/app.css", None).await] {
        let csp = answer.header("content-security-policy").expect("a CSP");
        assert!(csp.contains("default-src 'none'"), "{csp}");
        assert!(csp.contains("script-src 'self'"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
    }
    assert_eq!(page.header("cache-control"), Some("no-store"));
    let css = get(addr, "/static/app.css", None).await;
    assert!(css
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/css")));
    assert!(css.body.contains("prefers-color-scheme: dark"));
    assert_eq!(get(addr, "/no-such-page", None).await.status, 404);
    Ok(())
}

/// A server with an auth file of two tenants: `shop` with an admin (who may also
/// produce, consume and lock) and a read-only token, `rival` with an admin.
pub(crate) async fn shop_and_rival() -> (TestRedis, TestServer) {
    let redis = TestRedis::start().await;
    let path = write_auth_file(
        &redis.dir.0.join("auth.toml"),
        &[
            (
                "shop-admin",
                "shop",
                &["admin", "produce", "consume", "lock"],
            ),
            ("shop-reader", "shop", &["consume"]),
            ("rival-admin", "rival", &["admin", "produce"]),
        ],
    );
    let server = TestServer::start_with(&redis, move |config| {
        config.auth_file = Some(path.clone());
    })
    .await;
    (redis, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_auth_file_a_token_sees_only_its_tenant_and_no_token_nothing() -> TestResult {
    let (_redis, server) = shop_and_rival().await;
    let addr = server.dashboard.expect("a dashboard");
    for (token, queue) in [
        ("shop-admin", "shop-orders"),
        ("rival-admin", "rival-orders"),
    ] {
        enqueue_as(&server, token, queue).await;
    }
    // No token, or an unknown one: nothing, and a challenge.
    for token in [None, Some("wrong")] {
        let refused = get(addr, "/", token).await;
        assert_eq!(refused.status, 401, "{token:?}");
        assert!(refused.header("www-authenticate").is_some());
        assert!(!refused.body.contains("orders"), "{}", refused.body);
    }
    // Each token its own tenant; a read-only token reads too.
    for (token, sees, hidden) in [
        ("shop-admin", "shop-orders", "rival-orders"),
        ("shop-reader", "shop-orders", "rival-orders"),
        ("rival-admin", "rival-orders", "shop-orders"),
    ] {
        let page = get(addr, "/", Some(token)).await;
        assert_eq!(page.status, 200, "{token}");
        assert!(row(&page.body, sees).is_some(), "{token}");
        assert!(!page.body.contains(hidden), "{token} saw {hidden}");
    }
    Ok(())
}

/// The session cookie a sign-in answer set (`name=value`).
fn session_cookie(answer: &Answer) -> Option<String> {
    let set = answer.header("set-cookie")?;
    Some(set.split(';').next()?.trim().to_owned())
}

/// Signs in on `addr` as a form of its own origin would; the answer.
async fn sign_in(addr: SocketAddr, token: &str, origin: &str) -> Answer {
    send(
        addr,
        "POST",
        "/sign-in",
        &[format!("Origin: {origin}")],
        &format!("token={token}"),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_with_a_token_on_any_replica_and_out_again() -> TestResult {
    let redis = TestRedis::start().await;
    let path = write_auth_file(
        &redis.dir.0.join("auth.toml"),
        &[
            ("shop-admin", "shop", &["admin", "produce"]),
            ("rival-admin", "rival", &["admin", "produce"]),
        ],
    );
    let file = path.clone();
    let server = TestServer::start_with(&redis, move |config| {
        config.auth_file = Some(file.clone());
    })
    .await;
    let other = TestServer::start_with(&redis, move |config| {
        config.auth_file = Some(path.clone());
    })
    .await;
    let addr = server.dashboard.expect("a dashboard");
    let origin = format!("http://{addr}");
    // Nobody signed in: the sign-in form, with a 401.
    let page = get(addr, "/", None).await;
    assert_eq!(page.status, 401);
    assert!(
        page.body
            .contains("<form method=\"post\" action=\"/sign-in\""),
        "{}",
        page.body
    );
    assert!(page.body.contains("<label for=\"token\">"));
    // A wrong token: the form again, no session.
    let wrong = sign_in(addr, "nope", &origin).await;
    assert_eq!(wrong.status, 401);
    assert!(session_cookie(&wrong).is_none());
    assert!(
        wrong.body.contains("not in the auth file"),
        "{}",
        wrong.body
    );
    // A form of another site is refused, even with a good token.
    let forged = sign_in(addr, "shop-admin", "http://evil.example").await;
    assert_eq!(forged.status, 403);
    assert!(session_cookie(&forged).is_none());
    // The right token: a session cookie the page script cannot read, sent only to this
    // site.
    let signed = sign_in(addr, "shop-admin", &origin).await;
    assert_eq!(signed.status, 303, "{}", signed.body);
    assert_eq!(signed.header("location"), Some("/"));
    let set = signed.header("set-cookie").expect("a cookie");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attribute), "{set}");
    }
    let cookie = format!("Cookie: {}", session_cookie(&signed).expect("the session"));
    // Enqueue in each tenant through gRPC with its token, then look with the session.
    for (token, queue) in [
        ("shop-admin", "shop-orders"),
        ("rival-admin", "rival-orders"),
    ] {
        enqueue_as(&server, token, queue).await;
    }
    // The session works on every replica (it lives in Redis).
    for dashboard in [addr, other.dashboard.expect("a dashboard")] {
        let page = send(dashboard, "GET", "/", std::slice::from_ref(&cookie), "").await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(row(&page.body, "shop-orders").is_some());
        assert!(!page.body.contains("rival-orders"));
        assert!(page.body.contains("Sign out"));
    }
    // Signing out must come from this site too; then the session is over everywhere.
    let forged = send(addr, "POST", "/sign-out", std::slice::from_ref(&cookie), "").await;
    assert_eq!(forged.status, 403);
    assert_eq!(
        send(addr, "GET", "/", std::slice::from_ref(&cookie), "")
            .await
            .status,
        200
    );
    let out = send(
        addr,
        "POST",
        "/sign-out",
        &[cookie.clone(), format!("Origin: {origin}")],
        "",
    )
    .await;
    assert_eq!(out.status, 303);
    assert!(out
        .header("set-cookie")
        .is_some_and(|c| c.contains("Max-Age=0")));
    for dashboard in [addr, other.dashboard.expect("a dashboard")] {
        let after = send(dashboard, "GET", "/", std::slice::from_ref(&cookie), "").await;
        assert_eq!(after.status, 401);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_token_on_sighup_ends_its_sessions() -> TestResult {
    let redis = TestRedis::start().await;
    let path = redis.dir.0.join("auth.toml");
    write_auth_file(
        &path,
        &[
            ("kept", "shop", &["admin"]),
            ("removed", "shop", &["admin"]),
        ],
    );
    let server = LoggedServer::start(&redis, &["--auth-file", path.to_str().unwrap()]);
    let ready = server.wait_line("\"ready\"");
    let url = json_field(&ready, "dashboard");
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()?;
    let origin = format!("http://{addr}");
    let mut cookies = Vec::new();
    for token in ["kept", "removed"] {
        let signed = sign_in(addr, token, &origin).await;
        assert_eq!(signed.status, 303);
        cookies.push(format!(
            "Cookie: {}",
            session_cookie(&signed).expect("a session")
        ));
    }
    write_auth_file(&path, &[("kept", "shop", &["admin"])]);
    server.hangup();
    server.wait_line("auth file reloaded");
    let kept = send(addr, "GET", "/", &cookies[..1], "").await;
    assert_eq!(kept.status, 200);
    let removed = send(addr, "GET", "/", &cookies[1..], "").await;
    assert_eq!(removed.status, 401, "the removed token's session goes on");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedules_and_locks_pages_show_them_and_a_semaphore_by_name() -> TestResult {
    use turnstile::pb::{
        schedule, AcquireRequest, PutScheduleRequest, Schedule, SemaphoreServiceAcquireRequest,
    };
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let addr = server.dashboard.expect("a dashboard");
    server
        .schedules()
        .await
        .put_schedule(PutScheduleRequest {
            schedule: Some(Schedule {
                name: "nightly".into(),
                queue: "reports".into(),
                spec: Some(schedule::Spec::Cron("0 3 * * *".into())),
                time_zone: "Europe/Paris".into(),
                ..Default::default()
            }),
        })
        .await?;
    let page = get(addr, "/schedules", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let nightly = row(&page.body, "nightly").expect("the schedule listed");
    assert_eq!(nightly[1], "reports");
    assert_eq!(nightly[2], "cron 0 3 * * * Europe/Paris");
    assert!(nightly[3].starts_with("20"), "next fire {nightly:?}");
    assert_eq!((nightly[5].as_str(), nightly[6].as_str()), ("no", "allow"));

    // 105 held locks (one with a hostile name): two pages by name.
    let mut locks = server.locks().await;
    let mut names: Vec<String> = (0..104).map(|n| format!("job-{n:03}")).collect();
    names.push("<b>bold</b>".into());
    for name in &names {
        locks
            .acquire(AcquireRequest {
                name: name.clone(),
                owner: "worker-7".into(),
                ttl: ms(60_000),
                ..Default::default()
            })
            .await?;
    }
    let first = get(addr, "/locks", None).await;
    assert_eq!(first.status, 200);
    assert!(!first.body.contains("<b>bold"), "a name was not escaped");
    let hostile = row(&first.body, "&lt;b&gt;bold&lt;/b&gt;").expect("sorted first");
    assert_eq!(hostile[1], "worker-7");
    assert!(hostile[2].parse::<u64>()? > 0);
    assert!(row(&first.body, "job-098").is_some() && row(&first.body, "job-099").is_none());
    let next = first
        .body
        .split("href=\"/locks?after=")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a next page link")
        .to_owned();
    let second = get(addr, &format!("/locks?after={next}"), None).await;
    assert!(row(&second.body, "job-099").is_some() && row(&second.body, "job-103").is_some());
    assert!(row(&second.body, "job-000").is_none());
    assert!(!second.body.contains("Next page"));

    // A semaphore by name: its permits, line and holders.
    server
        .semaphores()
        .await
        .acquire(SemaphoreServiceAcquireRequest {
            name: "pool".into(),
            owner: "exporter".into(),
            limit: 3,
            permits: 2,
            ttl: ms(60_000),
            ..Default::default()
        })
        .await?;
    let seen = get(addr, "/locks?semaphore=pool", None).await;
    assert!(
        seen.body
            .contains("<strong>pool</strong>: 2 of 3 permits in use, 0 waiting in line."),
        "{}",
        seen.body
    );
    let exporter = row(&seen.body, "exporter").expect("the holder listed");
    assert_eq!(exporter[1], "2");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_page_shows_its_tasks_by_state_its_groups_and_payloads_as_text() -> TestResult {
    use turnstile::pb::NackRequest;
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let addr = server.dashboard.expect("a dashboard");
    let mut queues = server.queues().await;
    let task = |id: &str, group: &str, payload: &[u8]| TaskSpec {
        id: id.into(),
        group: group.into(),
        payload: payload.to_vec().into(),
        max_attempts: 1,
        ..Default::default()
    };
    queues
        .enqueue(EnqueueRequest {
            queue: "jobs".into(),
            tasks: vec![
                task("doomed", "", b"will die"),
                task("a1", "acme", b"<img src=x onerror=alert(1)>"),
                task("b1", "bolt", &[0xff, 0xfe, b'o', b'k']),
            ],
            ..Default::default()
        })
        .await?;
    // "doomed" is first in the rotation (the ungrouped group): lease it, Nack it on
    // its only attempt.
    let leased = queues
        .lease(common::lease_of("jobs", 1))
        .await?
        .into_inner()
        .tasks;
    let doomed = leased.first().expect("a task");
    queues
        .nack(NackRequest {
            queue: "jobs".into(),
            receipt: doomed.receipt.clone(),
            delay: None,
            error: "<b>quota</b> exceeded\n  at send (mail.rs:12)".into(),
            ..Default::default()
        })
        .await?;
    let dead_id = doomed.id.clone();

    let overview = get(addr, "/", None).await;
    assert!(
        overview.body.contains("href=\"/queue?name=jobs\""),
        "{}",
        overview.body
    );
    let page = get(addr, "/queue?name=jobs", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("<img"), "a payload was not escaped");
    let ready: Vec<Vec<String>> = ["a1", "b1", "doomed"]
        .iter()
        .filter(|id| **id != dead_id)
        .map(|id| row(&page.body, id).expect("a ready task"))
        .collect();
    assert_eq!(ready.len(), 2);
    let acme = row(&page.body, "a1").expect("a1 is READY");
    assert_eq!(acme[1], "acme");
    assert_eq!(acme[5], "&lt;img src=x onerror=alert(1)&gt;");
    let bolt = row(&page.body, "b1").expect("b1 is READY");
    assert_eq!(
        bolt[5], "\u{fffd}\u{fffd}ok",
        "non-UTF-8 shown as replacement characters"
    );
    // Its groups with their counts.
    let group = row(&page.body, "acme").expect("the group acme");
    assert_eq!(&group[1..5], ["1", "0", "0", "0"]);
    // The DEAD tab.
    let dead = get(addr, "/queue?name=jobs&state=dead", None).await;
    assert!(dead.body.contains("<h2>Dead tasks</h2>"), "{}", dead.body);
    let row_dead = row(&dead.body, &dead_id).expect("the dead task");
    assert_eq!(row_dead[3], "1 of 1");
    // Why it died: a last-error column (as text), and the whole error on its page.
    assert_eq!(
        row_dead[6],
        "&lt;b&gt;quota&lt;/b&gt; exceeded   at send (mail.rs:12)"
    );
    let task_page = get(addr, &format!("/task?queue=jobs&id={dead_id}"), None).await;
    assert!(
        task_page.body.contains(
            "<h2>Last error</h2>\n<pre class=\"error\">&lt;b&gt;quota&lt;/b&gt; exceeded\n  at send (mail.rs:12)</pre>"
        ),
        "{}",
        task_page.body
    );
    // Its history: the one delivery, nacked, with its error escaped.
    let attempt = row(&task_page.body, "1").expect("the history's first attempt");
    assert_eq!(attempt[1], "Nacked");
    assert_eq!(
        attempt[5],
        "&lt;b&gt;quota&lt;/b&gt; exceeded\n  at send (mail.rs:12)"
    );
    assert!(row(&dead.body, "a1").is_none());
    // A name that is not one: 400 naming it.
    let bad = get(addr, "/queue?name=", None).await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("name:"), "{}", bad.body);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dashboard_turned_off_listens_nowhere() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start_with(&redis, |config| {
        config.dashboard_listen = turnstile::config::DashboardListen(None);
    })
    .await;
    assert_eq!(server.dashboard, None);
    // The server still serves gRPC.
    enqueue(&server, "q", &["t"], None).await;
    Ok(())
}

/// The task ids of a page's table rows, in order.
fn listed_ids(body: &str) -> Vec<String> {
    body.split("<a href=\"/task?")
        .skip(1)
        .map(|link| {
            let text = &link[link.find('>').unwrap() + 1..];
            text[..text.find("</a>").unwrap()].to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_page_by_cursor_and_a_task_opens_as_text_json_or_hex() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let addr = server.dashboard.expect("a dashboard");
    let ready: Vec<String> = (0..230).map(|n| format!("r{n:03}")).collect();
    let delayed: Vec<String> = (0..120).map(|n| format!("d{n:03}")).collect();
    for chunk in ready.chunks(100) {
        let ids: Vec<&str> = chunk.iter().map(String::as_str).collect();
        enqueue(&server, "deep", &ids, None).await;
    }
    for chunk in delayed.chunks(100) {
        let ids: Vec<&str> = chunk.iter().map(String::as_str).collect();
        enqueue(&server, "deep", &ids, Some(3_600_000)).await;
    }
    // READY pages of 100 in enqueue order, each linking to the next (ListTasks' cursor);
    // the last one partial, with no next.
    let next_of = |body: &str| -> Option<String> {
        let at = body.find("\" rel=\"next\"")?;
        let href = &body[..at];
        Some(href[href.rfind("href=\"").unwrap() + 6..].replace("&amp;", "&"))
    };
    let mut path = "/queue?name=deep".to_owned();
    let mut pages = Vec::new();
    loop {
        let answer = get(addr, &path, None).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        pages.push(answer.body.clone());
        match next_of(&answer.body) {
            Some(next) => path = next,
            None => break,
        }
    }
    assert_eq!(pages.len(), 3);
    for (page, (from, to)) in pages.iter().zip([(0, 100), (100, 200), (200, 230)]) {
        assert_eq!(listed_ids(page), ready[from..to]);
    }
    assert!(pages[2].contains("201–230 of 230"), "{}", pages[2]);
    assert!(pages[2].contains("href=\"/queue?name=deep&amp;state=ready\">« first</a>"));
    // DELAYED pages start after the READY tasks in the same sorted set.
    let first_delayed = get(addr, "/queue?name=deep&state=delayed", None).await;
    let second = get(
        addr,
        &next_of(&first_delayed.body).expect("a next page"),
        None,
    )
    .await;
    assert_eq!(listed_ids(&second.body), delayed[100..120]);
    // A token of another state's listing is refused, naming the field.
    let token = next_of(&first_delayed.body).unwrap();
    let refused = get(addr, &token.replace("state=delayed", "state=dead"), None).await;
    assert_eq!(refused.status, 400);
    assert!(refused.body.contains("after:"), "{}", refused.body);

    // A task's page, in each view, escaped; an unknown id is a 404.
    let mut queues = server.queues().await;
    queues
        .enqueue(EnqueueRequest {
            queue: "deep".into(),
            tasks: vec![
                TaskSpec {
                    id: "json<1>".into(),
                    payload: br#"{"b":[1,"</pre><script>x</script>"]}"#.to_vec().into(),
                    group: "g".into(),
                    priority: 7,
                    ..Default::default()
                },
                TaskSpec {
                    id: "bin".into(),
                    payload: vec![0x00, 0xff, b'<', b'A'].into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        })
        .await?;
    let text = get(addr, "/task?queue=deep&id=json%3C1%3E", None).await;
    assert_eq!(text.status, 200, "{}", text.body);
    assert!(text
        .body
        .contains("Task <span class=\"name\">json&lt;1&gt;</span>"));
    assert!(!text.body.contains("<script>"), "a payload was not escaped");
    let facts = strip_tags(&text.body);
    for fact in ["StateReady", "Groupg", "Priority7", "Attempts0 of"] {
        assert!(facts.contains(fact), "{fact} in {facts}");
    }
    let json = get(addr, "/task?queue=deep&id=json%3C1%3E&view=json", None).await;
    assert!(
        json.body
            .contains("{\n  &quot;b&quot;: [\n    1,\n    &quot;&lt;/pre&gt;&lt;script&gt;"),
        "{}",
        json.body
    );
    let hex = get(addr, "/task?queue=deep&id=bin&view=hex", None).await;
    assert!(
        hex.body.contains("00000000  00 ff 3c 41 ") && hex.body.contains("..&lt;A"),
        "{}",
        hex.body
    );
    let missing = get(addr, "/task?queue=deep&id=nope", None).await;
    assert_eq!(missing.status, 404);
    // The find form leads there.
    let page = get(addr, "/queue?name=deep", None).await;
    assert!(page.body.contains("<form method=\"get\" action=\"/task\""));
    Ok(())
}

/// Posts an action as a form of the dashboard would (same origin), with `auth` as
/// its header line (a session cookie or a bearer token).
async fn act(addr: SocketAddr, auth: &str, form: &str) -> Answer {
    send(
        addr,
        "POST",
        "/action",
        &[auth.to_owned(), "Sec-Fetch-Site: same-origin".to_owned()],
        form,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_are_confirmed_then_done_and_change_what_the_rpcs_see() -> TestResult {
    use turnstile::pb::{
        GetScheduleRequest, ListGroupsRequest, NackRequest, PeekRequest, PutScheduleRequest,
        StatsRequest,
    };
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let addr = server.dashboard.expect("a dashboard");
    let mut queues = server.queues().await;
    let stats = |mut queues: turnstile::pb::queue_service_client::QueueServiceClient<_>| async move {
        queues
            .stats(StatsRequest {
                queue: "work".into(),
            })
            .await
            .expect("stats")
            .into_inner()
    };
    enqueue(&server, "work", &["a", "b", "c"], None).await;
    let page = get(addr, "/queue?name=work", None).await;
    assert!(page.body.contains("value=\"pause-queue\""), "{}", page.body);

    // The first POST only asks; nothing changes until it is confirmed.
    let asked = act(addr, "X-None: 1", "queue=work&do=pause-queue").await;
    assert_eq!(asked.status, 200, "{}", asked.body);
    assert!(asked.body.contains("<h1>Confirm</h1>"));
    assert!(asked.body.contains("name=\"confirmed\" value=\"yes\""));
    assert!(!stats(queues.clone()).await.config.unwrap().paused);
    let done = act(addr, "X-None: 1", "queue=work&do=pause-queue&confirmed=yes").await;
    assert!(done.body.contains("is paused"), "{}", done.body);
    assert!(stats(queues.clone()).await.config.unwrap().paused);
    let page = get(addr, "/queue?name=work", None).await;
    assert!(page.body.contains("value=\"resume-queue\""));
    act(
        addr,
        "X-None: 1",
        "queue=work&do=resume-queue&confirmed=yes",
    )
    .await;
    assert!(!stats(queues.clone()).await.config.unwrap().paused);

    // Limits.
    let set = act(
        addr,
        "X-None: 1",
        "queue=work&max_in_flight=5&per_second=100&group_max_in_flight=0&do=limits&confirmed=yes",
    )
    .await;
    assert!(set.body.contains("5 in flight"), "{}", set.body);
    let config = stats(queues.clone()).await.config.unwrap();
    assert_eq!(config.max_in_flight, 5);
    assert_eq!(config.rate_limit.expect("a rate limit").limit, 100);
    let bad = act(addr, "X-None: 1", "queue=work&max_in_flight=x&do=limits").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("max_in_flight:"), "{}", bad.body);

    // Cancel chosen tasks.
    let cancelled = act(
        addr,
        "X-None: 1",
        "queue=work&id=a&id=b&do=cancel&confirmed=yes",
    )
    .await;
    assert!(
        cancelled.body.contains("2 of 2 tasks cancelled"),
        "{}",
        cancelled.body
    );
    assert_eq!(stats(queues.clone()).await.ready, 1);

    // Redrive a DEAD task, then all of them.
    queues
        .enqueue(EnqueueRequest {
            queue: "work".into(),
            tasks: ["x", "y"]
                .iter()
                .map(|id| TaskSpec {
                    id: (*id).into(),
                    max_attempts: 1,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .await?;
    act(addr, "X-None: 1", "queue=work&id=c&do=cancel&confirmed=yes").await;
    for _ in 0..2 {
        let leased = queues
            .lease(common::lease_of("work", 1))
            .await?
            .into_inner()
            .tasks;
        queues
            .nack(NackRequest {
                queue: "work".into(),
                receipt: leased[0].receipt.clone(),
                delay: None,
                ..Default::default()
            })
            .await?;
    }
    assert_eq!(stats(queues.clone()).await.dead, 2);
    let dead_page = get(addr, "/queue?name=work&state=dead", None).await;
    assert!(dead_page.body.contains("value=\"redrive\""));
    assert!(dead_page.body.contains("value=\"redrive-all\""));
    let one = act(
        addr,
        "X-None: 1",
        "queue=work&id=x&do=redrive&confirmed=yes",
    )
    .await;
    assert!(one.body.contains("1 of 1 task redriven"), "{}", one.body);
    let after = stats(queues.clone()).await;
    assert_eq!((after.ready, after.dead), (1, 1));
    let ready = queues
        .peek(PeekRequest {
            queue: "work".into(),
            state: turnstile::pb::TaskState::Ready as i32,
            ..Default::default()
        })
        .await?
        .into_inner()
        .tasks;
    assert_eq!(ready[0].id, "x");
    act(addr, "X-None: 1", "queue=work&do=redrive-all&confirmed=yes").await;
    let after = stats(queues.clone()).await;
    assert_eq!((after.ready, after.dead), (2, 0));

    // A group's pause.
    queues
        .enqueue(EnqueueRequest {
            queue: "work".into(),
            tasks: vec![TaskSpec {
                id: "g1".into(),
                group: "acme".into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .await?;
    act(
        addr,
        "X-None: 1",
        "queue=work&group=acme&do=pause-group&confirmed=yes",
    )
    .await;
    let groups = queues
        .list_groups(ListGroupsRequest {
            queue: "work".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .groups;
    let acme = groups.iter().find(|g| g.group == "acme").expect("acme");
    assert!(acme.config.as_ref().unwrap().paused);

    // A schedule's trigger and pause.
    let mut schedules = server.schedules().await;
    schedules
        .put_schedule(PutScheduleRequest {
            schedule: Some(turnstile::pb::Schedule {
                name: "nightly".into(),
                queue: "cron-jobs".into(),
                spec: Some(turnstile::pb::schedule::Spec::Cron("0 3 * * *".into())),
                ..Default::default()
            }),
        })
        .await?;
    let page = get(addr, "/schedules", None).await;
    assert!(page.body.contains("value=\"trigger-schedule\""));
    let fired = act(
        addr,
        "X-None: 1",
        "schedule=nightly&do=trigger-schedule&confirmed=yes",
    )
    .await;
    assert!(fired.body.contains("enqueued task"), "{}", fired.body);
    let mut cron_stats = server.queues().await;
    let cron = cron_stats
        .stats(StatsRequest {
            queue: "cron-jobs".into(),
        })
        .await?
        .into_inner();
    assert_eq!(cron.ready, 1);
    act(
        addr,
        "X-None: 1",
        "schedule=nightly&do=pause-schedule&confirmed=yes",
    )
    .await;
    let stored = schedules
        .get_schedule(GetScheduleRequest {
            name: "nightly".into(),
        })
        .await?
        .into_inner();
    assert!(stored.schedule.unwrap().paused);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_need_admin_and_a_form_of_this_origin() -> TestResult {
    use turnstile::pb::StatsRequest;
    let (_redis, server) = shop_and_rival().await;
    let addr = server.dashboard.expect("a dashboard");
    let origin = format!("http://{addr}");
    enqueue_as(&server, "shop-admin", "shop-orders").await;
    let paused = || async {
        let bearer: tonic::metadata::MetadataValue<_> = "Bearer shop-admin".parse().unwrap();
        let mut request = tonic::Request::new(StatsRequest {
            queue: "shop-orders".into(),
        });
        request.metadata_mut().insert("authorization", bearer);
        server
            .queues()
            .await
            .stats(request)
            .await
            .expect("stats")
            .into_inner()
            .config
            .unwrap()
            .paused
    };
    let pause = "queue=shop-orders&do=pause-queue&confirmed=yes";
    // A read-only token sees no buttons and is refused if it posts anyway.
    let page = get(addr, "/queue?name=shop-orders", Some("shop-reader")).await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("action=\"/action\""), "{}", page.body);
    let refused = act(addr, "Authorization: Bearer shop-reader", pause).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    // Another tenant's admin pauses its own (empty) queue of that name, not shop's.
    let other = act(addr, "Authorization: Bearer rival-admin", pause).await;
    assert_eq!(other.status, 200, "{}", other.body);
    assert!(!paused().await);
    // No one signed in: nothing.
    let nobody = act(addr, "X-None: 1", pause).await;
    assert_eq!(nobody.status, 401);
    // A signed-in admin's browser: a forged cross-site form is refused, with or
    // without the browser's Sec-Fetch-Site.
    let signed = sign_in(addr, "shop-admin", &origin).await;
    let cookie = format!("Cookie: {}", session_cookie(&signed).expect("a session"));
    for forged in [
        vec![cookie.clone(), "Sec-Fetch-Site: cross-site".to_owned()],
        vec![cookie.clone(), "Origin: http://evil.example".to_owned()],
        vec![cookie.clone()],
    ] {
        let answer = send(addr, "POST", "/action", &forged, pause).await;
        assert_eq!(answer.status, 403, "{forged:?}");
        assert!(!paused().await, "{forged:?}");
    }
    let page = send(
        addr,
        "GET",
        "/queue?name=shop-orders",
        std::slice::from_ref(&cookie),
        "",
    )
    .await;
    assert!(page.body.contains("value=\"pause-queue\""));
    let done = send(
        addr,
        "POST",
        "/action",
        &[cookie, format!("Origin: {origin}")],
        pause,
    )
    .await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(paused().await);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_charts_its_last_hour_from_redis_the_same_on_every_replica() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let other = TestServer::start(&redis).await;
    enqueue(&server, "charted", &["a", "b", "c", "d", "e"], None).await;
    let leased = server
        .queues()
        .await
        .lease(common::lease_of("charted", 3))
        .await?
        .into_inner()
        .tasks;
    assert_eq!(leased.len(), 3);
    for addr in [server.dashboard, other.dashboard] {
        let page = get(addr.expect("a dashboard"), "/queue?name=charted", None).await;
        assert!(
            page.body.contains("(3 deliveries in the last hour)"),
            "{}",
            page.body
        );
        // Recorded by the minute's first call: the enqueue (5), or the lease (2) when a
        // minute began between them.
        assert!(
            page.body.contains("(5 waiting at the last record)")
                || page.body.contains("(2 waiting at the last record)"),
            "{}",
            page.body
        );
        assert_eq!(page.body.matches("<rect class=\"bar\"").count(), 1);
    }
    Ok(())
}

/// The overview's live region as a tab refreshes it.
async fn live_overview(addr: SocketAddr) -> Answer {
    get(addr, "/live/overview?prefix=&sort=name", None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_regions_follow_the_queues_and_twenty_tabs_cost_redis_what_one_does() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let addr = server.dashboard.expect("a dashboard");
    enqueue(&server, "livequeue", &["a"], None).await;
    // The region is the page's own: the headline and the table, nothing around them.
    let first = live_overview(addr).await;
    assert_eq!(first.status, 200);
    assert_eq!(row(&first.body, "livequeue").expect("listed")[1], "1");
    assert!(
        first.body.starts_with("\n<dl class=\"headline\">"),
        "{}",
        first.body
    );
    assert!(!first.body.contains("<form"), "{}", first.body);
    let page = get(addr, "/", None).await;
    assert!(page
        .body
        .contains("<div data-live=\"/live/overview?prefix=&amp;sort=name\">"));
    // A change shows within a refresh period or two.
    enqueue(&server, "livequeue", &["b", "c"], None).await;
    common::eventually(
        "the live region shows the new tasks",
        common::WAIT,
        || async { row(&live_overview(addr).await.body, "livequeue").expect("listed")[1] == "3" },
    )
    .await;
    // Tabs refreshing ten times a second, one tab then twenty, for the same time.
    let mut spent = Vec::new();
    for tabs in [1, 20] {
        let before = redis.total_commands().await;
        let end = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
        let workers: Vec<_> = (0..tabs)
            .map(|_| {
                tokio::spawn(async move {
                    while tokio::time::Instant::now() < end {
                        assert_eq!(live_overview(addr).await.status, 200);
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.await?;
        }
        spent.push(redis.total_commands().await - before);
    }
    // One render per period serves every tab: twenty tabs cost what one does (the
    // slack covers a period boundary and the server's own idle commands).
    assert!(
        spent[1] <= 2 * spent[0] + 20,
        "Redis commands for 1 tab vs 20: {spent:?}"
    );
    Ok(())
}

/// `GET`/`POST` over TLS to the dashboard at `addr`, trusting `ca_pem`; the answer's
/// status line and head (lower-case) and body, as text.
async fn send_tls(addr: SocketAddr, ca_pem: &str, request: &str) -> Result<String, String> {
    use rustls_pki_types::{pem::PemObject, CertificateDer, ServerName};
    use tokio_rustls::{rustls, TlsConnector};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let mut tls = TlsConnector::from(std::sync::Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    // Until the server closes (a missing close_notify counts as the end).
    while let Ok(n) = tls.read(&mut buf).await {
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    Ok(String::from_utf8_lossy(&raw).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tls_the_dashboard_speaks_https_and_its_session_cookie_is_secure() -> TestResult {
    let redis = TestRedis::start().await;
    let (pki, ca) = common::Pki::new();
    let issued = common::Pki::issue(&ca, &["localhost", "127.0.0.1"]);
    let (cert, key) = (
        pki.write("server.pem", &issued.cert),
        pki.write("server.key", &issued.key),
    );
    let auth = write_auth_file(
        &redis.dir.0.join("auth.toml"),
        &[("shop-admin", "shop", &["admin"])],
    );
    let server = TestServer::start_tls(
        &redis,
        |config| {
            config.tls_cert = Some(cert.clone());
            config.tls_key = Some(key.clone());
            config.auth_file = Some(auth.clone());
        },
        Some(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(&pki.ca_pem))
                .domain_name("localhost"),
        ),
    )
    .await;
    let addr = server.dashboard.expect("a dashboard");
    let page = send_tls(
        addr,
        &pki.ca_pem,
        &format!("GET /sign-in HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
    .await?;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("<form method=\"post\" action=\"/sign-in\""));
    let form = "token=shop-admin";
    let signed = send_tls(
        addr,
        &pki.ca_pem,
        &format!(
            "POST /sign-in HTTP/1.1\r\nHost: {addr}\r\nOrigin: https://{addr}\r\nConnection: close\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        ),
    )
    .await?;
    assert!(signed.starts_with("HTTP/1.1 303"), "{signed}");
    let cookie = signed
        .lines()
        .find(|line| line.to_ascii_lowercase().starts_with("set-cookie:"))
        .expect("a session cookie");
    assert!(cookie.contains("; Secure"), "{cookie}");
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    // Plain HTTP gets no page.
    let plain = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        let mut socket = tokio::net::TcpStream::connect(addr).await?;
        socket
            .write_all(format!("GET /sign-in HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut raw = Vec::new();
        let _ = socket.read_to_end(&mut raw).await;
        Ok::<_, std::io::Error>(raw)
    })
    .await??;
    assert!(!String::from_utf8_lossy(&plain).contains("HTTP/1.1 200"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_asks_who_is_asking_and_shows_only_their_tenant() -> TestResult {
    let (_redis, server) = shop_and_rival().await;
    let addr = server.dashboard.expect("a dashboard");
    enqueue_as(&server, "shop-admin", "shop-secret-queue").await;
    let routes = [
        "/",
        "/queue?name=shop-secret-queue",
        "/task?queue=shop-secret-queue&id=t",
        "/schedules",
        "/locks",
        "/live/overview?prefix=&sort=name",
        "/live/queue?name=shop-secret-queue",
        "/live/locks?after=",
        "/live/schedules?",
    ];
    for route in routes {
        // Nobody: the sign-in form, nothing else.
        let nobody = get(addr, route, None).await;
        assert_eq!(nobody.status, 401, "{route}");
        assert!(!nobody.body.contains("shop-secret"), "{route}");
        // A read-only token of the tenant: the page, without a single action.
        let reader = get(addr, route, Some("shop-reader")).await;
        assert_eq!(reader.status, 200, "{route}: {}", reader.body);
        assert!(!reader.body.contains("action=\"/action\""), "{route}");
        // The admin of the tenant: actions where the page has them.
        let admin = get(addr, route, Some("shop-admin")).await;
        assert_eq!(admin.status, 200, "{route}");
        // Another tenant's admin: its own (empty) tenant, never shop's data.
        let rival = get(addr, route, Some("rival-admin")).await;
        assert!(!rival.body.contains("shop-secret-queue</a>"), "{route}");
        if route.starts_with("/task") {
            assert_eq!(rival.status, 404, "{route}");
        }
    }
    let admin = get(addr, "/queue?name=shop-secret-queue", Some("shop-admin")).await;
    assert!(admin.body.contains("action=\"/action\""));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_page_lists_open_streams_on_every_replica_and_drops_a_dead_replica_s(
) -> TestResult {
    use turnstile::pb::{subscribe_response::Event, SubscribeRequest};
    let redis = TestRedis::start().await;
    let (one, two) = (
        TestServer::start(&redis).await,
        TestServer::start(&redis).await,
    );
    let addr = one.dashboard.expect("a dashboard");
    let empty = get(addr, "/workers", None).await;
    assert!(
        empty.body.contains("No worker is subscribed"),
        "{}",
        empty.body
    );
    // A worker on the other replica, with a task in flight.
    let mut queues = two.queues().await;
    queues
        .enqueue(EnqueueRequest {
            queue: "packing".into(),
            tasks: vec![TaskSpec {
                id: "parcel-1".into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .await?;
    let mut stream = queues
        .subscribe(SubscribeRequest {
            queue: "packing".into(),
            max_in_flight: 2,
            visibility: ms(60_000),
            worker_id: "packer-7".into(),
        })
        .await?
        .into_inner();
    while !matches!(
        stream.message().await?.and_then(|m| m.event),
        Some(Event::Task(_))
    ) {}
    let replica = format!(":{}", two.addr.port());
    common::eventually("the stream listed", common::WAIT, || async {
        get(addr, "/workers", None).await.body.contains("packer-7")
    })
    .await;
    let page = get(addr, "/workers", None).await;
    let row = row(&page.body, "packing").expect("the stream's row");
    assert_eq!(row[1], "packer-7");
    assert!(row[2].ends_with(&replica), "{row:?}");
    assert_eq!(row[3], "1", "one delivery in flight");
    // The stream ends: its row goes.
    drop(stream);
    common::eventually("the stream gone", common::WAIT, || async {
        !get(addr, "/workers", None).await.body.contains("packer-7")
    })
    .await;
    // A replica that died without ending its streams (its liveness key gone): its
    // streams are dropped from the page.
    let _again = queues
        .subscribe(SubscribeRequest {
            queue: "packing".into(),
            worker_id: "packer-8".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    common::eventually("the second stream listed", common::WAIT, || async {
        get(addr, "/workers", None).await.body.contains("packer-8")
    })
    .await;
    let mut conn = redis.conn().await;
    let alive: Vec<String> = redis::cmd("KEYS")
        .arg("*:replica:*")
        .query_async(&mut conn)
        .await?;
    let dead = alive
        .iter()
        .find(|key| key.contains(&format!("{}", two.addr.port())))
        .expect("the other replica's liveness key");
    redis::cmd("DEL")
        .arg(dead)
        .query_async::<()>(&mut conn)
        .await?;
    assert!(!get(addr, "/workers", None).await.body.contains("packer-8"));
    Ok(())
}

/// Random dashboard requests, seeded (issue 43): paths (the routes and junk), query
/// strings of the pages' keys with hostile values, and form bodies for every action,
/// each POST with or without the same-origin mark. Never a 5xx; a POST without the mark
/// is refused (403) before it does anything; and the server keeps answering.
/// `TURNSTILE_FUZZ_SEED` replays a run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzzed_dashboard_requests_never_get_a_5xx_or_change_anything_cross_site() -> TestResult {
    let seed = common::ledger::seed_from("TURNSTILE_FUZZ_SEED");
    let mut rng = common::ledger::Rng(seed);
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let addr = server.dashboard.expect("a dashboard");
    let mut queues = server.queues().await;
    queues
        .enqueue(EnqueueRequest {
            queue: "q".into(),
            tasks: vec![TaskSpec {
                id: "t".into(),
                payload: b"x".to_vec().into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .await?;
    let paths = [
        "/",
        "/queue",
        "/task",
        "/schedules",
        "/locks",
        "/workers",
        "/live/overview",
        "/live/queue",
        "/live/locks",
        "/live/nope",
        "/static/app.css",
        "/nope",
        "/queue/x",
        "//",
        "/%ZZ",
        "/action",
        "/sign-in",
    ];
    let keys = [
        "name",
        "state",
        "after",
        "at",
        "prefix",
        "sort",
        "id",
        "view",
        "semaphore",
        "queue",
    ];
    let values = [
        "q",
        "",
        "dead",
        "in_flight",
        "completed",
        "t",
        "%FF%FE",
        "%00",
        "x%0Ay",
        "-1",
        "18446744073709551616",
        "t1.zz",
        "t1.",
        "json",
        "hex",
        "%3Cscript%3E",
        "a+b",
    ];
    let actions = [
        "pause-queue",
        "resume-queue",
        "limits",
        "pause-group",
        "resume-group",
        "redrive",
        "redrive-all",
        "cancel",
        "cancel-running",
        "trigger-schedule",
        "pause-schedule",
        "resume-schedule",
        "nope",
    ];
    let pick = |rng: &mut common::ledger::Rng, from: &[&'static str]| -> &'static str {
        from[rng.below(from.len() as u64) as usize]
    };
    for _ in 0..400 {
        let mut query = String::new();
        for n in 0..rng.below(4) {
            let sep = if n == 0 { "?" } else { "&" };
            query.push_str(&format!(
                "{sep}{}={}",
                pick(&mut rng, &keys),
                pick(&mut rng, &values)
            ));
        }
        let path = format!("{}{query}", pick(&mut rng, &paths));
        let answer = if rng.below(3) == 0 {
            let mut form = format!("do={}", pick(&mut rng, &actions));
            for _ in 0..rng.below(5) {
                let key = pick(
                    &mut rng,
                    &[
                        "queue",
                        "group",
                        "id",
                        "schedule",
                        "max_in_flight",
                        "per_second",
                        "group_max_in_flight",
                        "confirmed",
                    ],
                );
                let value = pick(
                    &mut rng,
                    &["q", "", "t", "yes", "-1", "99999999999", "%FF", "a"],
                );
                form.push_str(&format!("&{key}={value}"));
            }
            let same_origin = rng.below(2) == 0;
            let headers: Vec<String> = if same_origin {
                vec!["Sec-Fetch-Site: same-origin".into()]
            } else {
                [
                    vec![],
                    vec!["Sec-Fetch-Site: cross-site".into()],
                    vec!["Origin: http://evil.example".into()],
                ][rng.below(3) as usize]
                    .clone()
            };
            let target = if rng.below(4) == 0 {
                path.clone()
            } else {
                "/action".to_owned()
            };
            let answer = send(addr, "POST", &target, &headers, &form).await;
            if !same_origin && target == "/action" {
                assert_eq!(
                    answer.status, 403,
                    "cross-site {form} (TURNSTILE_FUZZ_SEED={seed})"
                );
            }
            answer
        } else {
            send(addr, "GET", &path, &[], "").await
        };
        assert!(
            answer.status < 500,
            "{path}: {} (TURNSTILE_FUZZ_SEED={seed})",
            answer.status
        );
    }
    // And it still serves.
    assert_eq!(get(addr, "/", None).await.status, 200);
    Ok(())
}
