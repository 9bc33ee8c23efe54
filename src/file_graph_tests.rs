//! No circle of source files importing each other (tests only; nothing here runs in the gateway).
//!
//! Owns: the graph of references between the files under `src/` (library and binaries, test code
//! excluded) and the check that it has no circle. `architecture_tests.rs` checks the same between
//! the top-level modules; this is the finer grain inside them.
//!
//! An edge `a.rs → b.rs` is a `crate::…` or `super::…` path in `a.rs`'s non-test code that names
//! `b.rs`'s module or an item in it (the longest module prefix of the path that is a file),
//! re-exports (`pub use`) included. A file naming one of its own submodules (`mod x;`, `x::…`,
//! `self::x::…`) is not an edge: a module's file contains its children, it is their front door,
//! not a peer of theirs. A child naming its parent's items *is* an edge.
//!
//! So a circle is two or more files, none containing another, that reach each other: a seam is
//! missing (a trait the owner implements, or the shared types moved to a file of their own).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::architecture_tests::{non_test_lines, non_test_sources};

/// A module path: `["mirror", "admission"]` for `src/mirror/admission.rs`; a binary's files start
/// with `"bin"` and its name (`["bin", "mirrorgate-bench", "proxy"]`); `src/main.rs` is `["main"]`.
type ModPath = Vec<String>;

/// The module path of a file, relative to `src/`.
fn module_of(rel: &Path) -> ModPath {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs").to_string();
    }
    match parts.as_slice() {
        [one] if one == "lib" => Vec::new(),
        [..] if parts.last().is_some_and(|l| l == "mod") => {
            parts.pop();
            parts
        }
        [b, _, ..] if b == "bin" && parts.len() == 3 && parts[2] == "main" => {
            parts.pop();
            parts
        }
        _ => parts,
    }
}

/// The root of the crate a module belongs to: the library's (empty), a binary's.
fn crate_root(m: &[String]) -> ModPath {
    match m.first().map(String::as_str) {
        Some("bin") => m.iter().take(2).cloned().collect(),
        Some("main") => vec!["main".to_string()],
        _ => Vec::new(),
    }
}

/// `text` without its unit-test module and comments.
fn code_of(text: &str) -> String {
    let end = non_test_lines(text);
    let mut code = String::new();
    for l in text.lines().take(end) {
        code.push_str(l.split("//").next().unwrap_or_default());
        code.push('\n');
    }
    code
}

/// Every path a use tree or an expression names from `crate::` or `super::`, expanded: the text
/// `super::{a::B, c}` gives `super::a::B` and `super::c`.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let start = regex::Regex::new(r"\b(crate|super)::").expect("regex");
    let mut out = Vec::new();
    for m in start.find_iter(code) {
        let i = m.start();
        if i >= 2 && &code[i - 2..i] == "::" {
            continue; // a later segment of a path already read
        }
        // The path runs over identifier characters, `::` and balanced braces.
        let mut end = i;
        let mut depth = 0usize;
        while end < bytes.len() {
            let c = bytes[end] as char;
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ';' if depth > 0 => break,
                c if depth == 0 && !(c.is_ascii_alphanumeric() || c == '_' || c == ':') => break,
                _ => {}
            }
            end += 1;
        }
        expand(&[], &code[i..end], &mut out);
    }
    out
}

/// Expand the use tree `tree` under `prefix` into `out`.
fn expand(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = segments(&tree[..open]);
        let mut base = prefix.to_vec();
        base.extend(head);
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let mut depth = 0usize;
        let mut from = 0;
        for (k, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    expand(&base, &inner[from..k], out);
                    from = k + 1;
                }
                _ => {}
            }
        }
        expand(&base, &inner[from..], out);
    } else {
        let item = tree.split(" as ").next().unwrap_or_default();
        let mut p = prefix.to_vec();
        p.extend(segments(item));
        if !p.is_empty() {
            out.push(p);
        }
    }
}

fn segments(s: &str) -> Vec<String> {
    s.split("::")
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect()
}

/// The file module a path from module `from` lands in (its longest prefix that is a file).
fn resolve(from: &[String], path: &[String], files: &BTreeSet<ModPath>) -> Option<ModPath> {
    let (mut base, rest) = match path.first().map(String::as_str) {
        Some("crate") => (crate_root(from), &path[1..]),
        _ => {
            let supers = path.iter().take_while(|s| *s == "super").count();
            let keep = from.len().checked_sub(supers)?;
            (from[..keep].to_vec(), &path[supers..])
        }
    };
    base.extend(rest.iter().cloned());
    (0..=base.len())
        .rev()
        .map(|n| base[..n].to_vec())
        .find(|p| files.contains(p))
}

/// File module → the file modules its code names, with the paths that do (for the message).
fn file_edges() -> BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>> {
    let code: BTreeMap<ModPath, String> = non_test_sources()
        .into_iter()
        .map(|(rel, text)| (module_of(&rel), code_of(&text)))
        .collect();
    let known: BTreeSet<ModPath> = code.keys().cloned().collect();
    let mut edges: BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>> = BTreeMap::new();
    for (from, text) in &code {
        let out = edges.entry(from.clone()).or_default();
        for p in paths_in(text) {
            let Some(to) = resolve(from, &p, &known) else {
                continue;
            };
            // Itself, or one of its own submodules: not an edge.
            if to.starts_with(from) {
                continue;
            }
            out.entry(to).or_default().insert(p.join("::"));
        }
    }
    edges
}

/// The strongly connected components of more than one file (Tarjan).
fn circles(edges: &BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>>) -> Vec<Vec<ModPath>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a ModPath) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flat_map(|t| t.keys()) {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    comp.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.found.push(comp);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

fn file_name(m: &[String]) -> String {
    if m.is_empty() {
        "lib".to_string()
    } else {
        m.join("/")
    }
}

/// The circles of `edges`, each with the edges inside it and (at most `why`) paths behind each.
fn circles_report(
    edges: &BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>>,
    why: usize,
) -> Vec<String> {
    let mut report = Vec::new();
    for comp in circles(edges) {
        report.push(format!(
            "circle: {}",
            comp.iter()
                .map(|m| file_name(m))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        for a in &comp {
            for (b, paths) in edges.get(a).into_iter().flatten() {
                if comp.contains(b) {
                    let paths: Vec<&String> = paths.iter().take(why).collect();
                    report.push(format!("  {} -> {}: {paths:?}", file_name(a), file_name(b)));
                }
            }
        }
    }
    report
}

#[test]
fn no_source_files_import_each_other_in_a_circle() {
    let report = circles_report(&file_edges(), usize::MAX);
    assert!(
        report.is_empty(),
        "source files that import each other (add a seam, or move what both need to a file of \
         its own):\n{}",
        report.join("\n")
    );
}

/// The file edges lifted to the parts of each folder: an edge `a → b` (neither containing the
/// other) becomes an edge between the children of their deepest common module on the way to
/// each (`agent/partition.rs → sync/groups/io.rs` is `agent → sync`).
fn part_edges(
    edges: &BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>>,
) -> BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>> {
    let mut out: BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>> = BTreeMap::new();
    for (a, targets) in edges {
        for (b, why) in targets {
            if a.starts_with(b) || b.starts_with(a) {
                continue;
            }
            let k = a.iter().zip(b).take_while(|(x, y)| x == y).count();
            let entry = out
                .entry(a[..=k].to_vec())
                .or_default()
                .entry(b[..=k].to_vec())
                .or_default();
            entry.extend(why.iter().map(|w| format!("{}: {w}", file_name(a))));
        }
    }
    out
}

/// The parts of every folder (its files and subfolders) use each other one way only, so each part
/// could be lifted out with a place in a layer order (`architecture_tests.rs` does this for the
/// top-level modules).
#[test]
fn no_folder_has_parts_that_import_each_other_in_a_circle() {
    let report = circles_report(&part_edges(&file_edges()), 4);
    assert!(
        report.is_empty(),
        "parts of a folder that import each other (add a seam, or move what both need to a part \
         of its own):\n{}",
        report.join("\n")
    );
}

#[test]
fn the_graph_sees_imports_of_siblings_and_parents_but_not_of_own_children() {
    let files: BTreeSet<ModPath> = [
        vec![],
        vec!["a".to_string()],
        vec!["a".to_string(), "b".to_string()],
        vec!["a".to_string(), "c".to_string()],
    ]
    .into_iter()
    .collect();
    let from = vec!["a".to_string(), "b".to_string()];
    let code = code_of(
        "//! super::nope\nuse super::{c::{X, Y as Z}, W};\npub use crate::a::c::V;\nfn f() { crate::a::c::g(); }\n#[cfg(test)]\nmod tests { use super::super::c::T; }\n",
    );
    let mut got: Vec<(String, ModPath)> = paths_in(&code)
        .into_iter()
        .filter_map(|p| Some((p.join("::"), resolve(&from, &p, &files)?)))
        .collect();
    got.sort();
    let a = vec!["a".to_string()];
    let c = vec!["a".to_string(), "c".to_string()];
    assert_eq!(
        got,
        vec![
            ("crate::a::c::V".to_string(), c.clone()),
            ("crate::a::c::g".to_string(), c.clone()),
            ("super::W".to_string(), a),
            ("super::c::X".to_string(), c.clone()),
            ("super::c::Y".to_string(), c),
        ]
    );
    assert_eq!(
        module_of(Path::new("bin/mirrorgate-bench/main.rs")),
        vec!["bin", "mirrorgate-bench"]
    );
    assert_eq!(
        module_of(Path::new("proxy/exchange/mod.rs")),
        vec!["proxy", "exchange"]
    );
    assert_eq!(
        crate_root(&["bin".into(), "x".into(), "y".into()]),
        vec!["bin", "x"]
    );
}
