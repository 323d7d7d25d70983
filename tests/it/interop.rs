//! Clients in other languages against a real server: Python (grpcio, stubs generated
//! from `proto/` at test time), Node (`@grpc/grpc-js` with `@grpc/proto-loader`) and Go
//! (grpc-go on the stubs protoc-gen-go and protoc-gen-go-grpc made, `sdk/go/pb`, none of
//! the library) and Java (grpc-java on stubs protoc and protoc-gen-grpc-java generate in
//! its Maven build, none of the library), each doing a lock round trip, Hold with a re-attach by token, Enqueue, Subscribe and
//! Ack (`tests/interop/`). Their toolchains are set up once per target directory
//! (a venv, a node_modules); where one cannot be installed the test says why and skips
//! (under CI, where every toolchain is installed, it fails instead).

use crate::common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use common::{TempDir, TestRedis, TestResult, TestServer};

/// Where the toolchains are kept between runs.
fn cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs a set-up step; why it failed, for the skip message.
fn step(command: &mut Command, what: &str) -> Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("{what}: {err}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what}: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// A venv with grpcio and grpcio-tools, made once; its python.
pub fn python_env() -> Result<PathBuf, String> {
    let venv = cache().join("interop-python");
    let python = venv.join("bin").join("python");
    let ready = venv.join(".installed");
    if !ready.exists() {
        let _ = std::fs::remove_dir_all(&venv);
        step(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "python3 -m venv",
        )?;
        step(
            Command::new(&python).args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "grpcio",
                "grpcio-tools",
            ]),
            "pip install grpcio grpcio-tools",
        )?;
        std::fs::write(&ready, "").map_err(|err| err.to_string())?;
    }
    Ok(python)
}

/// `@grpc/grpc-js` and `@grpc/proto-loader` installed once; the node_modules dir.
pub fn node_env() -> Result<PathBuf, String> {
    let dir = cache().join("interop-node");
    let ready = dir.join(".installed");
    if !ready.exists() {
        step(Command::new("node").arg("--version"), "node")?;
        std::fs::create_dir_all(&dir).map_err(|err| err.to_string())?;
        std::fs::copy(
            repo().join("tests/interop/node/package.json"),
            dir.join("package.json"),
        )
        .map_err(|err| err.to_string())?;
        step(
            Command::new("npm")
                .args(["install", "--silent", "--no-audit", "--no-fund"])
                .current_dir(&dir),
            "npm install",
        )?;
        std::fs::write(&ready, "").map_err(|err| err.to_string())?;
    }
    Ok(dir.join("node_modules"))
}

/// Says why a test does not run, where `cargo test` shows it; under CI (`CI` set),
/// where every toolchain is installed, a missing one fails the test instead.
fn skip(test: &str, why: &str) -> TestResult {
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run {test}: its toolchain could not be set up: {why}"
    );
    eprintln!("SKIPPED {test}: its toolchain could not be set up: {why}");
    Ok(())
}

/// Runs a client to its end (bounded); panics with its output unless it succeeded.
async fn run_client(command: &mut tokio::process::Command, expect: &str) -> TestResult {
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the client ends within 120 s")?;
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{}\n{out}\n{err}", output.status);
    assert!(out.contains(expect), "{out}\n{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_client_generated_from_the_protos_holds_reattaches_and_works_a_queue() -> TestResult
{
    let python = match tokio::task::spawn_blocking(python_env).await? {
        Ok(python) => python,
        Err(why) => return skip("python interop", &why),
    };
    let stubs = TempDir::new("py-stubs");
    let proto = repo().join("proto");
    let protos: Vec<PathBuf> = ["common", "lock", "queue"]
        .iter()
        .map(|f| proto.join(format!("turnstile/v1/{f}.proto")))
        .collect();
    step(
        Command::new(&python)
            .args(["-m", "grpc_tools.protoc", "-I"])
            .arg(&proto)
            .arg(format!("--python_out={}", stubs.0.display()))
            .arg(format!("--grpc_python_out={}", stubs.0.display()))
            .args(&protos),
        "protoc for python",
    )?;
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    run_client(
        tokio::process::Command::new(&python)
            .arg(repo().join("tests/interop/python/interop.py"))
            .arg(&stubs.0)
            .arg(server.addr.to_string())
            .arg(server.metrics.to_string()),
        "python interop ok",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_client_loading_the_protos_holds_reattaches_and_works_a_queue() -> TestResult {
    let modules = match tokio::task::spawn_blocking(node_env).await? {
        Ok(modules) => modules,
        Err(why) => return skip("node interop", &why),
    };
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    run_client(
        tokio::process::Command::new("node")
            .arg(repo().join("tests/interop/node/interop.js"))
            .arg(repo().join("proto"))
            .arg(server.addr.to_string())
            .arg(server.metrics.to_string())
            .env("NODE_PATH", &modules),
        "node interop ok",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_client_on_the_generated_stubs_holds_reattaches_and_works_a_queue() -> TestResult {
    let client = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("interop-go");
    let built = tokio::task::spawn_blocking({
        let client = client.clone();
        move || {
            step(
                Command::new("go")
                    .args(["build", "-o"])
                    .arg(&client)
                    .arg(".")
                    .current_dir(repo().join("tests/interop/go")),
                "go build",
            )
        }
    })
    .await?;
    if let Err(why) = built {
        return skip("go interop", &why);
    }
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    run_client(
        tokio::process::Command::new(&client)
            .arg(server.addr.to_string())
            .arg(server.metrics.to_string()),
        "go interop ok",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_client_on_the_generated_stubs_holds_reattaches_and_works_a_queue() -> TestResult {
    let project = repo().join("tests/interop/java");
    let built = tokio::task::spawn_blocking({
        let project = project.clone();
        move || {
            step(
                Command::new("mvn")
                    .args(["-q", "-B", "package", "dependency:build-classpath"])
                    .arg("-Dmdep.outputFile=target/classpath.txt")
                    .current_dir(&project),
                "mvn package",
            )
        }
    })
    .await?;
    if let Err(why) = built {
        return skip("java interop", &why);
    }
    let classpath = std::fs::read_to_string(project.join("target/classpath.txt"))?;
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    run_client(
        tokio::process::Command::new("java")
            .arg("-cp")
            .arg(format!(
                "{}:{}",
                project.join("target/classes").display(),
                classpath.trim()
            ))
            .arg("interop.Interop")
            .arg(server.addr.to_string())
            .arg(server.metrics.to_string()),
        "java interop ok",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpp_client_on_the_generated_stubs_holds_reattaches_and_works_a_queue() -> TestResult {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("interop-cpp");
    let built = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || {
            std::fs::create_dir_all(&dir).map_err(|err| err.to_string())?;
            // Stubs from the protos as they are now, then the client built against
            // them and Debian's libgrpc++ (about 20 s).
            step(
                Command::new("bash")
                    .args([
                        "-euc",
                        "protoc -I \"$1/proto\" --cpp_out=. --grpc_out=. \
                           --plugin=protoc-gen-grpc=\"$(command -v grpc_cpp_plugin)\" \
                           \"$1\"/proto/turnstile/v1/{common,lock,queue}.proto; \
                         g++ -std=c++17 -I . -o interop \"$1/tests/interop/cpp/interop.cc\" \
                           turnstile/v1/*.cc $(pkg-config --cflags --libs grpc++ protobuf)",
                        "build",
                    ])
                    .arg(repo())
                    .current_dir(&dir),
                "protoc and g++ (libgrpc++-dev, protobuf-compiler-grpc)",
            )
        }
    })
    .await?;
    if let Err(why) = built {
        return skip("c++ interop", &why);
    }
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    run_client(
        tokio::process::Command::new(dir.join("interop"))
            .arg(server.addr.to_string())
            .arg(server.metrics.to_string()),
        "cpp interop ok",
    )
    .await
}
