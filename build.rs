//! Compiles `proto/` with protox (pure Rust, so a fresh machine needs no `protoc`) and
//! generates the tonic services, plus the descriptor set that server reflection serves.
//! Assembles the Lua scripts of each area (`src/<area>/lua/*.lua`) from the helpers
//! they include (`--- @include "name"` names `src/<area>/lua/include/<name>.lua`),
//! into one struct of scripts per area (`lua_<area>.rs`); `<area>/<name>` names a
//! helper of another area.

use std::{
    collections::BTreeSet,
    env,
    fmt::Write as _,
    path::{Path, PathBuf},
};

use prost::Message;

const PROTOS: [&str; 5] = [
    "proto/turnstile/v1/common.proto",
    "proto/turnstile/v1/lock.proto",
    "proto/turnstile/v1/queue.proto",
    "proto/turnstile/v1/schedule.proto",
    "proto/turnstile/v1/semaphore.proto",
];

/// The areas whose scripts are assembled, and the name of each one's struct.
const LUA_AREAS: [(&str, &str); 4] = [
    ("lock", "LockScripts"),
    ("queue", "QueueScripts"),
    ("schedule", "ScheduleScripts"),
    ("semaphore", "SemaphoreScripts"),
];

type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

fn main() -> Result<()> {
    let out = PathBuf::from(env::var("OUT_DIR")?);
    for (area, name) in LUA_AREAS {
        let dir = Path::new("src").join(area).join("lua");
        println!("cargo:rerun-if-changed={}", dir.display());
        std::fs::write(out.join(format!("lua_{area}.rs")), scripts_of(&dir, name)?)?;
    }
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(PROTOS, ["proto"])?;
    std::fs::write(out.join("turnstile_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Undecodable requests are INVALID_ARGUMENT naming the field (src/grpc/wire.rs).
        .codec_path("crate::grpc::wire::Codec")
        .bytes(".turnstile.v1.Task.payload")
        .bytes(".turnstile.v1.TaskSpec.payload")
        .compile_fds(fds)?;
    Ok(())
}

/// A script assembled from its file and the helpers it includes.
struct Assembled {
    text: String,
    /// Where each run of lines comes from: (its first line in `text`, the file, that
    /// line's number in the file).
    parts: Vec<(usize, String, usize)>,
}

/// The Rust of one area: its struct of scripts (a field per file of `dir`), `new()`
/// and `all()`.
fn scripts_of(dir: &Path, name: &str) -> Result<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|path| path.extension().is_some_and(|ext| ext == "lua"));
    files.sort();
    let mut fields = String::new();
    let mut new = String::new();
    let mut all = String::new();
    let mut statics = String::new();
    for file in &files {
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let assembled = assemble(file, &dir.join("include"))?;
        let parts: Vec<String> = assembled
            .parts
            .iter()
            .map(|(line, path, first)| format!("({line}, {path:?}, {first})"))
            .collect();
        let constant = stem.to_uppercase();
        writeln!(
            statics,
            "static {constant}: Source = Source {{ name: {:?}, text: {:?}, parts: &[{}] }};",
            format!("{stem}.lua"),
            assembled.text,
            parts.join(", ")
        )?;
        writeln!(
            fields,
            "    /// `{}`.\n    pub(crate) {stem}: Script,",
            file.display()
        )?;
        writeln!(new, "            {stem}: Script::assembled(&{constant}),")?;
        writeln!(all, "            &self.{stem},")?;
    }
    Ok(format!(
        "/// The scripts of `{dir}`, each assembled with the helpers it includes (generated\n\
         /// by build.rs: a new file there is a new field here), loaded at boot.\n\
         #[derive(Debug)]\n\
         pub struct {name} {{\n{fields}}}\n\n\
         impl Default for {name} {{\n    fn default() -> Self {{\n        Self {{\n{new}        }}\n    }}\n}}\n\n\
         impl {name} {{\n    /// Every script of the area (also what the scripts' own tests run).\n    pub fn new() -> Self {{\n        Self::default()\n    }}\n\n\
         \x20   /// Every script, for `SCRIPT LOAD` at boot and for the scripts' own tests.\n\
         \x20   pub fn all(&self) -> [&Script; {count}] {{\n        [\n{all}        ]\n    }}\n}}\n\n{statics}",
        dir = dir.display(),
        count = files.len(),
    ))
}

/// `file` with the helpers it includes (and theirs) in front, each once, each before
/// whatever includes it; a `#!lua` line stays first, as Redis wants it.
fn assemble(file: &Path, include_dir: &Path) -> Result<Assembled> {
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for name in includes_of(file)? {
        visit(&name, include_dir, &mut seen, &mut order, &mut Vec::new())?;
    }
    let text = std::fs::read_to_string(file)?;
    let mut assembled = Assembled {
        text: String::new(),
        parts: Vec::new(),
    };
    let mut own = text.as_str();
    let mut own_first = 1;
    if own.starts_with("#!lua") {
        let end = own.find('\n').map_or(own.len(), |at| at + 1);
        push(&mut assembled, &own[..end], file, 1);
        own = &own[end..];
        own_first = 2;
    }
    for helper in &order {
        let path = helper_path(helper, include_dir);
        push(&mut assembled, &std::fs::read_to_string(&path)?, &path, 1);
    }
    push(&mut assembled, own, file, own_first);
    Ok(assembled)
}

/// Appends `text` (lines of `file` from `first`) and records where it came from.
fn push(assembled: &mut Assembled, text: &str, file: &Path, first: usize) {
    let line = assembled.text.lines().count() + 1;
    assembled
        .parts
        .push((line, file.display().to_string(), first));
    assembled.text.push_str(text);
    if !assembled.text.ends_with('\n') {
        assembled.text.push('\n');
    }
}

/// Depth first: a helper's own includes go before it.
fn visit(
    name: &str,
    include_dir: &Path,
    seen: &mut BTreeSet<String>,
    order: &mut Vec<String>,
    path: &mut Vec<String>,
) -> Result<()> {
    if seen.contains(name) {
        return Ok(());
    }
    if path.iter().any(|on| on == name) {
        return Err(format!("lua include cycle: {} -> {name}", path.join(" -> ")).into());
    }
    let file = helper_path(name, include_dir);
    if !file.exists() {
        return Err(format!("lua include {name:?}: no {}", file.display()).into());
    }
    path.push(name.to_owned());
    for inner in includes_of(&file)? {
        visit(&inner, include_dir, seen, order, path)?;
    }
    path.pop();
    seen.insert(name.to_owned());
    order.push(name.to_owned());
    Ok(())
}

/// Where the helper `name` is: `include_dir/<name>.lua`, or for `<area>/<name>` (a
/// helper another area shares, `lock/same_attach`) `src/<area>/lua/include/<name>.lua`.
fn helper_path(name: &str, include_dir: &Path) -> PathBuf {
    match name.split_once('/') {
        Some((area, name)) => Path::new("src")
            .join(area)
            .join("lua")
            .join("include")
            .join(format!("{name}.lua")),
        None => include_dir.join(format!("{name}.lua")),
    }
}

/// The names of `file`'s `--- @include "name"` lines.
fn includes_of(file: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(file)?;
    Ok(text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("--- @include "))
        .map(|name| name.trim().trim_matches('"').to_owned())
        .collect())
}
