//! The layers of the library (ARCHITECTURE.md): every module imports only from layers
//! below its own, so there is no import circle and nothing low reaches up. Read from
//! the source: each `crate::…` path outside comments and unit tests names the
//! top-level module it uses.

use std::{collections::BTreeSet, path::Path};

/// Each top-level module of `src/` and its layer; a module may use only modules of a
/// lower layer. `cli/` and `main.rs` are the binary, not the library.
const LAYERS: &[(&str, u8)] = &[
    // Foundations, themselves in order.
    ("error", 0),
    ("token", 0),
    ("method", 0),
    ("time", 1),
    ("shutdown", 1),
    ("limits", 1),
    ("validate", 2),
    ("tenant", 3),
    // Below the domain.
    ("metrics", 4),
    ("auth", 5),
    ("redis", 5),
    // The domain.
    ("lock", 6),
    ("queue", 6),
    // Built on the locks' leases and Hold engine; enqueues through the queue store.
    ("semaphore", 7),
    ("schedule", 7),
    // The gRPC face, and the dashboard beside it; `pb` is its generated types
    // (`grpc/pb.rs`), re-exported at the top.
    ("grpc", 8),
    ("pb", 8),
    ("web", 8),
    // The Rust client library: allowed only `pb` and the foundations (below).
    ("client", 9),
    // The benchmark's entry: the stores' scripts straight on Redis, and the server's
    // accept loop.
    ("floor", 9),
    // Composition.
    ("config", 9),
    ("server", 10),
];

fn layer(module: &str) -> u8 {
    LAYERS
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, layer)| *layer)
        .unwrap_or_else(|| panic!("src/{module} has no layer in tests/it/layers.rs"))
}

/// The source without comments and without its `#[cfg(test)]` module (unit tests may
/// use anything).
fn code_of(source: &str) -> String {
    let source = source
        .find("#[cfg(test)]\nmod tests")
        .map_or(source, |at| &source[..at]);
    source
        .lines()
        .map(|line| match line.trim_start().starts_with("//") {
            true => "",
            false => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules `code` names through `crate::` (`crate::redis::Keys`, and
/// each item of `use crate::{a::b, c}`).
fn uses(code: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let ident = |text: &str| -> String {
        text.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start && depth == 0 => {
                        used.insert(ident(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            used.insert(ident(rest));
        }
    }
    used.retain(|name| !name.is_empty());
    used
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_module_imports_only_from_layers_below_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if ["cli", "main", "lib"].contains(&top.as_str()) {
            continue;
        }
        checked += 1;
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        for used in uses(&code) {
            // The client reaches the server over gRPC only, never through its code.
            let client_reaching = top == "client" && used != "pb" && layer(&used) > 1;
            if used != top && (layer(&used) >= layer(&top) || client_reaching) {
                wrong.push(format!("src/{} uses crate::{used}", relative.display()));
            }
        }
    }
    assert!(checked > 40, "only {checked} files read");
    assert!(
        wrong.is_empty(),
        "imports that do not point down:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_import_reader_sees_paths_and_groups_but_not_comments() {
    let code = code_of(
        "use crate::{\n    error::{Error, Result},\n    redis::{keys::Event, Redis},\n    time,\n};\n\
         // crate::server in a comment\nfn f() { crate::grpc::rpc::record(\"a\", \"b\"); }\n\
         #[cfg(test)]\nmod tests { use crate::config; }\n",
    );
    let found: Vec<String> = uses(&code).into_iter().collect();
    assert_eq!(found, ["error", "grpc", "redis", "time"]);
}

/// Only the gRPC face knows tonic and the protobuf types (the Rust client library is a
/// gRPC client, and the generated `pb` lives in the face): the domain, the dashboard,
/// the composition root and the foundations never import them.
#[test]
fn only_the_grpc_face_and_the_client_import_tonic_or_prost() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut offenders = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src") {
            let path = entry.expect("entry").path();
            let relative = path.strip_prefix(&src).expect("under src");
            let top = relative.components().next().expect("a name");
            let top = top.as_os_str().to_string_lossy();
            if ["grpc", "client", "cli", "main.rs", "lib.rs"].contains(&top.as_ref()) {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let code = code_of(&std::fs::read_to_string(&path).expect("source"));
                for name in ["tonic", "tonic_health", "prost", "prost_types"] {
                    if code.contains(&format!("{name}::")) {
                        offenders.push(format!("{} uses {name}", relative.display()));
                    }
                }
            }
        }
    }
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}
