//! A position index of a YAML document: key path → line/column.
//!
//! Built from the YAML event stream (with source spans) so that semantic errors found on the
//! typed model can be reported at the place in the file where the offending key is written.
//! Paths use the same syntax as the error messages: `listeners.mirror.port_base`,
//! `mirrors[1].topics[0]`; the root is the empty string.

use saphyr_parser::{Event, Marker, Parser};
use std::collections::HashMap;

/// A 1-based line and 1-based column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

impl Pos {
    fn from_marker(m: &Marker) -> Pos {
        // saphyr: lines are 1-based, columns 0-based.
        Pos {
            line: m.line().max(1),
            column: m.col() + 1,
        }
    }
}

/// Where one node of the document is written.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Position of the key, for mapping values.
    key: Option<Pos>,
    /// Position where the value node starts.
    value: Pos,
}

/// Key path → position, for the first document of a YAML text.
#[derive(Debug, Default)]
pub struct PosIndex {
    entries: HashMap<String, Entry>,
    /// Paths in document order with the start of their value, for location → path lookups.
    order: Vec<(Pos, String)>,
    /// When the YAML parser failed: the path being parsed at the failure and where it failed.
    pub syntax_error: Option<(String, Pos, String)>,
}

/// Upper bound on events processed, a guard against pathological inputs.
const MAX_EVENTS: usize = 1_000_000;

enum Role {
    Key,
    Value,
}

struct Frame {
    /// Path of this container; `None` inside complex (non-scalar) keys, which are not indexed.
    path: Option<String>,
    kind: FrameKind,
}

enum FrameKind {
    Map {
        next: Role,
        key: Option<(String, Pos)>,
    },
    Seq {
        index: usize,
    },
}

/// Appends a mapping key to a path.
pub fn join_key(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// Appends a sequence index to a path.
pub fn join_index(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// The parent of a path: `a.b[2]` → `a.b`, `a.b` → `a`, `a` → ``.
pub fn parent_path(path: &str) -> &str {
    match path.rfind(['.', '[']) {
        Some(i) => &path[..i],
        None => "",
    }
}

impl PosIndex {
    /// Builds the index. Never fails: on a syntax error the index holds what was read before it
    /// and `syntax_error` says where parsing stopped.
    pub fn build(text: &str) -> PosIndex {
        let mut idx = PosIndex::default();
        let mut stack: Vec<Frame> = Vec::new();
        let mut seen_doc = false;
        let parser = Parser::new_from_str(text);
        for (n, item) in parser.enumerate() {
            if n > MAX_EVENTS {
                break;
            }
            let (event, span) = match item {
                Ok(ev) => ev,
                Err(e) => {
                    let path = current_path(&stack);
                    let pos = Pos::from_marker(e.marker());
                    idx.syntax_error = Some((path, pos, e.info().to_string()));
                    break;
                }
            };
            let start = Pos::from_marker(&span.start);
            match event {
                Event::StreamStart | Event::Nothing => {}
                Event::StreamEnd => break,
                Event::DocumentStart(_) => {
                    if seen_doc {
                        break; // only the first document is indexed
                    }
                    seen_doc = true;
                }
                Event::DocumentEnd => {
                    if stack.is_empty() {
                        break;
                    }
                }
                Event::Scalar(value, ..) => {
                    if let Some(key_slot) = begin_node(&mut idx, &mut stack, start) {
                        *key_slot = Some((value.into_owned(), start));
                    }
                }
                Event::Alias(_) => {
                    if let Some(key_slot) = begin_node(&mut idx, &mut stack, start) {
                        *key_slot = Some(("*".to_string(), start));
                    }
                }
                Event::SequenceStart(..) | Event::MappingStart(..) => {
                    let is_map = matches!(event, Event::MappingStart(..));
                    let path = match stack.last() {
                        None => Some(String::new()),
                        Some(_) => None,
                    };
                    let path = match begin_node(&mut idx, &mut stack, start) {
                        // A container used as a mapping key: record a placeholder key, do not
                        // index its contents.
                        Some(key_slot) => {
                            *key_slot = Some(("?".to_string(), start));
                            None
                        }
                        None => path.or_else(|| last_child_path(&stack)),
                    };
                    let kind = if is_map {
                        FrameKind::Map {
                            next: Role::Key,
                            key: None,
                        }
                    } else {
                        FrameKind::Seq { index: 0 }
                    };
                    stack.push(Frame { path, kind });
                }
                Event::SequenceEnd | Event::MappingEnd => {
                    stack.pop();
                }
            }
        }
        idx
    }

    /// The position of a path: its key when it is a mapping value, else where its value starts.
    /// Falls back to the nearest ancestor present in the document, then to the document start.
    pub fn lookup(&self, path: &str) -> Option<Pos> {
        let mut p = path;
        loop {
            if let Some(e) = self.entries.get(p) {
                return Some(e.key.unwrap_or(e.value));
            }
            if p.is_empty() {
                return None;
            }
            p = parent_path(p);
        }
    }

    /// Like [`Self::lookup`], but only for a path written in the document.
    pub fn lookup_exact(&self, path: &str) -> Option<Pos> {
        self.entries.get(path).map(|e| e.key.unwrap_or(e.value))
    }

    /// The position where the value of `path` starts (for a mapping: its first key).
    pub fn value_pos(&self, path: &str) -> Option<Pos> {
        self.entries.get(path).map(|e| e.value)
    }

    /// The path of the last node starting at or before `pos`.
    pub fn path_at(&self, pos: Pos) -> Option<&str> {
        let i = self.order.partition_point(|(p, _)| *p <= pos);
        if i == 0 {
            None
        } else {
            Some(self.order[i - 1].1.as_str())
        }
    }
}

/// The path of the container on top of the stack, plus the key or index being read.
fn current_path(stack: &[Frame]) -> String {
    match stack.last() {
        None => String::new(),
        Some(Frame { path: None, .. }) => String::new(),
        Some(Frame {
            path: Some(p),
            kind,
        }) => match kind {
            FrameKind::Map {
                next: Role::Value,
                key: Some((k, _)),
            } => join_key(p, k),
            FrameKind::Map { .. } => p.clone(),
            FrameKind::Seq { index } => join_index(p, *index),
        },
    }
}

/// The path recorded by the most recent `begin_node` call for a value in the top frame.
fn last_child_path(stack: &[Frame]) -> Option<String> {
    let top = stack.last()?;
    let p = top.path.as_ref()?;
    match &top.kind {
        // `begin_node` already flipped the role back to Key after the value began.
        FrameKind::Map {
            key: Some((k, _)), ..
        } => Some(join_key(p, k)),
        FrameKind::Map { key: None, .. } => None,
        // `begin_node` already advanced the index.
        FrameKind::Seq { index } => Some(join_index(p, index.saturating_sub(1))),
    }
}

/// Registers the start of a node in the current container. Returns the key slot when the node
/// is a mapping key (the caller fills it in), `None` when it is a value or the root.
fn begin_node<'a>(
    idx: &mut PosIndex,
    stack: &'a mut [Frame],
    start: Pos,
) -> Option<&'a mut Option<(String, Pos)>> {
    let Some(top) = stack.last_mut() else {
        record(idx, String::new(), None, start);
        return None;
    };
    let parent = top.path.clone();
    match &mut top.kind {
        FrameKind::Map { next, key } => match next {
            Role::Key => {
                *next = Role::Value;
                Some(key)
            }
            Role::Value => {
                *next = Role::Key;
                if let (Some(p), Some((k, kpos))) = (parent, key.as_ref()) {
                    record(idx, join_key(&p, k), Some(*kpos), start);
                }
                None
            }
        },
        FrameKind::Seq { index } => {
            let i = *index;
            *index += 1;
            if let Some(p) = parent {
                record(idx, join_index(&p, i), None, start);
            }
            None
        }
    }
}

fn record(idx: &mut PosIndex, path: String, key: Option<Pos>, value: Pos) {
    let at = key.unwrap_or(value);
    idx.order.push((at, path.clone()));
    idx.entries.insert(path, Entry { key, value });
}
