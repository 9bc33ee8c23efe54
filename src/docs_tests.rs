//! Checks of the documentation (tests only; nothing here runs in the gateway).
//!
//! Owns: the rules that keep `README.md` and the `docs/` book navigable — every relative link
//! and anchor resolves, `docs/SUMMARY.md` lists every page, the README stays a short front page,
//! and every `docs/PAGE.md#anchor` that the code, configuration, dashboards or scripts cite
//! (error messages tell operators where to read) exists. Must not touch: anything at run time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The lines of a markdown text outside fenced code blocks.
fn outside_code_blocks(markdown: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    markdown.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// The anchor a heading gets (GitHub's and mdBook's rule): lower case, letters, digits, `-` and
/// `_` kept, whitespace turned into `-`, everything else dropped; a repeated heading gets `-1`,
/// `-2`, ….
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in outside_code_blocks(markdown) {
        if !line.starts_with('#') {
            continue;
        }
        let text = line.trim_start_matches('#').trim();
        let slug: String = text
            .chars()
            .filter_map(|c| {
                if c.is_alphanumeric() || c == '-' || c == '_' {
                    Some(c.to_ascii_lowercase())
                } else if c.is_whitespace() {
                    Some('-')
                } else {
                    None
                }
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// Relative link targets `](target)` of a markdown text, outside fenced code blocks.
fn links(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in outside_code_blocks(markdown) {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            if !target.contains("://") && !target.starts_with("mailto:") {
                out.push(target.to_string());
            }
            rest = &rest[end..];
        }
    }
    out
}

/// Whether `target` (a path relative to `from_dir`, with an optional `#anchor`) exists; the
/// reason when not.
fn check_target(from_dir: &Path, target: &str, current: &str) -> Result<(), String> {
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let text = if path.is_empty() {
        current.to_string()
    } else {
        let file = from_dir.join(path);
        if !file.exists() {
            return Err(format!("{target}: no file {}", file.display()));
        }
        if anchor.is_none() || !path.ends_with(".md") {
            return Ok(());
        }
        std::fs::read_to_string(&file).map_err(|e| format!("{target}: {e}"))?
    };
    match anchor {
        Some(a) if !anchors(&text).contains(a) => Err(format!("{target}: no heading #{a}")),
        _ => Ok(()),
    }
}

fn markdown_pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

#[test]
fn every_relative_link_and_anchor_in_the_readme_and_the_docs_resolves() {
    let mut broken = Vec::new();
    for page in markdown_pages() {
        let text = std::fs::read_to_string(&page).expect("page");
        let dir = page.parent().expect("dir");
        for target in links(&text) {
            if let Err(e) = check_target(dir, &target, &text) {
                broken.push(format!("{}: {e}", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_book_summary_lists_every_docs_page() {
    let summary = std::fs::read_to_string(repo().join("docs/SUMMARY.md")).expect("SUMMARY.md");
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    let missing: Vec<String> = markdown_pages()
        .iter()
        .filter(|p| p.parent() == Some(&repo().join("docs")))
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| n != "SUMMARY.md" && !listed.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "pages not in docs/SUMMARY.md: {missing:?}"
    );
}

#[test]
fn the_readme_stays_a_short_front_page() {
    let size = std::fs::metadata(repo().join("README.md"))
        .expect("README.md")
        .len();
    assert!(
        size <= 12 * 1024,
        "README.md is {size} bytes: details belong in docs/"
    );
}

/// `docs/PAGE.md` or `docs/PAGE.md#anchor` citations in a text.
fn citations(text: &str) -> Vec<String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("docs/") {
        rest = &rest[i + 5..];
        let name_len = rest.find(|c: char| !word(c)).unwrap_or(rest.len());
        if !rest[name_len..].starts_with(".md") {
            continue;
        }
        let mut end = name_len + 3;
        if rest[end..].starts_with('#') {
            end += 1 + rest[end + 1..]
                .find(|c: char| !word(c))
                .unwrap_or(rest.len() - end - 1);
        }
        out.push(rest[..end].to_string());
        rest = &rest[end..];
    }
    out
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | "corpus" | "artifacts" | ".git") {
                files_under(&p, out);
            }
        } else {
            out.push(p);
        }
    }
}

#[test]
fn every_docs_page_and_anchor_cited_by_the_code_exists() {
    let root = repo();
    let mut files = Vec::new();
    for dir in ["src", "config", "dashboards", "integration", "fuzz", ".ci"] {
        files_under(&root.join(dir), &mut files);
    }
    files.push(root.join("docker-compose.yml"));
    let mut cited = 0;
    let mut broken = Vec::new();
    // This file's own examples are not citations.
    files.retain(|f| !f.ends_with("src/docs_tests.rs"));
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        for c in citations(&text) {
            cited += 1;
            if let Err(e) = check_target(&root.join("docs"), &c, "") {
                broken.push(format!("{}: docs/{e}", f.display()));
            }
        }
    }
    assert!(cited > 0, "no citation found: the scan is broken");
    assert!(
        broken.is_empty(),
        "broken citations:\n{}",
        broken.join("\n")
    );
}

/// The repository stands on its own: no source file points at design notes kept outside it.
#[test]
fn the_code_cites_no_document_outside_the_repository() {
    let mut files = Vec::new();
    for dir in ["src", "integration/tests", "fuzz", "config"] {
        files_under(&repo().join(dir), &mut files);
    }
    files.retain(|f| !f.ends_with("src/docs_tests.rs"));
    let outside = ["DESIGN §", "reference/", "../shared", "psm-spec"];
    let mut found = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if outside.iter().any(|o| line.contains(o)) {
                found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "citations of documents outside the repository (say it in docs/ instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn citations_are_found_with_and_without_an_anchor() {
    assert_eq!(
        citations("see docs/failover.md#recovering-mirror-state, and docs/psm.md."),
        vec!["failover.md#recovering-mirror-state", "psm.md"]
    );
    assert_eq!(citations("docs/ alone, docs/x.txt"), Vec::<String>::new());
}

#[test]
fn anchors_follow_the_heading_rule_and_number_repeats() {
    let a = anchors("# A `b`: c\n```\n# not a heading\n```\n## Tests\n## Tests\n");
    assert_eq!(
        a,
        BTreeSet::from(["a-b-c".to_string(), "tests".into(), "tests-1".into()])
    );
}

/// Repository paths (`src/….rs`, `integration/…`, `fuzz/…`, `benches/…`) written in a text.
fn repo_paths(text: &str) -> Vec<String> {
    let path_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '.');
    let mut out = Vec::new();
    for prefix in ["src/", "integration/", "fuzz/", "benches/"] {
        let mut rest = text;
        while let Some(i) = rest.find(prefix) {
            let before = text.len() - rest.len() + i;
            let starts_word = text[..before]
                .chars()
                .next_back()
                .is_none_or(|c| !path_char(c));
            let len = rest[i..]
                .find(|c: char| !path_char(c))
                .unwrap_or(rest.len() - i);
            let path = rest[i..i + len].trim_end_matches('.');
            if starts_word && path.len() > prefix.len() && !path.contains('*') {
                out.push(path.to_string());
            }
            rest = &rest[i + len.max(1)..];
        }
    }
    out
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    for page in markdown_pages() {
        let text = std::fs::read_to_string(&page).expect("page");
        for path in repo_paths(&text) {
            if !repo().join(&path).exists() {
                missing.push(format!("{}: {path}", page.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn repository_paths_are_found_inside_prose_and_not_inside_other_words() {
    let text = "see `src/proxy/connection.rs` and integration/rig. Not mysrc/x.rs or src/*.rs";
    assert_eq!(
        repo_paths(text),
        vec!["src/proxy/connection.rs", "integration/rig"]
    );
}

/// The module path of a source file under `root`: `a/b.rs` and `a/b/mod.rs` are `a::b`.
fn module_path(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    parts.join("::")
}

/// The modules of the files `root`'s sources include with `#[path = "F"] mod NAME;`: the
/// declaring file's module and `NAME` (`controller/tests.rs` is `controller::tests`).
fn path_declared_modules(root: &Path, files: &[std::path::PathBuf]) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let mut declared: Option<String> = None;
        for line in text.lines() {
            let l = line.trim();
            if let Some(rest) = l.strip_prefix("#[path = \"") {
                declared = rest.split('"').next().map(str::to_string);
                continue;
            }
            let Some(target) = declared.take() else {
                continue;
            };
            let name = l
                .trim_start_matches("pub(crate) ")
                .strip_prefix("mod ")
                .and_then(|r| r.strip_suffix(';'));
            if let (Some(name), Some(dir)) = (name, f.parent()) {
                let here = module_path(root, f);
                let module = if here.is_empty() {
                    name.to_string()
                } else {
                    format!("{here}::{name}")
                };
                out.insert(dir.join(target), module);
            }
        }
    }
    out
}

/// The full paths of the tests in `root` (`#[test]` / `#[tokio::test]` functions), as `cargo
/// test` prints them: integration tests by their file, unit tests (in `src/`) with the test
/// module they live in (a file of its own, included with `#[path]` or as `mod *_tests`, or an
/// inline `mod tests`).
fn test_paths(root: &Path, unit: bool) -> BTreeSet<String> {
    let mut files = Vec::new();
    files_under(root, &mut files);
    let declared = path_declared_modules(root, &files);
    let mut out = BTreeSet::new();
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|x| x == "rs"))
    {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let mut module = declared
            .get(f)
            .cloned()
            .unwrap_or_else(|| module_path(root, f));
        let test_module =
            module == "tests" || module.ends_with("::tests") || module.ends_with("_tests");
        if unit && !test_module {
            module = format!("{module}::tests");
        }
        let mut armed = false;
        for line in text.lines() {
            let l = line.trim_start();
            if l.starts_with("#[test]") || l.starts_with("#[tokio::test") {
                armed = true;
            } else if armed {
                if let Some(rest) = l
                    .strip_prefix("fn ")
                    .or_else(|| l.strip_prefix("async fn "))
                {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    out.insert(format!("{module}::{name}"));
                    armed = false;
                }
            }
        }
    }
    out
}

/// `module::test` citations in a text whose first segment is one of `modules`.
fn test_citations(text: &str, modules: &BTreeSet<String>) -> Vec<String> {
    let token =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | ':' | '*');
    let mut out = Vec::new();
    for word in text.split(|c: char| !token(c)) {
        let word = word.trim_start_matches(':');
        let Some((first, _)) = word.split_once("::") else {
            continue;
        };
        if modules.contains(first) {
            out.push(word.trim_end_matches('*').to_string());
        }
    }
    out
}

#[test]
fn every_test_the_docs_cite_by_name_exists_at_that_path() {
    let integration = repo().join("integration/tests");
    let mut modules: BTreeSet<String> = std::fs::read_dir(&integration)
        .expect("integration/tests")
        .filter_map(|e| e.ok())
        .map(|e| module_path(&integration, &e.path()))
        .filter(|m| !matches!(m.as_str(), "main" | "harness"))
        .collect();
    modules.remove("");
    let mut tests = test_paths(&integration, false);
    tests.extend(test_paths(&repo().join("src"), true));
    let mut missing = Vec::new();
    for page in markdown_pages() {
        let text = std::fs::read_to_string(&page).expect("page");
        for cited in test_citations(&text, &modules) {
            let found = tests
                .iter()
                .any(|t| t.starts_with(&cited) || t.contains(&format!("::{cited}")));
            if !found {
                missing.push(format!("{}: {cited}", page.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "tests cited by a path that `cargo test` would not match:\n{}",
        missing.join("\n")
    );
}

#[test]
fn test_citations_keep_prefixes_and_skip_other_modules() {
    let modules: BTreeSet<String> = ["failover".to_string()].into();
    let text = "run `failover::disruptive_gateway_killed_*` or failover::x; not mirror::state::y";
    assert_eq!(
        test_citations(text, &modules),
        vec!["failover::disruptive_gateway_killed_", "failover::x"]
    );
}
