//! Tidy checks over the source tree, in the manner of rust-analyzer's `tidy.rs`: the crates
//! depend on each other only downwards, in the crate order written in ARCHITECTURE.md (section
//! "Crates"); the library's modules (the kernel crate's `kernel/src/` and the core crate's `src/`)
//! import only downwards, in the layer order written there (section "Layers"); and the files of
//! one directory never import each other in a circle.
//!
//! The checks read the source as text: comments and string literals are blanked, `#[cfg(test)]`
//! modules are skipped (a test may use a higher layer to drive a lower one), and every path that
//! starts at `crate::` (or climbs out of its top-level module through `super::`) names the module
//! it reaches. `crate::DataType`, `crate::Tensor`, `crate::Error` and `crate::Result` are the
//! crate root's re-exports of `dtype`, `tensor` and `error`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first, as ARCHITECTURE.md writes them: the first fenced block after the
/// heading `## Layers`, one line of module names, layers separated by `→` and modules sharing a
/// layer by `,`. Modules sharing a layer may not import each other either.
fn layers_from_architecture(text: &str) -> Vec<Vec<String>> {
    order_under(text, "Layers")
}

/// The crates, lowest first, as ARCHITECTURE.md writes them under `## Crates`, in the form of
/// the layers: a crate depends only on crates to its left.
fn crates_from_architecture(text: &str) -> Vec<Vec<String>> {
    order_under(text, "Crates")
}

/// The line of names separated by `→` (and `,` within a step) in the first fenced block after
/// the heading `## {heading}`.
fn order_under(text: &str, heading: &str) -> Vec<Vec<String>> {
    let section = text
        .split_once(&format!("\n## {heading}"))
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has a `## {heading}` section"));
    let block = section
        .split("```")
        .nth(1)
        .unwrap_or_else(|| panic!("the {heading} section opens with a fenced block"));
    let line = block
        .lines()
        .find(|l| l.contains('→'))
        .expect("the block has a line of layers separated by →");
    line.split('→')
        .map(|layer| {
            layer
                .split(',')
                .map(|m| m.trim().to_string())
                .filter(|m| !m.is_empty())
                .collect()
        })
        .collect()
}

/// The source with comments, string and character literals replaced by spaces (line breaks
/// kept, so line numbers stay true).
fn blank_comments_and_strings(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |c: u8| if c == b'\n' { b'\n' } else { b' ' };
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if b[i] == b'r' && (b[i..].starts_with(b"r#\"") || b[i..].starts_with(b"r\"")) {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            out.push(b'r');
            i += 1 + hashes + 1;
            out.extend(std::iter::repeat_n(b' ', hashes + 1));
            while i < b.len() && !b[i..].starts_with(&close) {
                out.push(blank(b[i]));
                i += 1;
            }
            out.extend(std::iter::repeat_n(b' ', close.len().min(b.len() - i)));
            i += close.len();
        } else if b[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                let step = if b[i] == b'\\' { 2 } else { 1 };
                for k in 0..step.min(b.len() - i) {
                    out.push(blank(b[i + k]));
                }
                i += step;
            }
            out.push(b' ');
            i += 1;
        } else if b[i] == b'\'' && is_char_literal(&b[i..]) {
            let len = char_literal_len(&b[i..]);
            out.extend(std::iter::repeat_n(b' ', len));
            i += len;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a `'` starts a character literal rather than a lifetime or label.
fn is_char_literal(b: &[u8]) -> bool {
    match b.get(1) {
        Some(b'\\') => true,
        Some(_) => char_literal_len(b) > 0 && b.get(char_literal_len(b) - 1) == Some(&b'\''),
        None => false,
    }
}

/// The byte length of the character literal at the start of `b` (`'x'`, `'\n'`, `'é'`).
fn char_literal_len(b: &[u8]) -> usize {
    if b.get(1) == Some(&b'\\') {
        return b[2..].iter().position(|&c| c == b'\'').map_or(0, |p| p + 3);
    }
    let width = match b.get(1) {
        Some(&c) if c < 0x80 => 1,
        Some(&c) if c >= 0xf0 => 4,
        Some(&c) if c >= 0xe0 => 3,
        Some(_) => 2,
        None => return 0,
    };
    if b.get(1 + width) == Some(&b'\'') {
        width + 2
    } else {
        0
    }
}

/// The source with every `#[cfg(test)]` item blanked (it ends at its closing brace, or its `;`).
fn without_test_items(src: &str) -> String {
    let mut out = src.as_bytes().to_vec();
    let mut from = 0;
    while let Some(at) = src[from..].find("#[cfg(test)]").map(|p| p + from) {
        let mut depth = 0usize;
        let mut end = src.len();
        for (k, c) in src[at..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = at + k + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = at + k + 1;
                    break;
                }
                _ => {}
            }
        }
        for c in &mut out[at..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One reference from a file to another module: the line it is on and the path as written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reference {
    line: usize,
    path: Vec<String>,
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path starting with `start` (`crate` or `super`), with `{…}` groups expanded into one
/// path per item.
fn paths_from(code: &str, start: &str) -> Vec<Reference> {
    let mut found = Vec::new();
    let pattern = format!("{start}::");
    let mut from = 0;
    while let Some(at) = code[from..].find(&pattern).map(|p| p + from) {
        from = at + pattern.len();
        if code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| is_ident(c) || c == ':')
        {
            continue;
        }
        let line = code[..at].matches('\n').count() + 1;
        for path in expand(&code[at..]) {
            found.push(Reference { line, path });
        }
    }
    found
}

/// The paths a `use` tree or path expression starting at the head of `s` names.
fn expand(s: &str) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    let mut rest = s;
    loop {
        let ident: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        if ident.is_empty() {
            break;
        }
        prefix.push(ident.clone());
        rest = rest[ident.len()..].trim_start();
        let Some(after) = rest.strip_prefix("::") else {
            return vec![prefix];
        };
        rest = after.trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut items = Vec::new();
            let mut item_start = 0;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            items.push(&group[item_start..k]);
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        items.push(&group[item_start..k]);
                        item_start = k + 1;
                    }
                    _ => {}
                }
            }
            return items
                .into_iter()
                .map(str::trim_start)
                .filter(|item| !item.is_empty())
                .flat_map(|item| {
                    expand(item).into_iter().map(|tail| {
                        let mut p = prefix.clone();
                        p.extend(tail);
                        p
                    })
                })
                .collect();
        }
    }
    if prefix.is_empty() {
        Vec::new()
    } else {
        vec![prefix]
    }
}

/// The top-level module a path reaches, seen from a file in top-level module `top` whose module
/// path below `top` is `depth` deep; `None` when the path stays inside `top`.
fn reached_module(reference: &Reference, top: &str, depth: usize) -> Option<String> {
    let path = &reference.path;
    let first = path.first()?;
    let named = if first == "crate" {
        path.get(1)?.clone()
    } else {
        let climbs = path.iter().take_while(|s| *s == "super").count();
        if climbs <= depth {
            return None;
        }
        path.get(climbs)?.clone()
    };
    let module = match named.as_str() {
        "DataType" => "dtype".to_string(),
        "Tensor" => "tensor".to_string(),
        "Error" | "Result" => "error".to_string(),
        "self" => return None,
        m => m.to_string(),
    };
    (module != top).then_some(module)
}

/// A source file: the source directory of its crate (`src`, `kernel/src`, ...), its path
/// relative to that directory, and its text.
struct Source {
    root: &'static str,
    rel: PathBuf,
    text: String,
}

impl Source {
    /// The file's path from the repository root, for messages.
    fn shown(&self) -> String {
        format!("{}/{}", self.root, self.rel.display())
    }

    /// The top-level module (`ops` for `ops/nn/conv.rs`, `io` for `io.rs`) and how many module
    /// levels the file sits below it (`ops/nn/conv.rs` is 2, `ops/mod.rs` and `io.rs` are 0).
    fn module(&self) -> (String, usize) {
        let parts: Vec<String> = self
            .rel
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let top = parts[0].trim_end_matches(".rs").to_string();
        let last = parts.last().map(String::as_str);
        let depth = parts.len() - 1 - usize::from(matches!(last, Some("mod.rs")));
        (top, depth)
    }
}

/// Each name of an order (layers or crates) with the index of its step, lowest first.
fn ranks(order: &[Vec<String>]) -> BTreeMap<&str, usize> {
    order
        .iter()
        .enumerate()
        .flat_map(|(k, step)| step.iter().map(move |m| (m.as_str(), k)))
        .collect()
}

/// An order as ARCHITECTURE.md writes it, for messages.
fn shown(order: &[Vec<String>]) -> String {
    order
        .iter()
        .map(|step| step.join(", "))
        .collect::<Vec<_>>()
        .join(" → ")
}

/// Every upward (or sideways, within a layer) import in `sources`, one message each.
fn layer_violations(sources: &[Source], layers: &[Vec<String>]) -> Vec<String> {
    let (rank, order) = (ranks(layers), shown(layers));
    let mut problems = Vec::new();
    for source in sources {
        let (top, depth) = source.module();
        if top == "lib" || top == "main" {
            continue;
        }
        let Some(&own) = rank.get(top.as_str()) else {
            problems.push(format!(
                "{}: module `{top}` is in no layer of ARCHITECTURE.md (layers, lowest first: {order})",
                source.shown()
            ));
            continue;
        };
        let code = without_test_items(&blank_comments_and_strings(&source.text));
        let mut refs = paths_from(&code, "crate");
        refs.extend(paths_from(&code, "super"));
        for r in refs {
            let Some(target) = reached_module(&r, &top, depth) else {
                continue;
            };
            let Some(&theirs) = rank.get(target.as_str()) else {
                continue;
            };
            if theirs >= own {
                let how = if theirs == own { "across" } else { "up" };
                problems.push(format!(
                    "{}:{}: `{}` goes {how} from layer `{top}` to `{target}` (layers, lowest first: {order})",
                    source.shown(),
                    r.line,
                    r.path.join("::"),
                ));
            }
        }
    }
    problems
}

/// Circles among the files of one directory: `a` imports `super::b` and `b`, directly or not,
/// imports `a`. `mod.rs` is the directory's own module and takes no part.
fn sibling_cycles(sources: &[Source]) -> Vec<String> {
    let mut graphs: BTreeMap<PathBuf, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for source in sources {
        let dir = dir_of_module(&source.rel);
        if dir.as_os_str().is_empty() {
            continue;
        }
        let dir = Path::new(source.root).join(dir);
        let name = sibling_name(&source.rel);
        let code = without_test_items(&blank_comments_and_strings(&source.text));
        let edges = graphs
            .entry(dir)
            .or_default()
            .entry(name.clone())
            .or_default();
        // `super::` names the directory's module both from `rows.rs` and from `simd/mod.rs`.
        for r in paths_from(&code, "super") {
            if r.path.len() > 1 && r.path[0] == "super" && r.path[1] != "super" && r.path[1] != name
            {
                edges.insert(r.path[1].clone());
            }
        }
    }
    let mut problems = Vec::new();
    for (dir, graph) in &graphs {
        let mut reported = BTreeSet::new();
        for start in graph.keys() {
            if let Some(cycle) = find_cycle(graph, start) {
                let mut key = cycle[1..].to_vec();
                key.sort();
                key.dedup();
                if reported.insert(key) {
                    problems.push(format!(
                        "{}/: the files {} import each other in a circle",
                        dir.display(),
                        cycle.join(" → ")
                    ));
                }
            }
        }
    }
    problems
}

/// `rows` for `gather/fast/rows.rs`, `simd` for `gather/fast/simd/mod.rs`.
fn sibling_name(rel: &Path) -> String {
    if rel.ends_with("mod.rs") {
        rel.parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        rel.file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// The directory whose files are the siblings of `rel`'s module.
fn dir_of_module(rel: &Path) -> PathBuf {
    let parent = rel.parent().unwrap_or(Path::new(""));
    if rel.ends_with("mod.rs") {
        parent.parent().unwrap_or(Path::new("")).to_path_buf()
    } else {
        parent.to_path_buf()
    }
}

/// A path from `start` back to `start` through `graph`, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        at: &str,
        start: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in graph.get(at).into_iter().flatten() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if visit(graph, next, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    let mut seen = BTreeSet::new();
    visit(graph, start, start, &mut path, &mut seen).then_some(path)
}

/// The source directories of the workspace's crates, from the repository root: the kernel
/// crate, the core crate, the command line, the onnxruntime library and the Python module.
const SOURCE_ROOTS: [&str; 5] = ["kernel/src", "src", "cli/src", "ort-op/src", "python/src"];

/// The crates whose modules are in the layers: the kernel crate's and the core crate's.
const LIBRARY_ROOTS: [&str; 2] = ["kernel/src", "src"];

/// Every Rust file under the source directory `root` (one of [`SOURCE_ROOTS`]), sorted by path.
fn sources_under(root_name: &'static str) -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(root_name);
    let mut files = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(&root)
                    .expect("under its root")
                    .to_path_buf();
                let text = std::fs::read_to_string(&path).expect("a UTF-8 source file");
                files.push(Source {
                    root: root_name,
                    rel,
                    text,
                });
            }
        }
    }
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    files
}

/// Every Rust file of every crate of the workspace.
fn all_sources() -> Vec<Source> {
    SOURCE_ROOTS.into_iter().flat_map(sources_under).collect()
}

/// The library's files: the kernel crate's and the core crate's. The command line and the other
/// faces use the library by name, from the crates above it.
fn library_sources() -> Vec<Source> {
    LIBRARY_ROOTS.into_iter().flat_map(sources_under).collect()
}

/// Files longer than this many lines say at their top why they are one file.
const LONG_FILE_LINES: usize = 800;

/// The files of more than [`LONG_FILE_LINES`] lines whose leading `//!` block has no paragraph
/// starting `Why one file:`.
fn long_files_without_a_reason(sources: &[Source]) -> Vec<String> {
    sources
        .iter()
        .filter(|s| s.text.lines().count() > LONG_FILE_LINES)
        .filter(|s| {
            !s.text
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .any(|l| l.starts_with("//! Why one file: "))
        })
        .map(|s| {
            format!(
                "{} has {} lines and no `//! Why one file:` paragraph at its top",
                s.shown(),
                s.text.lines().count()
            )
        })
        .collect()
}

/// A crate of the workspace: its package name and the workspace crates it depends on (by path,
/// in any dependency section: normal, dev, build).
struct Crate {
    name: String,
    uses: Vec<String>,
}

/// Every crate dependency that does not go to a crate further left in `order` (or whose crate
/// is in no step of it), one message each.
fn crate_violations(crates: &[Crate], order: &[Vec<String>]) -> Vec<String> {
    let (rank, shown) = (ranks(order), shown(order));
    let mut problems = Vec::new();
    for krate in crates {
        let Some(&own) = rank.get(krate.name.as_str()) else {
            problems.push(format!(
                "crate `{}` is in no step of ARCHITECTURE.md's crates (lowest first: {shown})",
                krate.name
            ));
            continue;
        };
        for used in &krate.uses {
            if rank.get(used.as_str()).is_none_or(|&theirs| theirs >= own) {
                problems.push(format!(
                    "crate `{}` depends on `{used}`, which is not below it (crates, lowest first: {shown})",
                    krate.name
                ));
            }
        }
    }
    problems
}

/// The value of the first `key = "value"` line of `manifest` in section `[section]`.
fn manifest_value(manifest: &str, section: &str, key: &str) -> Option<String> {
    let mut current = "";
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            current = line;
        } else if current == format!("[{section}]") {
            let value = line
                .strip_prefix(key)
                .and_then(|rest| rest.trim_start().strip_prefix('='));
            if let Some(value) = value {
                return Some(value.trim().trim_matches('"').to_string());
            }
        }
    }
    None
}

/// The `path = "..."` of every dependency of `manifest`, in every dependency section.
fn path_dependencies(manifest: &str) -> Vec<String> {
    let mut current = "";
    let mut paths = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            current = line;
        } else if current.contains("dependencies") {
            if let Some((_, rest)) = line.split_once("path = \"") {
                paths.extend(rest.split('"').next().map(str::to_string));
            }
        }
    }
    paths
}

/// The workspace's crates, read from the root manifest's `members` and each member's manifest.
fn workspace_crates() -> Vec<Crate> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |dir: &Path| {
        std::fs::read_to_string(dir.join("Cargo.toml")).expect("a member's Cargo.toml is readable")
    };
    let members = manifest_value(&read(root), "workspace", "members")
        .expect("the root manifest lists the workspace's members on one line");
    let dirs: Vec<PathBuf> = members
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| root.join(m).canonicalize().expect("a member's directory"))
        .collect();
    let name_of = |dir: &Path| {
        manifest_value(&read(dir), "package", "name").expect("a member's manifest names it")
    };
    dirs.iter()
        .map(|dir| Crate {
            name: name_of(dir),
            uses: path_dependencies(&read(dir))
                .iter()
                .map(|p| name_of(&dir.join(p).canonicalize().expect("a path dependency")))
                .collect(),
        })
        .collect()
}

fn architecture_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    std::fs::read_to_string(path).expect("ARCHITECTURE.md is readable")
}

#[test]
fn crates_depend_down_the_crate_order() {
    let problems = crate_violations(
        &workspace_crates(),
        &crates_from_architecture(&architecture_text()),
    );
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn crate_check_cases() {
    let order = crates_from_architecture(
        "# A\n\n## Crates\n\n```\nk → core, ort → cli\n```\n\n## Layers\n",
    );
    let krate = |name: &str, uses: &[&str]| Crate {
        name: name.to_string(),
        uses: uses.iter().map(|u| u.to_string()).collect(),
    };
    let cases: &[(Vec<Crate>, &[&str])] = &[
        (
            vec![
                krate("k", &[]),
                krate("core", &["k"]),
                krate("cli", &["core", "k"]),
            ],
            &[],
        ),
        (
            vec![
                krate("k", &["core"]),
                krate("ort", &["core"]),
                krate("new", &[]),
            ],
            &[
                "crate `k` depends on `core`, which is not below it",
                "crate `ort` depends on `core`, which is not below it",
                "crate `new` is in no step of ARCHITECTURE.md's crates",
            ],
        ),
    ];
    for (crates, expected) in cases {
        let got = crate_violations(crates, &order);
        let got: Vec<&str> = got
            .iter()
            .map(|m| m.split(" (").next().unwrap_or(m))
            .collect();
        assert_eq!(&got, expected);
    }
}

fn architecture_layers() -> Vec<Vec<String>> {
    layers_from_architecture(&architecture_text())
}

#[test]
fn imports_go_down_the_layers() {
    let problems = layer_violations(&library_sources(), &architecture_layers());
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn files_of_one_directory_import_each_other_in_no_circle() {
    let problems = sibling_cycles(&all_sources());
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn long_files_say_why_they_are_one_file() {
    let unexplained = long_files_without_a_reason(&all_sources());
    assert!(unexplained.is_empty(), "{}", unexplained.join("\n"));
}

#[test]
fn every_module_of_the_library_is_in_a_layer() {
    let placed: BTreeSet<String> = architecture_layers().into_iter().flatten().collect();
    let libs: Vec<String> = LIBRARY_ROOTS
        .iter()
        .map(|root| {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(root)
                .join("lib.rs");
            std::fs::read_to_string(path).expect("the crate's lib.rs is readable")
        })
        .collect();
    let missing: Vec<&str> = libs
        .iter()
        .flat_map(|lib| lib.lines())
        .filter_map(|l| {
            l.strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("mod "))
        })
        .map(|l| l.trim_end_matches(';'))
        .filter(|m| !placed.contains(*m))
        .collect();
    assert!(missing.is_empty(), "modules in no layer: {missing:?}");
}

/// A case of the checks: source files (path under `src/`, text), then the messages expected.
type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);

fn source(rel: &str, text: &str) -> Source {
    Source {
        root: "src",
        rel: PathBuf::from(rel),
        text: text.to_string(),
    }
}

fn layers(line: &str) -> Vec<Vec<String>> {
    layers_from_architecture(&format!("# A\n\n## Layers\n\n```\n{line}\n```\n"))
}

/// Each case: files, then the messages the layer check gives (empty: accepted).
#[test]
fn layer_check_cases() {
    let order = layers("dtype → ir → ops → interp, pass → io");
    let cases: &[Case] = &[
        // Downwards, through a group, a root re-export, and a climb that stays inside.
        (
            &[
                ("ops/nn/conv.rs", "use crate::{ir::Graph, DataType};\nuse super::super::util;"),
                ("io.rs", "use crate::interp::Session;\nfn f() { crate::ops::registry(); }"),
            ],
            &[],
        ),
        // An import that goes up a layer.
        (
            &[("ops/identity.rs", "use crate::ir::Node;\nuse crate::interp::stored_to_tensor;")],
            &["src/ops/identity.rs:2: `crate::interp::stored_to_tensor` goes up from layer `ops` to `interp`"],
        ),
        // Across a layer, inside a brace group spanning lines.
        (
            &[("pass/lower.rs", "use crate::{\n    ir::Dim,\n    interp::Session,\n};")],
            &["src/pass/lower.rs:1: `crate::interp::Session` goes across from layer `pass` to `interp`"],
        ),
        // A `super` chain that climbs out of its top-level module.
        (
            &[("ir/mod.rs", "use super::ops::registry;")],
            &["src/ir/mod.rs:1: `super::ops::registry` goes up from layer `ir` to `ops`"],
        ),
        // Comments, strings and test modules are not imports.
        (
            &[(
                "ir/types.rs",
                "//! See [`crate::io`].\nconst S: &str = \"crate::io\";\n#[cfg(test)]\nmod tests {\n    use crate::io::load;\n}\n",
            )],
            &[],
        ),
        // A module missing from the layers.
        (
            &[("verify.rs", "")],
            &["src/verify.rs: module `verify` is in no layer of ARCHITECTURE.md"],
        ),
    ];
    for (files, expected) in cases {
        let sources: Vec<Source> = files.iter().map(|(p, t)| source(p, t)).collect();
        let got = layer_violations(&sources, &order);
        let got: Vec<&str> = got
            .iter()
            .map(|m| m.split(" (layers").next().unwrap_or(m))
            .collect();
        assert_eq!(&got, expected, "files {files:?}");
    }
}

#[test]
fn sibling_cycle_cases() {
    let cases: &[Case] = &[
        (
            &[
                ("gather/fast/offsets.rs", "use super::simd::SimdLevel;"),
                ("gather/fast/simd/mod.rs", "use super::rows::Word;"),
                ("gather/fast/rows.rs", "use super::offsets::Offset;"),
            ],
            &["src/gather/fast/: the files offsets → simd → rows → offsets import each other in a circle"],
        ),
        (
            &[
                ("gather/fast/offsets.rs", "use super::elem::{Offset, SimdLevel};"),
                ("gather/fast/simd/mod.rs", "use super::elem::Word;\nmod x86;"),
                ("gather/fast/simd/x86.rs", "use super::super::rows::Word;"),
                ("gather/fast/rows.rs", "use super::{elem::Word, simd::prefetch};"),
                ("gather/fast/elem.rs", ""),
            ],
            &[],
        ),
    ];
    for (files, expected) in cases {
        let sources: Vec<Source> = files.iter().map(|(p, t)| source(p, t)).collect();
        assert_eq!(&sibling_cycles(&sources), expected, "files {files:?}");
    }
}

#[test]
fn long_file_cases() {
    let long = "fn f() {}\n".repeat(LONG_FILE_LINES);
    let cases = [
        ("short.rs", "//! Short.\n".to_owned(), true),
        ("bare.rs", format!("//! Long.\n{long}"), false),
        (
            "reason.rs",
            format!("//! Long.\n//!\n//! Why one file: one loop.\n{long}"),
            true,
        ),
        (
            "below.rs",
            format!("//! Long.\n\n// Why one file: too late.\n{long}"),
            false,
        ),
    ];
    for (name, text, fine) in cases {
        let found = long_files_without_a_reason(&[source(name, &text)]);
        assert_eq!(found.is_empty(), fine, "{name}: {found:?}");
    }
}
