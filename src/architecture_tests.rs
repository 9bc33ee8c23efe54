//! The layering of the top-level modules, checked (tests only; nothing here runs in the gateway).
//!
//! Owns: the allowed direction of `crate::` references between the top-level modules, read from
//! the source files' text (test code excluded). A module may use the modules of lower layers,
//! never one of a higher layer; within a layer only the cycles listed in [`KNOWN_CYCLES`] are
//! tolerated, and that list may only shrink. The binaries (`main.rs`, `bin/`) sit above all of
//! them. Must not touch: anything at run time.

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
    // The destination cluster as the gateway sees it.
    ("cluster", 2),
    // Producer state.
    ("psm", 3),
    // Mirrors: states, failover, the agent.
    ("mirror", 4),
    // Client-facing connections (ask the mirror controller and the PSM for decisions).
    ("proxy", 5),
    // The admin API, reaching the gateway through its `AdminBackend` seam.
    ("admin", 6),
    // Wiring.
    ("app", 7),
];

/// Two-way references that exist today and are to be removed (the list may only shrink):
/// - `net` ↔ `protocol`: the gateway's own SASL login (`net/sasl.rs`) speaks Kafka requests
///   through `protocol/client.rs`, which opens its connections through `net`.
const KNOWN_CYCLES: &[(&str, &str)] = &[("net", "protocol")];

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
        for c in crate_ref.captures_iter(code) {
            let target = c[1].to_string();
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

fn known_cycle(a: &str, b: &str) -> bool {
    KNOWN_CYCLES
        .iter()
        .any(|(x, y)| (*x == a && *y == b) || (*x == b && *y == a))
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
            if lt > lf || (lt == lf && !known_cycle(&from, &to)) {
                wrong.push(format!("{from} (layer {lf}) uses {to} (layer {lt})"));
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn each_tolerated_cycle_still_exists_so_the_list_only_shrinks() {
    let refs = references();
    let uses = |a: &str, b: &str| refs.get(a).is_some_and(|t| t.contains(b));
    let gone: Vec<String> = KNOWN_CYCLES
        .iter()
        .filter(|(a, b)| !(uses(a, b) && uses(b, a)))
        .map(|(a, b)| format!("{a} <-> {b}"))
        .collect();
    assert!(
        gone.is_empty(),
        "cycles no longer there: remove them from KNOWN_CYCLES: {gone:?}"
    );
}
