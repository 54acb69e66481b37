//! Import circles between the files of a Rust crate.
//!
//! A crate's files form a graph: file A points at file B when A names an item B declares: in
//! a `use` declaration, in a path written in its code or in a macro call's tokens (`crate::…`,
//! `super::…`, `self::…`, a child module's name). A name a module re-exports is followed to
//! the file that declares it (`use crate::Client` points at `client.rs`, not `lib.rs`). A circle
//! is a set of files that reach each other through such arrows.
//!
//! A module and the modules it declares are one room: the parent (a folder's `mod.rs`, or the
//! file that declares `mod x;`) declares, re-exports and orchestrates its children, and they
//! use what it defines for all of them, so an arrow from a module to its own descendants is
//! not counted ([`Rule::Rooms`], what `tests/run` enforces). [`Rule::Strict`] counts them too,
//! except a re-export the parent's own code does not use: it shows where a room's shared
//! definitions still live in its `mod.rs` rather than in a file of their own. Test code
//! (`#[cfg(test)]` items and the files they declare) is left out, since tests may look
//! anywhere.
//!
//! The reader is syntactic (`syn`): it follows `mod name;` to `name.rs` or `name/mod.rs`, knows
//! inline modules, and resolves a path to the deepest module it names, then through that
//! module's re-exports. What it cannot see: a method called on a value (`self.learn_time()`
//! names no path; the file that defines the method is unknown without type checking), and
//! `#[path]` attributes (none in ferry).

mod graph;
mod syntax;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use syn::visit::Visit as _;

pub use graph::{Arrow, Circle, circles_of};
use syntax::{PathsSeen, Used, declared_name, flatten_use, is_reexport, is_test_only};

/// A module of the crate: the file that holds it, the names it declares, and what it
/// re-exports.
#[derive(Debug, Clone, Default)]
struct Module {
    file: PathBuf,
    names: BTreeSet<String>,
    reexports: Vec<Used>,
}

/// One path written in a file: the module it is written in, its segments, and, for a
/// re-export (`pub use`), the name it is known by.
#[derive(Debug, Clone)]
struct Written {
    file: PathBuf,
    at: Vec<String>,
    path: Vec<String>,
    reexport: Option<String>,
}

/// Why a crate could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// A file could not be read.
    Io(PathBuf, std::io::Error),
    /// A file is not Rust `syn` can parse.
    Parse(PathBuf, syn::Error),
    /// `mod name;` names a file that is neither `name.rs` nor `name/mod.rs`.
    MissingModule(PathBuf, String),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(p, e) => write!(f, "{}: {e}", p.display()),
            Self::Parse(p, e) => write!(f, "{}: not parseable: {e}", p.display()),
            Self::MissingModule(p, m) => {
                write!(f, "{}: `mod {m};` has no file", p.display())
            }
        }
    }
}

impl std::error::Error for ReadError {}

/// Which arrows from a module to its own descendants count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// None: a parent and its children are one room (what `tests/run` enforces).
    Rooms,
    /// All but a re-export the parent's code does not use.
    Strict,
}

/// A crate read from its root file: its modules and the arrows between its files.
#[derive(Debug, Default)]
pub struct Crate {
    modules: BTreeMap<Vec<String>, Module>,
    paths: Vec<Written>,
    /// Per file, the single names its code uses (a re-exported name used there is imported).
    used: BTreeMap<PathBuf, BTreeSet<String>>,
}

impl Crate {
    /// Reads the crate whose root is `root` (`lib.rs` or `main.rs`).
    pub fn read(root: &Path) -> Result<Self, ReadError> {
        let mut krate = Crate::default();
        krate.read_file(root, Vec::new(), true)?;
        Ok(krate)
    }

    fn read_file(&mut self, file: &Path, at: Vec<String>, owns_dir: bool) -> Result<(), ReadError> {
        let text = std::fs::read_to_string(file).map_err(|e| ReadError::Io(file.into(), e))?;
        let parsed = syn::parse_file(&text).map_err(|e| ReadError::Parse(file.into(), e))?;
        self.modules.insert(
            at.clone(),
            Module {
                file: file.into(),
                ..Module::default()
            },
        );
        // Where `mod x;` files of this file's module live.
        let dir = if owns_dir {
            file.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned());
            file.parent()
                .map(|p| p.join(stem.unwrap_or_default()))
                .unwrap_or_default()
        };
        self.read_items(file, &dir, &at, &parsed.items)
    }

    fn read_items(
        &mut self,
        file: &Path,
        dir: &Path,
        at: &[String],
        items: &[syn::Item],
    ) -> Result<(), ReadError> {
        for item in items {
            if is_test_only(item) {
                continue;
            }
            if let (Some(name), Some(module)) = (declared_name(item), self.modules.get_mut(at)) {
                module.names.insert(name);
            }
            match item {
                syn::Item::Mod(m) => self.read_mod(file, dir, at, m)?,
                syn::Item::Use(u) => {
                    let mut used = Vec::new();
                    flatten_use(&u.tree, &mut Vec::new(), &mut used);
                    let reexport = is_reexport(u);
                    for one in used {
                        if reexport && let Some(module) = self.modules.get_mut(at) {
                            module.reexports.push(one.clone());
                        }
                        let name = one.alias.clone().unwrap_or_else(|| "*".into());
                        self.paths.push(Written {
                            file: file.into(),
                            at: at.to_vec(),
                            path: one.path,
                            reexport: reexport.then_some(name),
                        });
                    }
                }
                other => {
                    let mut seen = PathsSeen::default();
                    seen.visit_item(other);
                    for path in seen.paths {
                        self.paths.push(Written {
                            file: file.into(),
                            at: at.to_vec(),
                            path,
                            reexport: None,
                        });
                    }
                    self.used
                        .entry(file.into())
                        .or_default()
                        .extend(seen.idents);
                }
            }
        }
        Ok(())
    }

    fn read_mod(
        &mut self,
        file: &Path,
        dir: &Path,
        at: &[String],
        m: &syn::ItemMod,
    ) -> Result<(), ReadError> {
        let name = m.ident.to_string();
        let mut inner = at.to_vec();
        inner.push(name.clone());
        match &m.content {
            Some((_, items)) => {
                self.modules.insert(
                    inner.clone(),
                    Module {
                        file: file.into(),
                        ..Module::default()
                    },
                );
                self.read_items(file, &dir.join(&name), &inner, items)
            }
            None => {
                let flat = dir.join(format!("{name}.rs"));
                let nested = dir.join(&name).join("mod.rs");
                if flat.is_file() {
                    self.read_file(&flat, inner, false)
                } else if nested.is_file() {
                    self.read_file(&nested, inner, true)
                } else {
                    Err(ReadError::MissingModule(file.into(), name))
                }
            }
        }
    }

    /// Where a path written in module `at` starts: the module its first segments name and the
    /// segments left; `None` for a path outside the crate (another crate, the prelude, a
    /// local name).
    fn start<'p>(&self, at: &[String], path: &'p [String]) -> Option<(Vec<String>, &'p [String])> {
        let first = path.first()?;
        match first.as_str() {
            "crate" => Some((Vec::new(), &path[1..])),
            "self" => Some((at.to_vec(), &path[1..])),
            "super" => {
                let mut base = at.to_vec();
                let mut rest = path;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                Some((base, rest))
            }
            name => {
                let mut child = at.to_vec();
                child.push(name.to_string());
                self.modules
                    .contains_key(&child)
                    .then(|| (at.to_vec(), path))
            }
        }
    }

    /// The module that declares what a path written in module `at` names: as deep as the
    /// crate's modules go, then through the re-exports of the module reached (at most `hops`
    /// of them); `None` for a path outside the crate.
    fn resolve(&self, at: &[String], path: &[String], hops: usize) -> Option<Vec<String>> {
        let (mut module, rest) = self.start(at, path)?;
        let mut rest = rest.iter();
        let mut item = None;
        for seg in rest.by_ref() {
            module.push(seg.clone());
            if !self.modules.contains_key(&module) {
                module.pop();
                item = Some(seg.clone());
                break;
            }
        }
        let Some(item) = item else {
            return Some(module);
        };
        Some(
            self.through_reexports(&module, &item, hops)
                .unwrap_or(module),
        )
    }

    /// The module that declares `name`, when `module` does not but re-exports it.
    fn through_reexports(&self, module: &[String], name: &str, hops: usize) -> Option<Vec<String>> {
        let m = self.modules.get(module)?;
        if hops == 0 || m.names.contains(name) {
            return None;
        }
        for r in &m.reexports {
            match &r.alias {
                Some(alias) if alias == name => {
                    return self.resolve(module, &r.path, hops - 1);
                }
                None => {
                    // A glob: the module it names, if that module has the name.
                    // A glob of another crate's names (`pub use std::x::*`) is not ours.
                    let Some(target) = self.resolve(module, &r.path, hops - 1) else {
                        continue;
                    };
                    let Some(t) = self.modules.get(&target) else {
                        continue;
                    };
                    if t.names.contains(name) {
                        return Some(target);
                    }
                    if let Some(deeper) = self.through_reexports(&target, name, hops - 1) {
                        return Some(deeper);
                    }
                }
                Some(_) => {}
            }
        }
        None
    }

    /// Every arrow between two files of the crate under `rule`, merged per pair.
    pub fn arrows(&self, rule: Rule) -> Vec<Arrow> {
        let mut by_pair: BTreeMap<(PathBuf, PathBuf), BTreeSet<String>> = BTreeMap::new();
        // Each file's own module: the shortest module path it holds.
        let mut own: BTreeMap<&Path, &Vec<String>> = BTreeMap::new();
        for (path, m) in &self.modules {
            let slot = own.entry(m.file.as_path()).or_insert(path);
            if path.len() < slot.len() {
                *slot = path;
            }
        }
        for w in &self.paths {
            let Some(target) = self.resolve(&w.at, &w.path, 8) else {
                continue;
            };
            let Some(module) = self.modules.get(&target) else {
                continue;
            };
            if module.file == w.file {
                continue;
            }
            let to_descendant = own
                .get(w.file.as_path())
                .is_some_and(|own| target.starts_with(own));
            let owning = match (rule, &w.reexport) {
                (Rule::Rooms, _) => to_descendant,
                // A re-export of a descendant's name that this file's code does not use.
                (Rule::Strict, Some(name)) => {
                    to_descendant && !self.used.get(&w.file).is_some_and(|u| u.contains(name))
                }
                (Rule::Strict, None) => false,
            };
            if owning {
                continue;
            }
            let name = w.path.last().cloned().unwrap_or_default();
            by_pair
                .entry((w.file.clone(), module.file.clone()))
                .or_default()
                .insert(name);
        }
        by_pair
            .into_iter()
            .map(|((from, to), names)| Arrow { from, to, names })
            .collect()
    }

    /// The circles among the crate's files under `rule` (strongly connected sets of two files
    /// or more).
    pub fn circles(&self, rule: Rule) -> Vec<Circle> {
        circles_of(&self.arrows(rule))
    }
}

#[cfg(test)]
mod tests;
