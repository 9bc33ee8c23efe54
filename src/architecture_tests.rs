//! The layering of the top-level modules, checked (tests only; nothing here runs in the gateway).
//!
//! Owns: the allowed direction of `crate::` references between the top-level modules, read from
//! the source files' text (test code excluded). A module may use the modules of lower layers,
//! never one of its own layer or a higher one, so there is no cycle between them. The binaries
//! (`main.rs`, `bin/`) sit above all of them. Also the size budget of a source file
//! ([`MAX_NON_TEST_LINES`]). Must not touch: anything at run time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers from the bottom: each top-level module of the library and its layer. A new module must
/// be placed here.
const LAYERS: &[(&str, u8)] = &[
    // Foundations: no knowledge of Kafka connections.
    ("config", 0),
    ("metrics", 0),
    ("state", 0),
    // Bytes on the wire and the transport under them.
    ("net", 1),
    ("protocol", 1),
    // The gateway's own Kafka client: connections with its SASL login, requests.
    ("client", 2),
    // The destination cluster as the gateway sees it.
    ("cluster", 3),
    // Producer state.
    ("psm", 4),
    // The audit trail of admin calls, with its writer to a Kafka topic.
    ("audit", 4),
    // A mirror's state of record and the decisions a connection asks of it: partition states,
    // the records and their persistence, admission, the screening set, the failover report.
    ("mirror", 5),
    // Several instances: the state topic, leases, failover fences, adoption.
    ("instances", 6),
    // The failover: the step executor, barrier I/O, the producer-id allocator, preflight.
    ("failover", 7),
    // The one mirror type the gateway holds: wires the parts below, answers the admin calls.
    ("controller", 8),
    // Recovering a failover's un-mirrored tail into quarantine topics.
    ("recovery", 8),
    // Topic config, ACL and consumer group offset sync.
    ("sync", 9),
    // The built-in mirror agent (runs the syncs of its mirrors).
    ("agent", 10),
    // Client-facing connections (ask the mirror policy and the PSM for decisions).
    ("proxy", 11),
    // The admin API, reaching the gateway through its `AdminBackend` seam.
    ("admin", 12),
    // Wiring.
    ("app", 13),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Top-level module → the other top-level modules its non-test code names as `crate::x`.
fn references() -> BTreeMap<String, BTreeSet<String>> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let crate_ref = regex::Regex::new(r"crate::([a-z_]+)").expect("regex");
    let super_ref = regex::Regex::new(r"\bsuper::([a-z_]+)").expect("regex");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).expect("under src");
        let top = rel
            .components()
            .next()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string()
            })
            .unwrap_or_default();
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
        if matches!(top.as_str(), "bin" | "lib" | "main")
            || name.is_some_and(|n| n.contains("tests"))
        {
            continue;
        }
        let text = std::fs::read_to_string(&f).expect("source file");
        // A unit-test module at the end of a file is test code.
        let code = text
            .find("#[cfg(test)]\nmod ")
            .map_or(text.as_str(), |i| &text[..i]);
        // In a top-level module's own file (`src/x.rs`, `src/x/mod.rs`) `super::y` is `crate::y`.
        let root_file = rel.components().count() == 1
            || rel.ends_with("mod.rs") && rel.components().count() == 2;
        let parent_refs: Vec<String> = if root_file {
            super_ref
                .captures_iter(code)
                .map(|c| c[1].to_string())
                .collect()
        } else {
            Vec::new()
        };
        for target in crate_ref
            .captures_iter(code)
            .map(|c| c[1].to_string())
            .chain(parent_refs)
        {
            if target != top {
                out.entry(top.clone()).or_default().insert(target);
            }
        }
        out.entry(top).or_default();
    }
    out
}

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

#[test]
fn every_top_level_module_has_a_layer() {
    let unplaced: Vec<String> = references()
        .into_keys()
        .filter(|m| layer(m).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules without a layer in LAYERS: {unplaced:?}"
    );
}

#[test]
fn no_module_uses_a_module_of_a_higher_layer() {
    let mut wrong = Vec::new();
    for (from, targets) in references() {
        for to in targets {
            let (Some(lf), Some(lt)) = (layer(&from), layer(&to)) else {
                continue;
            };
            if lt >= lf {
                wrong.push(format!("{from} (layer {lf}) uses {to} (layer {lt})"));
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn there_is_no_cycle_between_top_level_modules() {
    let refs = references();
    // Depth-first search; a module met again on the current path closes a cycle.
    fn visit<'a>(
        m: &'a str,
        refs: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
        cycles: &mut Vec<String>,
    ) {
        if let Some(start) = path.iter().position(|p| *p == m) {
            let mut cycle = path[start..].to_vec();
            cycle.push(m);
            cycles.push(cycle.join(" -> "));
            return;
        }
        if !done.insert(m) {
            return;
        }
        path.push(m);
        for t in refs.get(m).into_iter().flatten() {
            visit(t, refs, path, done, cycles);
        }
        path.pop();
    }
    let mut cycles = Vec::new();
    let mut done = BTreeSet::new();
    for m in refs.keys() {
        visit(m, &refs, &mut Vec::new(), &mut done, &mut cycles);
    }
    assert!(
        cycles.is_empty(),
        "cycles between modules:\n{}",
        cycles.join("\n")
    );
}

/// Most lines of non-test code a source file may have: past it, a file holds more than one
/// responsibility and is to be split by them.
const MAX_NON_TEST_LINES: usize = 600;

/// The lines of `text` before its unit-test module (a `#[cfg(test)]` followed by `mod` or a
/// `#[path]` of one), all of them when it has none.
pub(crate) fn non_test_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .iter()
        .enumerate()
        .position(|(i, l)| {
            l.trim() == "#[cfg(test)]"
                && lines
                    .get(i + 1)
                    .is_some_and(|n| n.starts_with("mod ") || n.starts_with("#[path"))
        })
        .unwrap_or(lines.len())
}

/// Every non-test source file under `src/` (not `*tests.rs`): its path relative to `src/` and
/// its text.
pub(crate) fn non_test_sources() -> Vec<(PathBuf, String)> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .filter(|f| {
            !f.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with("tests.rs"))
        })
        .map(|f| {
            let text = std::fs::read_to_string(&f).expect("source file");
            let rel = f.strip_prefix(&src).expect("under src").to_path_buf();
            (rel, text)
        })
        .collect()
}

/// Every non-test source file under `src/` and its non-test line count.
fn non_test_sizes() -> BTreeMap<String, usize> {
    non_test_sources()
        .into_iter()
        .map(|(rel, text)| (rel.to_string_lossy().into_owned(), non_test_lines(&text)))
        .collect()
}

#[test]
fn no_source_file_is_over_the_line_budget() {
    let over: Vec<String> = non_test_sizes()
        .into_iter()
        .filter(|(_, n)| *n > MAX_NON_TEST_LINES)
        .map(|(f, n)| format!("{f}: {n} lines"))
        .collect();
    assert!(
        over.is_empty(),
        "over {MAX_NON_TEST_LINES} lines of non-test code: split by responsibility:\n{}",
        over.join("\n")
    );
}

#[test]
fn the_line_count_stops_at_the_unit_test_module() {
    let text = "fn a() {}\n#[cfg(test)]\nfn helper() {}\n\n#[cfg(test)]\nmod tests {\n}\n";
    assert_eq!(non_test_lines(text), 4);
    let sibling = "fn a() {}\n#[cfg(test)]\n#[path = \"a_tests.rs\"]\nmod tests;\n";
    assert_eq!(non_test_lines(sibling), 1);
    assert_eq!(non_test_lines("fn a() {}\nfn b() {}\n"), 2);
}

/// The module graph as `docs/architecture.md` shows it: one line per top-level module, highest
/// layer first, with the modules its non-test code names.
fn module_graph() -> String {
    let refs = references();
    let mut modules: Vec<(&str, u8)> = LAYERS.to_vec();
    modules.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut out = String::from("```text\nlayer  module      uses\n");
    for (m, l) in modules {
        let uses: Vec<&str> = refs
            .get(m)
            .map(|s| s.iter().map(String::as_str).collect())
            .unwrap_or_default();
        let uses = if uses.is_empty() {
            "-".to_string()
        } else {
            uses.join(", ")
        };
        out.push_str(&format!("{l:>5}  {m:<10}  {uses}\n"));
    }
    out.push_str("```\n");
    out
}

const GRAPH_BEGIN: &str = "<!-- module graph: generated by src/architecture_tests.rs -->\n";
const GRAPH_END: &str = "<!-- end of module graph -->";

/// The graph in the docs is the code's, not a drawing that drifts. To refresh it after a
/// change of imports: `MIRRORGATE_WRITE_MODULE_GRAPH=1 cargo test --lib module_graph`.
#[test]
fn the_module_graph_in_the_architecture_page_is_the_codes() {
    let page = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md");
    let text = std::fs::read_to_string(&page).expect("docs/architecture.md");
    let (Some(b), Some(e)) = (text.find(GRAPH_BEGIN), text.find(GRAPH_END)) else {
        panic!(
            "docs/architecture.md has no module graph between {GRAPH_BEGIN:?} and {GRAPH_END:?}"
        );
    };
    let shown = &text[b + GRAPH_BEGIN.len()..e];
    let graph = module_graph();
    if shown != graph && std::env::var_os("MIRRORGATE_WRITE_MODULE_GRAPH").is_some() {
        let new = format!("{}{}{}", &text[..b + GRAPH_BEGIN.len()], graph, &text[e..]);
        std::fs::write(&page, new).expect("write docs/architecture.md");
        return;
    }
    assert_eq!(
        shown, graph,
        "the module graph in docs/architecture.md is not the code's; run \
         MIRRORGATE_WRITE_MODULE_GRAPH=1 cargo test --lib module_graph"
    );
}

/// The README's map of the code names every top-level module, in layer order from the top, and
/// nothing that is not one.
#[test]
fn the_readmes_map_of_the_code_follows_the_layers() {
    let readme =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .expect("README.md");
    let section = readme
        .split("\n## The code\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README.md has a section \"## The code\"");
    let part = regex::Regex::new(r"`src/([a-z_]+)(?:\.rs)?`").expect("regex");
    let named: Vec<String> = section
        .lines()
        .filter(|l| l.starts_with("| `src/"))
        .flat_map(|l| {
            let cell = l.split('|').nth(1).unwrap_or_default().to_string();
            part.captures_iter(&cell)
                .map(|c| c[1].to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut unknown: Vec<&String> = named.iter().filter(|m| layer(m).is_none()).collect();
    unknown.dedup();
    assert!(
        unknown.is_empty(),
        "the README's map names parts that are not top-level modules: {unknown:?}"
    );
    let missing: Vec<&str> = LAYERS
        .iter()
        .map(|(m, _)| *m)
        .filter(|m| !named.iter().any(|n| n == m))
        .collect();
    assert!(
        missing.is_empty(),
        "the README's map of the code lacks {missing:?}"
    );
    let layers: Vec<u8> = named.iter().filter_map(|m| layer(m)).collect();
    assert!(
        layers.windows(2).all(|w| w[0] >= w[1]),
        "the README's map of the code is not in layer order from the top: {named:?}"
    );
}
